"""The client's figures of a measured point, each declared once: its stored name, formula, unit and display.

:data:`POINT_METRICS` is the one list. An M2 point's row (:class:`alflow.results.rows.M2Point`, the columns of
``spec_stats.parquet`` and ``summary.json``'s points) holds one value per entry, computed by its formula from the
point's :class:`~alflow.metrics.client.ClientSummary`; the report's points table, the run comparison, the M1
report's client section, the InferenceX export's fallback latencies, the site's trend lines and the K choice all
read the declarations, so a new figure is one line here. A row stored before a figure existed reads it as None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from alflow.metrics.client import ClientSummary


@dataclass(frozen=True)
class PointMetric:
    """One figure of a measured point."""

    name: str
    """Its stored column (``spec_stats.parquet``, ``summary.json``) and key in the exports."""
    label: str
    """Its display name (``median TPOT``)."""
    unit: str
    """``ms``, ``tok/s/GPU``, ... ("" for a plain number)."""
    decimals: int
    """Digits shown after the point in tables."""
    of: Callable[[ClientSummary], float | None]
    """The formula: the figure of a point's client summary (None when not measurable)."""
    higher_is_better: bool
    table: bool = True
    """A column of the M2 report's points table."""
    trend: bool = False
    """A trend line per series on the results site."""

    @property
    def heading(self) -> str:
        """A table heading: the label with its unit (``median TPOT ms``)."""
        return f"{self.label} {self.unit}".strip()


OUTPUT_THROUGHPUT: Final = PointMetric(
    "output_throughput", "output throughput", "tok/s", 1, lambda c: c.output_throughput, True, table=False
)
OUTPUT_PER_GPU: Final = PointMetric(
    "output_throughput_per_gpu",
    "output throughput",
    "tok/s/GPU",
    1,
    lambda c: c.output_throughput_per_gpu,
    True,
    trend=True,
)
TOTAL_PER_GPU: Final = PointMetric(
    "total_token_throughput_per_gpu",
    "total throughput",
    "tok/s/GPU",
    1,
    lambda c: c.total_token_throughput_per_gpu,
    True,
)
INTERACTIVITY: Final = PointMetric(
    "median_interactivity_tokens_per_s",
    "median interactivity",
    "tok/s/user",
    1,
    lambda c: c.interactivity.median,
    True,
    trend=True,
)
TPOT: Final = PointMetric(
    "median_tpot_ms", "median TPOT", "ms", 2, lambda c: c.tpot.median, False, trend=True
)
TTFT: Final = PointMetric("median_ttft_ms", "median TTFT", "ms", 1, lambda c: c.ttft.median, False)
P99_TTFT: Final = PointMetric("p99_ttft_ms", "p99 TTFT", "ms", 1, lambda c: c.ttft.percentile(99), False)
P90_ITL: Final = PointMetric("p90_itl_ms", "p90 ITL", "ms", 2, lambda c: c.itl.percentile(90), False)
ITL: Final = PointMetric("median_itl_ms", "median ITL", "ms", 2, lambda c: c.itl.median, False, table=False)

POINT_METRICS: Final = (
    OUTPUT_THROUGHPUT,
    PointMetric(
        "total_token_throughput",
        "total throughput",
        "tok/s",
        1,
        lambda c: c.total_token_throughput,
        True,
        table=False,
    ),
    OUTPUT_PER_GPU,
    TOTAL_PER_GPU,
    INTERACTIVITY,
    TPOT,
    TTFT,
    P99_TTFT,
    ITL,
    P90_ITL,
    PointMetric(
        "tokens_per_chunk", "tokens per chunk", "", 3, lambda c: c.tokens_per_chunk, True, table=False
    ),
)
"""Every figure an M2 point stores, in the order of its columns."""


def point_values(client: ClientSummary) -> dict[str, float | None]:
    """Every declared figure of ``client``, by name."""
    return {m.name: m.of(client) for m in POINT_METRICS}
