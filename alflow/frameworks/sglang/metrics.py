"""SGLang's spec-decode counters as alflow reads them, and its ``/server_info`` cross-check.

Request-level counters, moved when a request finishes: ``Δverify_calls`` (the finished
requests' verify steps), ``Δgeneration_tokens`` (their ``len(output_ids)``, the first token from
prefill included) and ``Δnum_requests``. Steps = ``Δverify_calls``, accepted drafts =
``Δgeneration_tokens - Δnum_requests - Δverify_calls`` (the prefill token of each request taken
out). What stays (written into the stats' note): requests running at the baseline scrape count in
full, and the tokens a request's last verify step accepted past its limit are not in
``output_ids``: AL is low by at most K x Δrequests / Δverify_calls (``truncated_requests`` lets
the synthetic audit expect it). A request retracted under KV-cache pressure is prefilled again: one more
non-verify token, so AL reads high by up to Δretracted / Δverify_calls, a warning on the point whenever
``num_retracted_requests_total`` moved. Cross-checked with ``/server_info``; where the responses carry
per-request counts (``sglext.spec_tokens_details``, asked for with ``return_spec_tokens_details``), the
client's sum of them is the primary, exact source (:func:`alflow.measure.window_stats`). Without
``spec_verify_calls_total`` (before PR #25689) but with the other counters, the error says the release is
too old rather than "enable metrics".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import aiohttp
import orjson

from alflow.acceptance.runtime_k import NOTE_WARNING, active_k_changes
from alflow.acceptance.stats import CI_LEVEL, SpecStats, as_count, from_counters
from alflow.errors import AlflowError
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.sglang.names import SGLANG_SGLEXT, SGLANG_SPEC_DETAILS, SGLANG_SPEC_DETAILS_FLAG
from alflow.frameworks.sglang.requests import SGLANG_COUNTS
from alflow.loadgen.counts import CountsReader
from alflow.metrics.dialects import MissingMetricsError, NoSpeculativeInfo, join_notes, need_counter
from alflow.metrics.prometheus import CounterWindow, Snapshot
from alflow.util.httpread import MAX_API_BYTES, AnswerTooLargeError, read_bounded
from alflow.util.redact import redact_url, redact_urls_in_text


class SglangDialect(NoSpeculativeInfo):
    """SGLang's counters (``--enable-metrics``): verify calls, generation tokens and requests, at finish."""

    name = "sglang"
    metrics_path = sglang_names.SGLANG_METRICS_PATH
    request_counts: str | None = f"{SGLANG_SGLEXT}.{SGLANG_SPEC_DETAILS}"
    """SGLang with PR #33518 (merged 2026-08-04): only when the request asks (:attr:`request_fields`)."""
    request_fields: Mapping[str, object] = {SGLANG_SPEC_DETAILS_FLAG: True}
    count_reader: CountsReader | None = SGLANG_COUNTS

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("sglang:") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "start SGLang with --enable-metrics and a --speculative-algorithm"
        tokens = need_counter(window, sglang_names.SGLANG_GENERATION_TOKENS, hint)
        steps = need_counter(
            window,
            sglang_names.SGLANG_SPEC_VERIFY_CALLS,
            f"the server's other sglang: counters are there, so metrics are on: {sglang_names.SGLANG_SPEC_VERIFY_CALLS}_total "
            f"exists only since {sglang_names.SGLANG_SPEC_VERIFY_CALLS_SINCE}, so this SGLang is older (or runs no "
            "--speculative-algorithm); without the verify steps the counters cannot give AL (use a newer image)",
        )
        requests = need_counter(
            window,
            sglang_names.SGLANG_NUM_REQUESTS,
            "SGLang's generation_tokens include each request's first (prefill) token; without "
            f"{sglang_names.SGLANG_NUM_REQUESTS}_total it cannot be taken out",
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
        series = window.gauge_series(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH)
        if series:
            values = [v for _, v in series]
            notes.append(
                f"windowed gauge {sglang_names.SGLANG_SPEC_ACCEPT_LENGTH}: {len(values)} points, "
                f"min {min(values):.3f}, max {max(values):.3f}"
            )
        retracted = window.increase(sglang_names.SGLANG_NUM_RETRACTED)
        if retracted and steps > 0:
            notes.append(
                f"{NOTE_WARNING}{retracted:g} requests were retracted in the window (KV-cache pressure, "
                f"{sglang_names.SGLANG_NUM_RETRACTED}_total): each is prefilled again, one more non-verify token that "
                f"the counters count as accepted, so AL reads high by up to retractions / steps = "
                f"{retracted / steps:.4f}"
            )
        # the active K (--speculative-adaptive): a change inside the window is a warning on the point
        notes += active_k_changes({g: window.gauge_series(g) for g in sglang_names.SGLANG_ACTIVE_K_GAUGES})
        stats = from_counters(steps, accepted, k=k, level=level, note=join_notes(*notes, *window.notes))
        return replace(stats, truncated_requests=as_count(sglang_names.SGLANG_NUM_REQUESTS, requests))

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """SGLang's lifetime AL per data-parallel rank from ``/server_info`` (a cross-check; {} when absent)."""
        try:
            values = await sglang_server_info_al(base_url, session=session, headers=headers)
        except AlflowError:
            return {}
        return {"sglang_server_info_avg_accept_length_lifetime": values}


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
    for path in (sglang_names.SGLANG_SERVER_INFO_PATH, sglang_names.SGLANG_SERVER_INFO_DEPRECATED_PATH):
        try:
            async with session.get(
                base + path, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers
            ) as resp:
                if resp.status != 200:
                    problems.append(f"{path}: HTTP {resp.status}")
                    continue
                data: Any = orjson.loads(
                    await read_bounded(resp, MAX_API_BYTES, f"GET {redact_url(base + path)}")
                )
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, AnswerTooLargeError) as exc:
            why = f"no complete answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) else str(exc)
            problems.append(f"{path}: {redact_urls_in_text(why or type(exc).__name__)}")
            continue
        states = data.get("internal_states") if isinstance(data, dict) else None
        values = [
            float(st[sglang_names.SGLANG_AVG_ACCEPT_LENGTH_KEY])
            for st in states or []
            if isinstance(st, dict)
            and isinstance(st.get(sglang_names.SGLANG_AVG_ACCEPT_LENGTH_KEY), int | float)
        ]
        if values:
            return values
        problems.append(f"{path}: no internal_states[].{sglang_names.SGLANG_AVG_ACCEPT_LENGTH_KEY}")
    raise MissingMetricsError(f"no SGLang server info at {redact_url(base)}: {'; '.join(problems)}")
