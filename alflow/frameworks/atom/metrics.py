"""ATOM's Prometheus metrics and how alflow reads acceptance from them.

ATOM's exporter (``atom/entrypoints/openai/metrics.py``, added in ROCm/ATOM PR #1877, 31dadf0ad, 2026-08-14) serves
``GET /metrics`` (``api_server.py:1888``), no labels but ``accepted_tokens``. Names are family names as
``prometheus_client``'s parser reports them (counters without the ``_total`` the text carries).

Counting (``SpecStats.update``, ``atom/model_engine/scheduler.py:66-72``, once per sequence per decode step, prefill
steps skipped): ``mtp_draft_tokens`` += K, ``mtp_decode_steps{accepted_tokens=a}`` += 1 where ``a`` is the number of
accepted draft tokens (0..K), ``mtp_accepted_tokens`` = ``sum(a x steps{a})`` (``scheduler.py:79-81``). Summed over
data-parallel ranks (``llm_engine.py:423-442``). So, over a window, ``steps = sum_a Δdecode_steps{a}`` and
``AL = 1 + Δaccepted / steps``, exactly; the accepted count per draft position is ``sum_{a > i} Δsteps{a}``.

The values are a snapshot: each engine core pushes every 5 s (``METRICS_PUSH_INTERVAL_S``,
``atom/model_engine/engine_core.py:38``) and the API server copies it every 5 s
(``_METRICS_REFRESH_INTERVAL_SECONDS``, ``api_server.py:117``; PR #1906), so a scrape can be about 10 s old. The
reader's :attr:`AtomDialect.snapshot_lag_s` makes the measurement wait that long with the server idle before each
window scrape (``alflow.measure``), so the window holds exactly its own steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from alflow.acceptance.stats import CI_LEVEL, SpecStats, from_counters
from alflow.errors import InvalidInputError
from alflow.loadgen.counts import CountsReader
from alflow.metrics.dialects import MissingMetricsError, SpeculativeInfo
from alflow.metrics.prometheus import CounterWindow, Snapshot

METRICS_PATH: Final = "/metrics"
PREFIX: Final = "atom:"
MTP_DRAFT_TOKENS: Final = "atom:mtp_draft_tokens"
"""Counter: K per sequence per decode step (``metrics.py:253``)."""
MTP_ACCEPTED_TOKENS: Final = "atom:mtp_accepted_tokens"
"""Counter: accepted draft ("bonus") tokens (``metrics.py:258``)."""
MTP_DECODE_STEPS: Final = "atom:mtp_decode_steps"
"""Counter by ``accepted_tokens`` (0..K): sequence-steps that accepted that many drafts (``metrics.py:283-289``)."""
ACCEPTED_LABEL: Final = "accepted_tokens"
MTP_ACCEPTANCE_RATE: Final = "atom:mtp_acceptance_rate"
"""Gauge: accepted / drafted since start (``metrics.py:269``)."""
MTP_TOKENS_PER_FORWARD: Final = "atom:mtp_average_tokens_per_forward"
"""Gauge: ``1 + accepted / steps`` since start, cumulative, not windowed (``llm_engine.py:505-507``)."""
REQUESTS_FINISHED: Final = "atom:requests_finished"
PROMPT_TOKENS: Final = "atom:prompt_tokens"
GENERATION_TOKENS: Final = "atom:generation_tokens"
"""Counters moved when a request finishes (``scheduler.py:2396-2400``)."""
REQUESTS_RUNNING: Final = "atom:requests_running"
REQUESTS_WAITING: Final = "atom:requests_waiting"
LAST_REFRESH: Final = "atom:metrics_last_refresh_timestamp_seconds"
"""Gauge: when the API server last copied the engines' snapshot (``metrics.py:24-43``)."""
EXPORTER_SINCE: Final = "ROCm/ATOM PR #1877 (31dadf0ad, merged 2026-08-14)"

SNAPSHOT_LAG_S: Final = 11.0
"""How old a scrape can be: the engines' 5 s push plus the API server's 5 s copy, and a margin."""
LAG_ENV: Final = "ALFLOW_ATOM_METRICS_LAG_S"
"""Overrides :data:`SNAPSHOT_LAG_S` (seconds, >= 0) for an ATOM build with other refresh intervals."""


def seconds_from_env(name: str, default: float, high: float) -> float:
    """Seconds in [0, ``high``] from environment variable ``name`` (``default`` when unset); an error names a bad one."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= high:
        raise InvalidInputError(f"{name}={text!r} must be a number of seconds in [0, {high:g}]")
    return value


def snapshot_lag_s() -> float:
    """:data:`SNAPSHOT_LAG_S`, or the value of ``ALFLOW_ATOM_METRICS_LAG_S`` (an error names a bad one)."""
    return seconds_from_env(LAG_ENV, SNAPSHOT_LAG_S, 600.0)


class AtomDialect:
    """ATOM's ``atom:mtp_*`` counters: steps by accepted count, accepted and drafted tokens."""

    name = "atom"
    metrics_path = METRICS_PATH
    request_counts: str | None = None
    """ATOM's responses carry no per-request acceptance (``serving_chat.py``, ``serving_completion.py``)."""
    request_fields: Mapping[str, object] = {}
    count_reader: CountsReader | None = None

    @property
    def snapshot_lag_s(self) -> float:
        """Seconds to wait, idle, before a window's scrape so that the snapshot holds every step (see the module)."""
        return snapshot_lag_s()

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith(PREFIX) for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        by_accepted = window.increase_by(MTP_DECODE_STEPS, ACCEPTED_LABEL)
        if not by_accepted:
            raise MissingMetricsError(
                f"metric {MTP_DECODE_STEPS} is not exposed: start ATOM with --method and --num-speculative-tokens "
                f"(without --method ATOM drops the speculative flags silently); the exporter exists since "
                f"{EXPORTER_SINCE}, so an older image has none"
            )
        try:
            counts = {int(a): v for a, v in by_accepted.items()}
        except ValueError:
            raise InvalidInputError(f"non-integer {ACCEPTED_LABEL} labels {sorted(by_accepted)}") from None
        top = max(counts)
        k_found = k if k is not None else top
        steps = sum(counts.values())
        accepted = sum(a * v for a, v in counts.items())
        per_position = [sum(v for a, v in counts.items() if a > i) for i in range(max(k_found, top))]
        notes = [
            "steps = Σ Δmtp_decode_steps{accepted_tokens}, AL = 1 + Σ a x Δsteps{a} / steps (per sequence-step)",
            f"ATOM's counters are a snapshot up to ~10 s old: each window scrape waited {self.snapshot_lag_s:g} s "
            "with the server idle",
        ]
        counted = window.increase(MTP_ACCEPTED_TOKENS)
        if counted is not None and abs(counted - accepted) > 0.5:
            notes.append(
                f"cross-check: Δ{MTP_ACCEPTED_TOKENS} = {counted:g}, Σ a x Δsteps{{a}} = {accepted:g}"
            )
        return from_counters(
            steps,
            accepted,
            draft_tokens=window.increase(MTP_DRAFT_TOKENS),
            accepted_per_position=per_position,
            k=k_found,
            level=level,
            note="; ".join([*notes, *window.notes]),
        )

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        """ATOM's metrics state no speculative configuration."""
        del snapshot
        return None

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Nothing beyond the counters (``/debug/mtp_stats`` repeats them)."""
        del base_url, session, headers
        return {}
