"""How the simulated engine speaks a framework: the emitter protocol, the families' helpers, the scrape registry.

Each framework plugin's ``sim`` is its emitter, in its folder (``alflow/frameworks/<name>/sim.py``): its metric
names, labels and endpoints over the engine's counters (what each counts: DOMAIN.md section 4, and each module),
and the JSON endpoints it answers beside them (SGLang's ``/server_info``, TensorRT-LLM's iteration stats). Counters
are exposed through ``prometheus_client`` (a custom collector on a registry of the server's own), so the text has
``_total`` (and, where the framework sends them, ``_created``) samples exactly like the real frameworks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from alflow.serving.api import FINISH_REASONS
from alflow.sim.stats import EngineStats, Histogram


class EngineSettings(Protocol):
    """What a dialect reads of the simulator's configuration (:class:`alflow.sim.config.SimConfig` has it all).

    ``framework_version`` None: the simulator's own name; ``node_parallel``: ``tp`` (one model across the nodes)
    or ``dp`` (one engine per node).
    """

    @property
    def served_model_name(self) -> str: ...
    @property
    def k(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def framework_version(self) -> str | None: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def node_parallel(self) -> str: ...


JsonView = Callable[[EngineStats, EngineSettings], object]
"""A JSON endpoint of a dialect: its body from the engine's counters and the configuration."""


class MetricsEmitter(Protocol):
    """One framework's metric names and paths over :class:`EngineStats`, and its other endpoints."""

    @property
    def records_iterations(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def metrics_path(self) -> str: ...

    def families(self, stats: EngineStats, config: EngineSettings) -> Iterable[Metric]:
        """The metric families of one scrape."""

    def json_routes(self) -> Mapping[str, JsonView]:
        """``GET`` paths this framework answers with JSON about the engine (none: ``{}``)."""


def counter_family(
    name: str, doc: str, labels: dict[str, str], value: float, created: float | None
) -> CounterMetricFamily:
    """A counter family of one sample with ``labels`` and its ``_created`` time (None: no ``_created``)."""
    fam = CounterMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value, created=created)
    return fam


def labelled_counter(
    name: str,
    doc: str,
    labels: dict[str, str],
    label: str,
    counts: Iterable[tuple[object, float]],
    created: float | None,
) -> CounterMetricFamily:
    """A counter family of one sample per ``(value of label, count)`` in ``counts``, beside ``labels``."""
    fam = CounterMetricFamily(name, doc, labels=[*labels, label])
    for key, count in counts:
        fam.add_metric([*labels.values(), str(key)], count, created=created)
    return fam


def success_family(name: str, labels: dict[str, str], stats: EngineStats) -> CounterMetricFamily:
    """The request-success counter: finished requests by ``finished_reason`` (:data:`FINISH_REASONS`)."""
    by_reason = [(r, stats.requests_finished.get(r, 0)) for r in FINISH_REASONS]
    doc = "Count of successfully processed requests."
    return labelled_counter(name, doc, labels, "finished_reason", by_reason, stats.created_s)


def gauge_family(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    """A gauge family of one sample with ``labels``."""
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


def histogram_family(name: str, doc: str, labels: dict[str, str], hist: Histogram) -> HistogramMetricFamily:
    """A histogram family of ``hist``'s cumulative buckets and sum, with ``labels``."""
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), hist.cumulative(), hist.sum)
    return fam


class _EngineCollector(Collector):
    def __init__(self, dialect: MetricsEmitter, stats: EngineStats, config: EngineSettings) -> None:
        self._dialect, self._stats, self._config = dialect, stats, config

    def collect(self) -> Iterable[Metric]:
        return list(self._dialect.families(self._stats, self._config))


def make_registry(dialect: MetricsEmitter, stats: EngineStats, config: EngineSettings) -> CollectorRegistry:
    """A registry of the server's own whose one collector reads ``stats`` at scrape time."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(dialect, stats, config))
    return registry
