"""Framework metrics dialects: two scrapes (or a Prometheus window) -> :class:`SpecStats`.

A ``Protocol``; each framework plugin's ``metrics`` is its reader (:func:`dialects` asks the registry,
:mod:`alflow.plugins`). The readers of vLLM, SGLang and TensorRT-LLM are the classes here (metric names from
:mod:`alflow.metrics.names`); a plugin may bring its own (ATOM's is in its folder). The simulated engine speaks
each real framework's dialect, so it needs no reader of its own: :func:`detect` recognises whichever it exposes.

- vLLM: ``AL = 1 + Δaccepted_tokens / Δnum_drafts``; per-position counters by ``position``.
- SGLang: request-level counters, moved when a request finishes: ``Δverify_calls`` (the finished
  requests' verify steps), ``Δgeneration_tokens`` (their ``len(output_ids)``, the first token from
  prefill included) and ``Δnum_requests``. Steps = ``Δverify_calls``, accepted drafts =
  ``Δgeneration_tokens - Δnum_requests - Δverify_calls`` (the prefill token of each request taken
  out). What stays (written into the stats' note): requests running at the baseline scrape count in
  full, and the tokens a request's last verify step accepted past its limit are not in
  ``output_ids``: AL is low by at most K x Δrequests / Δverify_calls (``truncated_requests`` lets
  the synthetic audit expect it). Cross-checked with ``/server_info``; where the responses carry
  per-request counts (``sglext.spec_tokens_details``, asked for with ``return_spec_tokens_details``), the
  client's sum of them is the primary, exact source (:func:`alflow.measure.window_stats`). Without
  ``spec_verify_calls_total`` (before PR #25689) but with the other counters, the error says the release is
  too old rather than "enable metrics".
- TensorRT-LLM: per-position counters only, both moved once per finished request:
  ``AL = 1 + Σ_i Δaccepted_tokens{token_position=i} / Δdrafted_tokens{token_position=0}`` (every
  step drafts at position 0). The iteration counters ``num_draft_tokens`` / ``num_accepted_tokens``
  come from iteration stats drained by a background loop, at other times than the per-position
  ones: mixing the families (as earlier versions did) is wrong whenever a request spans a scrape.
  They are kept as a cross-check in the note only. Without per-position counters
  (``return_perf_metrics: false``) the dialect refuses, saying how to enable them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp
import orjson

from alflow.acceptance.runtime_k import active_k_changes
from alflow.acceptance.stats import CI_LEVEL, SpecStats, as_count, from_counters
from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics import names
from alflow.metrics.prometheus import CounterWindow, Snapshot
from alflow.plugins import frameworks
from alflow.redact import redact_url, redact_urls_in_text


@dataclass(frozen=True)
class SpeculativeInfo:
    """What a server states of its speculative configuration in its metrics (None: not stated)."""

    enabled: bool | None = None
    method: str | None = None
    num_tokens: int | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"enabled": self.enabled, "method": self.method, "num_tokens": self.num_tokens}


class MissingMetricsError(AlflowError):
    """The server does not expose the counters a dialect needs (the message says how to enable them)."""


class Dialect(Protocol):
    """How one framework exposes spec-decode counters."""

    name: str
    metrics_path: str
    request_counts: str | None
    """Where this framework's responses carry per-request speculative counts (the records' ``spec_*``
    columns), as notes name it; None: none known (notes then say "per-request counts")."""
    request_fields: Mapping[str, object]
    """Fields every measured request's body carries so that the response holds those counts (SGLang's
    ``return_spec_tokens_details: true``); empty where a server flag does it (vLLM) or nothing does."""

    @property
    def snapshot_lag_s(self) -> float:
        """How old a scrape can be: 0 for live counters; more for a server that serves a periodic snapshot.

        The measurement waits that long, with the server idle, before each scrape that bounds a window (ATOM).
        """
        ...

    def matches(self, snapshot: Snapshot) -> bool:
        """True when ``snapshot`` looks like this framework's metrics."""
        ...

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        """Spec-decode statistics over ``window``, with a ``level`` confidence interval of AL."""
        ...

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        """The speculative configuration the server states in ``snapshot`` (None where it states none)."""
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


class _NoSpeculativeInfo:
    """A dialect whose metrics state no speculative configuration (and whose counters are live)."""

    snapshot_lag_s: float = 0.0

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        del snapshot
        return None


class _CountersOnly(_NoSpeculativeInfo):
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
    request_counts: str | None = "metrics.speculative_decoding"
    """vLLM 0.32.0+ with ``--per-request-spec-decode-metrics`` (PR #48915; vllm/v1/metrics/stats.py)."""
    request_fields: Mapping[str, object] = {}
    """vLLM needs no request field: the server flag turns the counts on."""

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


class SglangDialect(_NoSpeculativeInfo):
    """SGLang's counters (``--enable-metrics``): verify calls, generation tokens and requests, at finish."""

    name = "sglang"
    metrics_path = names.SGLANG_METRICS_PATH
    request_counts: str | None = f"{names.SGLANG_SGLEXT}.{names.SGLANG_SPEC_DETAILS}"
    """SGLang with PR #33518 (merged 2026-08-04): only when the request asks (:attr:`request_fields`)."""
    request_fields: Mapping[str, object] = {names.SGLANG_SPEC_DETAILS_FLAG: True}

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("sglang:") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "start SGLang with --enable-metrics and a --speculative-algorithm"
        tokens = _need(window, names.SGLANG_GENERATION_TOKENS, hint)
        steps = _need(
            window,
            names.SGLANG_SPEC_VERIFY_CALLS,
            f"the server's other sglang: counters are there, so metrics are on: {names.SGLANG_SPEC_VERIFY_CALLS}_total "
            f"exists only since {names.SGLANG_SPEC_VERIFY_CALLS_SINCE}, so this SGLang is older (or runs no "
            "--speculative-algorithm); without the verify steps the counters cannot give AL (use a newer image)",
        )
        requests = _need(
            window,
            names.SGLANG_NUM_REQUESTS,
            "SGLang's generation_tokens include each request's first (prefill) token; without "
            f"{names.SGLANG_NUM_REQUESTS}_total it cannot be taken out",
        )
        accepted = tokens - requests - steps
        notes = [
            "steps = Δverify_calls, accepted = Δgeneration_tokens - Δnum_requests - Δverify_calls "
            "(SGLang's counters move when a request finishes and count its first, prefill token)"
        ]
        if steps > 0:
            bound = (k or 0) * requests / steps
            notes.append(
                "residual: requests running at the baseline scrape count in full; tokens accepted past a "
                "request's limit in its last verify step are not counted, so AL is low by at most "
                + (f"K x requests / steps = {bound:.4f}" if k else "K x requests / steps")
                + f" ({requests:g} requests, {steps:g} steps)"
            )
        series = window.gauge_series(names.SGLANG_SPEC_ACCEPT_LENGTH)
        if series:
            values = [v for _, v in series]
            notes.append(
                f"windowed gauge {names.SGLANG_SPEC_ACCEPT_LENGTH}: {len(values)} points, "
                f"min {min(values):.3f}, max {max(values):.3f}"
            )
        # the active K (--speculative-adaptive): a change inside the window is a warning on the point
        notes += active_k_changes({g: window.gauge_series(g) for g in names.SGLANG_ACTIVE_K_GAUGES})
        stats = from_counters(steps, accepted, k=k, level=level, note=_join(*notes, *window.notes))
        return replace(stats, truncated_requests=as_count(names.SGLANG_NUM_REQUESTS, requests))

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
    """TensorRT-LLM's ``trtllm_spec_decode_*`` counters at ``/prometheus/metrics`` (per-position family)."""

    name = "trtllm"
    request_counts: str | None = None
    """Per-request acceptance on TensorRT-LLM's responses is an open PR (#19311) at the time of writing."""
    request_fields: Mapping[str, object] = {}
    metrics_path = names.TRTLLM_METRICS_PATH

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("trtllm_") for f in snapshot.families())

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        """``trtllm_speculative_config_info`` (value 1): labels ``spec_enabled``, ``spec_method``, ``spec_num_tokens``."""
        for labels in snapshot.samples.get(names.TRTLLM_SPECULATIVE_CONFIG_INFO) or {}:
            found = dict(labels)
            tokens = found.get("spec_num_tokens")
            enabled = found.get("spec_enabled")
            return SpeculativeInfo(
                enabled=None if enabled is None else enabled.lower() == "true",
                method=found.get("spec_method"),
                num_tokens=int(tokens) if tokens is not None and tokens.isdigit() else None,
            )
        return None

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        drafted_by_pos = window.increase_by(names.TRTLLM_DRAFTED_PER_POS, names.TRTLLM_POSITION_LABEL)
        accepted_by_pos = window.increase_by(names.TRTLLM_ACCEPTED_PER_POS, names.TRTLLM_POSITION_LABEL)
        if not drafted_by_pos:
            raise MissingMetricsError(
                f"metric {names.TRTLLM_DRAFTED_PER_POS} is not exposed: TensorRT-LLM's exact AL needs its "
                f"per-position counters, which exist only since TensorRT-LLM {names.TRTLLM_PER_POSITION_RELEASE} "
                f"({names.TRTLLM_PER_POSITION_SOURCE}; use that release or newer) and only with "
                "return_perf_metrics: true and enable_iter_perf_stats: true in the trtllm-serve config; the "
                "iteration counters alone move at other times and are not used"
            )
        drafted = _positions(drafted_by_pos)
        steps = drafted[0]
        per_pos = _positions(accepted_by_pos) if accepted_by_pos else [0.0] * len(drafted)
        if len(per_pos) < len(drafted):
            per_pos = per_pos + [0.0] * (len(drafted) - len(per_pos))
        notes = ["AL = 1 + Σ accepted{token_position} / drafted{token_position=0} (per finished request)"]
        iter_drafts = window.increase(names.TRTLLM_NUM_DRAFT_TOKENS)
        iter_accepted = window.increase(names.TRTLLM_NUM_ACCEPTED_TOKENS)
        if iter_drafts and iter_accepted is not None and k:
            notes.append(
                f"cross-check, iteration counters (other timing, not used): AL ~ "
                f"{1 + iter_accepted * k / iter_drafts:.4f}"
            )
        return from_counters(
            steps,
            sum(per_pos),
            draft_tokens=sum(drafted),
            accepted_per_position=per_pos,
            k=k if k is not None else len(drafted),
            level=level,
            note=_join(*notes, *window.notes),
        )


def dialects() -> dict[str, Dialect]:
    """Every registered framework's metrics reader, by framework name (frameworks that have one)."""
    return {f.name: f.metrics for f in frameworks() if f.metrics is not None}


def get_dialect(name: str) -> Dialect:
    """The registered dialect ``name``; an unknown name lists the known ones."""
    known = dialects()
    try:
        return known[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown metrics dialect {name!r}; known: {', '.join(known)}, auto"
        ) from None


def detect(snapshot: Snapshot) -> Dialect:
    """The dialect whose metrics ``snapshot`` holds; an error lists what was looked for."""
    known = dialects()
    found = [d for d in known.values() if d.matches(snapshot)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise MissingMetricsError(
            f"metrics at {snapshot.url or '<text>'} hold no metrics of a known framework "
            f"({', '.join(known)}): cannot detect the framework (give --dialect, or enable the server's metrics; "
            "alflow bench --help says how for each)"
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
        else [d.metrics_path for d in dialects().values()]
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
