"""The simulator speaking ATOM: its ``atom:*`` metrics over the engine's counters, and its speculative flags.

Metrics are those of :mod:`.metrics`, with ATOM's types and labels (no ``model_name``; counters without
``_created``, as ATOM builds them with ``CounterMetricFamily`` in ``atom/entrypoints/openai/metrics.py``).
ATOM serves a snapshot of its counters (see :mod:`.metrics`); the simulator does the same when
``ALFLOW_SIM_ATOM_REFRESH_S`` is set (seconds between copies; unset or 0: live values), so the measurement's wait
for a fresh snapshot can be tested.

Flags read (``ArgsReader``), with ATOM's rules (``atom/config.py:1093-1146``): ``--num-speculative-tokens K``,
``--spec-decode-acceptance-length L`` in [1, K + 1] or ``--spec-decode-acceptance-rate r`` in [0, 1] (the length
``1 + K x r``), never both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.metrics_core import Metric

from alflow.errors import InvalidInputError
from alflow.frameworks.atom import metrics as m
from alflow.frameworks.atom.knobs import LENGTH_FLAG, RATE_FLAG, SCHEME
from alflow.sim.dialects import EngineSettings, JsonView, counter_family, gauge_family, labelled_counter
from alflow.sim.sources import FrameworkSettings
from alflow.sim.stats import EngineStats

K_FLAG = "--num-speculative-tokens"
REFRESH_ENV = "ALFLOW_SIM_ATOM_REFRESH_S"


class AtomEmitter:
    """ATOM's ``/metrics`` over :class:`EngineStats` (a snapshot refreshed every ``ALFLOW_SIM_ATOM_REFRESH_S``)."""

    name = "atom"
    metrics_path = m.METRICS_PATH
    records_iterations = False

    def __init__(self) -> None:
        self._snapshots: dict[int, tuple[float, list[Metric]]] = {}

    def json_routes(self) -> Mapping[str, JsonView]:
        """``/server_info``: what ATOM's says (``api_server.py``: model id, served name, TP and DP sizes)."""
        return {"/server_info": server_info}

    def families(self, stats: EngineStats, config: EngineSettings) -> Iterator[Metric]:
        del config
        period = m.seconds_from_env(REFRESH_ENV, 0.0, 3600.0)
        held = self._snapshots.get(id(stats))
        now = time.time()
        if period == 0 or held is None or now - held[0] >= period:
            if len(self._snapshots) > 64:  # servers of past tests in this process
                self._snapshots.clear()
            held = self._snapshots[id(stats)] = (now, list(_families(stats, now)))
        return iter(held[1])


def _families(stats: EngineStats, at: float) -> Iterator[Metric]:
    """The families of a snapshot of ``stats`` taken at ``at``."""
    yield gauge_family(m.LAST_REFRESH, "When the metrics snapshot was last refreshed.", {}, at)
    yield counter_family(
        m.MTP_DRAFT_TOKENS, "Total draft tokens proposed by MTP.", {}, stats.draft_tokens, None
    )
    yield counter_family(
        m.MTP_ACCEPTED_TOKENS, "Total accepted speculative bonus tokens.", {}, stats.accepted_tokens, None
    )
    steps = sum(stats.accept_hist)
    yield gauge_family(
        m.MTP_ACCEPTANCE_RATE,
        "MTP draft acceptance rate.",
        {},
        stats.accepted_tokens / stats.draft_tokens if stats.draft_tokens else 0.0,
    )
    yield gauge_family(
        m.MTP_TOKENS_PER_FORWARD,
        "Average tokens per forward.",
        {},
        1 + stats.accepted_tokens / steps if steps else 0.0,
    )
    if steps:
        doc = "Decode steps by accepted tokens."
        yield labelled_counter(
            m.MTP_DECODE_STEPS, doc, {}, m.ACCEPTED_LABEL, enumerate(stats.accept_hist), None
        )
    yield counter_family(m.REQUESTS_FINISHED, "Total finished requests.", {}, stats.finished_requests, None)
    yield counter_family(
        m.PROMPT_TOKENS, "Total prompt tokens of finished requests.", {}, stats.prompt_tokens, None
    )
    yield counter_family(
        m.GENERATION_TOKENS,
        "Total generation tokens of finished requests.",
        {},
        stats.finished_output_tokens,
        None,
    )
    yield gauge_family(m.REQUESTS_RUNNING, "Running requests.", {}, stats.num_running)
    yield gauge_family(m.REQUESTS_WAITING, "Waiting requests.", {}, stats.num_waiting)


def server_info(stats: EngineStats, config: EngineSettings) -> object:
    """ATOM's ``/server_info`` body (no version: ATOM has none to give)."""
    del stats
    return {
        "model_id": config.served_model_name,
        "served_model_name": config.served_model_name,
        "tp_size": 1,
        "dp_size": config.nnodes if config.node_parallel == "dp" else 1,
    }


def _number(flag: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(f"{flag} {text!r} is not a number") from None


def read_args(args: Sequence[str]) -> FrameworkSettings:
    """K and the synthetic length from ATOM's flags (``--flag value`` or ``--flag=value``); others are refused."""
    values: dict[str, str] = {}
    items = list(args)
    while items:
        flag, _, inline = items.pop(0).partition("=")
        if flag not in (K_FLAG, LENGTH_FLAG, RATE_FLAG):
            raise InvalidInputError(
                f"unknown argument {flag!r} for the simulator's ATOM dialect; it reads {K_FLAG}, {LENGTH_FLAG}, "
                f"{RATE_FLAG}"
            )
        if not inline and not items:
            raise InvalidInputError(f"{flag} needs a value")
        values[flag] = inline or items.pop(0)
    k: int | None = None
    if K_FLAG in values:
        text = values[K_FLAG]
        if not text.isdigit() or int(text) < 1:
            raise InvalidInputError(f"{K_FLAG} {text!r} must be a whole number of at least 1")
        k = int(text)
    if LENGTH_FLAG in values and RATE_FLAG in values:
        raise InvalidInputError(
            f"{LENGTH_FLAG} and {RATE_FLAG} describe the same curve; set at most one (ATOM)"
        )
    n = k if k is not None else 1  # ATOM's default K
    al: float | None = None
    if RATE_FLAG in values:
        rate = _number(RATE_FLAG, values[RATE_FLAG])
        if not 0.0 <= rate <= 1.0:
            raise InvalidInputError(f"{RATE_FLAG} must be in [0, 1], but got {rate:g} (ATOM)")
        al = 1.0 + n * rate
    if LENGTH_FLAG in values:
        al = _number(LENGTH_FLAG, values[LENGTH_FLAG])
    if al is not None and not 1.0 <= al <= n + 1:
        raise InvalidInputError(
            f"{LENGTH_FLAG} must be in [1, {n + 1}] for {K_FLAG}={n}, but got {al:g} (ATOM)"
        )
    return FrameworkSettings("ATOM's flags", k=k, al=al, scheme=SCHEME if al is not None else None)
