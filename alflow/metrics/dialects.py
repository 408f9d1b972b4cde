"""Framework metrics dialects: two scrapes (or a Prometheus window) -> :class:`SpecStats`.

A ``Protocol`` plus a plain dict (:data:`DIALECTS`) is the whole registry. Every framework quirk
of reading spec-decode counters lives in its class here; metric names come from
:mod:`alflow.metrics.names`. The simulated engine speaks each of the three dialects, so it needs
no class of its own: :func:`detect` recognises whichever it exposes.

- vLLM: ``AL = 1 + Δaccepted_tokens / Δnum_drafts``; per-position counters by ``position``.
- SGLang: only verify calls and generated tokens are counters, so steps = ``Δverify_calls`` and
  accepted drafts = ``Δgeneration_tokens - Δverify_calls`` (approximate: every generated token is
  attributed to a verify step); the windowed ``spec_accept_length`` gauge is a time series only.
- TensorRT-LLM: no draft-count counter; steps = ``Δdrafted_tokens{token_position=<first>}`` (every
  step drafts at position 0), per-position accepted counts by ``token_position``; without the
  per-position counters (``return_perf_metrics``) steps = ``Δdraft_tokens / K`` when K is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import aiohttp
import orjson

from alflow.acceptance.stats import CI_LEVEL, SpecStats, from_counters
from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics import names
from alflow.metrics.prometheus import CounterWindow, Snapshot
from alflow.redact import redact_url, redact_urls_in_text


class MissingMetricsError(AlflowError):
    """The server does not expose the counters a dialect needs (the message says how to enable them)."""


class Dialect(Protocol):
    """How one framework exposes spec-decode counters."""

    name: str
    metrics_path: str

    def matches(self, snapshot: Snapshot) -> bool:
        """True when ``snapshot`` looks like this framework's metrics."""
        ...

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        """Spec-decode statistics over ``window``, with a ``level`` confidence interval of AL."""
        ...

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """What the server says about its speculation beyond the counters, for the run's summary.

        Keys are prefixed with the framework's name; a server that answers nothing useful gives ``{}``
        (a cross-check never fails a run).
        """
        ...


def _need(window: CounterWindow, name: str, hint: str) -> float:
    value = window.increase(name)
    if value is None:
        raise MissingMetricsError(f"metric {name} is not exposed: {hint}")
    return value


def _positions(by_pos: dict[str, float]) -> list[float]:
    try:
        keys = sorted(by_pos, key=int)
    except ValueError as exc:
        raise InvalidInputError(f"non-integer position labels {sorted(by_pos)}") from exc
    return [by_pos[k] for k in keys]


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


class _CountersOnly:
    """A dialect whose server says nothing about speculation beyond its counters."""

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        del base_url, session, headers
        return {}


class VllmDialect(_CountersOnly):
    """vLLM's ``vllm:spec_decode_*`` counters (labels ``model_name``, ``engine``; summed over engines)."""

    name = "vllm"
    metrics_path = names.VLLM_METRICS_PATH

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("vllm:") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "start vLLM with --speculative-config"
        drafts = _need(window, names.VLLM_NUM_DRAFTS, hint)
        accepted = _need(window, names.VLLM_NUM_ACCEPTED_TOKENS, hint)
        draft_tokens = window.increase(names.VLLM_NUM_DRAFT_TOKENS)
        per_pos = window.increase_by(names.VLLM_ACCEPTED_PER_POS, names.VLLM_POSITION_LABEL)
        return from_counters(
            drafts,
            accepted,
            draft_tokens=draft_tokens,
            accepted_per_position=_positions(per_pos) if per_pos else None,
            k=k,
            level=level,
            note=_join(*window.notes),
        )


class SglangDialect:
    """SGLang's counters (``--enable-metrics``): verify calls and generation tokens."""

    name = "sglang"
    metrics_path = names.SGLANG_METRICS_PATH

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("sglang:") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "start SGLang with --enable-metrics and a --speculative-algorithm"
        steps = _need(window, names.SGLANG_SPEC_VERIFY_CALLS, hint)
        tokens = _need(window, names.SGLANG_GENERATION_TOKENS, hint)
        note = (
            "approximate: SGLang exposes no accepted-draft counter; accepted = Δgeneration_tokens - "
            "Δverify_calls, steps = Δverify_calls"
        )
        series = window.gauge_series(names.SGLANG_SPEC_ACCEPT_LENGTH)
        if series:
            values = [v for _, v in series]
            note += (
                f"; windowed gauge {names.SGLANG_SPEC_ACCEPT_LENGTH}: {len(values)} points, "
                f"min {min(values):.3f}, max {max(values):.3f}"
            )
        return from_counters(steps, tokens - steps, k=k, level=level, note=_join(note, *window.notes))

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """SGLang's lifetime AL per data-parallel rank from ``/server_info`` (a cross-check; {} when absent)."""
        try:
            values = await sglang_server_info_al(base_url, session=session, headers=headers)
        except AlflowError:
            return {}
        return {"sglang_server_info_avg_accept_length_lifetime": values}


class TrtllmDialect(_CountersOnly):
    """TensorRT-LLM's ``trtllm_spec_decode_*`` counters at ``/prometheus/metrics``."""

    name = "trtllm"
    metrics_path = names.TRTLLM_METRICS_PATH

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("trtllm_") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "set enable_iter_perf_stats: true (and return_perf_metrics: true) in the trtllm-serve config"
        draft_tokens = _need(window, names.TRTLLM_NUM_DRAFT_TOKENS, hint)
        accepted = _need(window, names.TRTLLM_NUM_ACCEPTED_TOKENS, hint)
        drafted_by_pos = window.increase_by(names.TRTLLM_DRAFTED_PER_POS, names.TRTLLM_POSITION_LABEL)
        accepted_by_pos = window.increase_by(names.TRTLLM_ACCEPTED_PER_POS, names.TRTLLM_POSITION_LABEL)
        if drafted_by_pos:
            drafted = _positions(drafted_by_pos)
            steps = drafted[0]
            per_pos = _positions(accepted_by_pos) if accepted_by_pos else None
            if per_pos is not None and len(per_pos) < len(drafted):
                per_pos = per_pos + [0.0] * (len(drafted) - len(per_pos))
            return from_counters(
                steps,
                accepted,
                draft_tokens=draft_tokens,
                accepted_per_position=per_pos,
                k=k if k is not None else len(drafted),
                level=level,
                note=_join("steps = drafted tokens at the first position", *window.notes),
            )
        if k is None:
            raise MissingMetricsError(
                f"{names.TRTLLM_DRAFTED_PER_POS} is not exposed and K is unknown: set return_perf_metrics: "
                "true in the trtllm-serve config, or give K"
            )
        return from_counters(
            draft_tokens / k,
            accepted,
            draft_tokens=draft_tokens,
            k=k,
            level=level,
            note=_join(f"steps = draft tokens / K (K={k}): no per-position counters", *window.notes),
        )


DIALECTS: Final[dict[str, Dialect]] = {
    "vllm": VllmDialect(),
    "sglang": SglangDialect(),
    "trtllm": TrtllmDialect(),
}


def get_dialect(name: str) -> Dialect:
    """The registered dialect ``name``; an unknown name lists the known ones."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown metrics dialect {name!r}; known: {', '.join(DIALECTS)}, auto"
        ) from None


def detect(snapshot: Snapshot) -> Dialect:
    """The dialect whose metrics ``snapshot`` holds; an error lists what was looked for."""
    found = [d for d in DIALECTS.values() if d.matches(snapshot)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise MissingMetricsError(
            f"metrics at {snapshot.url or '<text>'} hold no vllm:, sglang: or trtllm_ metrics: cannot "
            "detect the framework (give --dialect, or enable metrics: SGLang --enable-metrics, TensorRT-LLM "
            "return_perf_metrics)"
        )
    raise MissingMetricsError(
        f"metrics at {snapshot.url or '<text>'} match several dialects ({', '.join(d.name for d in found)}): "
        "give --dialect"
    )


def candidate_metrics_urls(base_url: str, dialect: str = "auto") -> list[str]:
    """Metrics URLs to try for a server at ``base_url``: the dialect's path, or every known path."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    paths = (
        [get_dialect(dialect).metrics_path]
        if dialect != "auto"
        else [d.metrics_path for d in DIALECTS.values()]
    )
    return [base + p for p in dict.fromkeys(paths)]


async def sglang_server_info_al(
    base_url: str,
    *,
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> list[float]:
    """SGLang's cumulative AL per data-parallel rank from ``GET /server_info`` (since server start).

    Falls back to the deprecated ``/get_server_info``. Lifetime values (warm-up included): a
    cross-check of the windowed counters, never a replacement for them. ``headers`` carry the API
    key (SGLang's ``--api-key`` guards this endpoint too).
    """
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await sglang_server_info_al(base_url, session=own, timeout_s=timeout_s, headers=headers)
    base = base_url.rstrip("/").removesuffix("/v1")
    problems: list[str] = []
    for path in (names.SGLANG_SERVER_INFO_PATH, names.SGLANG_SERVER_INFO_DEPRECATED_PATH):
        try:
            async with session.get(
                base + path, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers
            ) as resp:
                if resp.status != 200:
                    problems.append(f"{path}: HTTP {resp.status}")
                    continue
                data: Any = orjson.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
            problems.append(f"{path}: {redact_urls_in_text(str(exc or type(exc).__name__))}")
            continue
        states = data.get("internal_states") if isinstance(data, dict) else None
        values = [
            float(st[names.SGLANG_AVG_ACCEPT_LENGTH_KEY])
            for st in states or []
            if isinstance(st, dict) and isinstance(st.get(names.SGLANG_AVG_ACCEPT_LENGTH_KEY), int | float)
        ]
        if values:
            return values
        problems.append(f"{path}: no internal_states[].{names.SGLANG_AVG_ACCEPT_LENGTH_KEY}")
    raise MissingMetricsError(f"no SGLang server info at {redact_url(base)}: {'; '.join(problems)}")
