"""Client-side metrics from request records, as polars expressions (DOMAIN.md section 5).

Per request (successful, non-warm-up rows only):

- ``ttft_ms = (first_token_ns - start_ns) / 1e6``: first chunk carrying content or reasoning;
- ``e2el_ms = (end_ns - start_ns) / 1e6``: end is the last output chunk (the usage chunk and
  ``[DONE]`` do not count), so ``e2el - ttft == sum(itl)``;
- ``itl_ms``: gaps between consecutive output chunks, ``diff(chunk_ns) / 1e6``;
- ``tpot_ms = (e2el_ms - ttft_ms) / (output_tokens - 1)``, null when ``output_tokens <= 1``;
- ``interactivity = 1000 / tpot_ms`` (tokens/s seen by one user);
- ``tokens_per_chunk = output_tokens / n_chunks``.

Over the run: ``request_throughput = completed / duration``, ``output_throughput =
total_output_tokens / duration``, ``total_token_throughput = (input + output) / duration``,
``request_goodput = requests meeting every SLO / duration``, per-GPU throughput divides by
``tp * pp * cp * dp`` (every node's GPUs: a multi-node server's parallel sizes are global). Output tokens come from the server's usage (the chunk count stands in, with
a warning, when a server sent no usage). Summary keys match ``vllm bench serve`` where they overlap
(``mean_ttft_ms``, ``median_tpot_ms``, ``p99_itl_ms``, ``output_throughput``, ``completed``, ...).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final, TypeVar

import polars as pl
from pydantic import Field, PlainSerializer, SerializerFunctionWrapHandler, computed_field, model_serializer

from alflow.errors import InvalidInputError
from alflow.loadgen.timing import ClientLoad, ClientTiming, client_timing
from alflow.util.jsonutil import note_nonfinite
from alflow.util.rows import dump_row

log = logging.getLogger(__name__)

DEFAULT_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True, slots=True)
class SLO:
    """Service-level objectives in milliseconds; a request is good when it meets every one given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @property
    def empty(self) -> bool:
        """True when no objective is set."""
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """GPUs behind the endpoint: ``tp * pp * cp * dp``; or prefill/decode GPUs when disaggregated.

    ``nodes`` is how many hosts those GPUs sit on (reported with the results as ``num_nodes``; the
    GPU count already covers every node: parallel sizes are global, e.g. TP 16 over 2 nodes of 8 GPUs).
    A server configuration's layout comes from :func:`alflow.methods.topology.gpu_layout`.
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    prefill_gpus: int | None = None
    decode_gpus: int | None = None
    nodes: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "dp", "nodes"):
            value = getattr(self, name)
            if value < 1:
                raise InvalidInputError(f"GPU layout {name}={value} must be at least 1")

    @property
    def gpus(self) -> int:
        """Total GPUs serving: ``prefill + decode`` when disaggregated, else ``tp * pp * cp * dp``."""
        if self.prefill_gpus is not None and self.decode_gpus is not None:
            return self.prefill_gpus + self.decode_gpus
        return self.tp * self.pp * self.cp * self.dp


def per_request(records: pl.DataFrame, *, include_warmup: bool = False) -> pl.DataFrame:
    """One row per request with ``ok`` and the per-request metrics (null where undefined; formulas: the module's)."""
    frame = records if include_warmup else records.filter(~pl.col("warmup"))
    chunks = pl.col("chunk_ns").list.len().cast(pl.Int64)  # network reads that carried output
    out = pl.col("output_tokens").fill_null(chunks)  # the server's usage; the chunk count where it sent none
    tpot = (
        pl.when(out > 1).then((pl.col("end_ns") - pl.col("first_token_ns")) / 1e6 / (out - 1)).otherwise(None)
    )
    return frame.with_columns(
        pl.col("error").is_null().alias("ok"),
        ((pl.col("first_token_ns") - pl.col("start_ns")) / 1e6).alias("ttft_ms"),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("e2el_ms"),
        tpot.alias("tpot_ms"),
        (pl.col("chunk_ns").list.diff(null_behavior="drop") / 1e6).alias("itl_ms"),
        (1000.0 / tpot).alias("interactivity"),
        chunks.alias("n_chunks"),
        (out / chunks).alias("tokens_per_chunk"),  # with one chunk per engine step, the client-side AL
        out.alias("output_tokens"),
    )


def check_percentiles(values: Sequence[float], source: str = "percentiles") -> tuple[float, ...]:
    """``values`` if every one is a finite number in (0, 100] and there is at least one, else raise naming ``source``."""
    if not values:
        raise InvalidInputError(f"{source}: give at least one percentile in (0, 100]")
    for p in values:
        if isinstance(p, bool) or not math.isfinite(p) or not 0.0 < p <= 100.0:
            raise InvalidInputError(f"{source} {p:g}: each percentile must be a number in (0, 100]")
    seen = [_pkey(p) for p in values]
    twice = sorted({k for k in seen if seen.count(k) > 1})
    if twice:  # the same column twice in the summary
        raise InvalidInputError(f"{source}: {', '.join(twice)} given twice; give each percentile once")
    return tuple(float(p) for p in values)


def _pkey(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """One per-request metric over the successful requests.

    Mean, median, std (population, as vLLM) and linear-interpolated percentiles; every figure is None
    when no request had a value.
    """

    mean: float | None
    median: float | None
    std: float | None
    percentiles: tuple[tuple[float, float | None], ...] = ()

    @classmethod
    def of(cls, values: pl.Series, percentiles: Sequence[float]) -> LatencyStats:
        """The statistics of ``values`` (nulls dropped)."""
        vals = values.drop_nulls().cast(pl.Float64)
        if vals.len() == 0:
            return cls(None, None, None, tuple((float(p), None) for p in percentiles))
        qs = []
        for p in percentiles:
            q = vals.quantile(p / 100.0, interpolation="linear")
            qs.append((float(p), None if q is None else float(q)))
        return cls(
            float(vals.mean()),  # type: ignore[arg-type]
            float(vals.median()),  # type: ignore[arg-type]
            float(vals.std(ddof=0)),  # type: ignore[arg-type]
            tuple(qs),
        )

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile, None when not computed or undefined."""
        return next((v for q, v in self.percentiles if q == float(p)), None)

    def items(self, name: str, unit: str) -> dict[str, float | None]:
        """The flat keys of ``vllm bench serve``: ``mean_<name><unit>``, ``median_...``, ``std_...``, ``p99_...``."""
        out = {
            f"mean_{name}{unit}": self.mean,
            f"median_{name}{unit}": self.median,
            f"std_{name}{unit}": self.std,
        }
        for p, v in self.percentiles:
            out[f"p{_pkey(p)}_{name}{unit}"] = v
        return out


_T = TypeVar("_T")
_FLAT = Annotated[_T, Field(exclude=True)]
"""A part :class:`ClientSummary` stores flat under ``vllm bench serve``'s names, not as a nested object."""
_SOME = Annotated[_T, Field(exclude_if=lambda v: v is None)]
"""An optional figure, stored only where there is one."""

_LATENCY_UNITS: Final = (
    ("ttft", "_ms"),
    ("tpot", "_ms"),
    ("itl", "_ms"),
    ("e2el", "_ms"),
    ("interactivity", "_tokens_per_s"),
)


@dataclass(frozen=True, slots=True)
class ClientSummary:
    """Run-level client metrics of one measured phase (see the module docstring for each formula).

    Stored in ``summary.json`` and printed by ``alflow bench`` as pydantic serializes it
    (:func:`alflow.util.rows.dump_row`): flat, with ``vllm bench serve``'s key names where they overlap (each latency's
    figures as ``mean_ttft_ms``...), optional figures only where there are some, non-finite values with a ``_note``.
    """

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft: _FLAT[LatencyStats]
    tpot: _FLAT[LatencyStats]
    itl: _FLAT[LatencyStats]
    e2el: _FLAT[LatencyStats]
    interactivity: _FLAT[LatencyStats]
    total_chunks: int
    tokens_per_chunk: float | None
    tokens_per_chunk_after_first: float | None
    num_nodes: int
    num_gpus: int
    output_throughput_per_gpu: float
    total_token_throughput_per_gpu: float
    good_requests: _SOME[int | None] = None
    request_goodput: _SOME[float | None] = None
    output_throughput_per_decode_gpu: _SOME[float | None] = None
    input_throughput_per_prefill_gpu: _SOME[float | None] = None
    errors: Annotated[
        tuple[tuple[str, int], ...], Field(exclude_if=lambda e: not e), PlainSerializer(dict)
    ] = ()
    timing: _FLAT[ClientTiming | None] = None
    """Whether the timestamps carry ITL percentiles and whether the client was the bottleneck
    (:mod:`alflow.loadgen.timing`); ``itl`` holds only the mean when they do not."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def all_ok(self) -> bool:
        """True when no measured request failed."""
        return self.failed == 0

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out: dict[str, object] = handler(self)
        for name, unit in _LATENCY_UNITS:
            out.update(getattr(self, name).items(name, unit))
        if self.timing is not None:
            if self.timing.itl_note is not None:
                what = (
                    "ITL median, std and percentiles"
                    if self.timing.itl_mean_measurable
                    else "ITL (every figure)"
                )
                out["itl_ms_note"] = f"{what} not measurable: {self.timing.itl_note}"
            out["client_verdict"] = self.timing.verdict
        note_nonfinite(
            out,
            "tpot_ms = 0 for a request (its output after the first chunk came all at once)",
            self.interactivity.items("interactivity", "_tokens_per_s"),
        )
        if self.timing is not None:
            out["client_timing"] = dump_row(self.timing)
        return out


def _meeting_slo(ok: pl.DataFrame, slo: SLO | None) -> int | None:
    """How many of the successful requests ``ok`` meet every bound of ``slo`` (None: no SLO given)."""
    if slo is None or slo.empty:
        return None
    meets = pl.lit(value=True)
    for col, limit in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2el_ms", slo.e2el_ms)):
        if limit is not None:
            meets = meets & (pl.col(col).is_null() | (pl.col(col) <= limit))
    return ok.filter(meets).height


def summarize(
    records: pl.DataFrame,
    *,
    duration_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: SLO | None = None,
    gpus: GpuLayout | None = None,
    client_load: ClientLoad | None = None,
) -> ClientSummary:
    """Run-level client metrics from records of the measured phase (warm-up rows are dropped).

    The timestamps are judged (:func:`alflow.loadgen.timing.client_timing`, with the client's ``client_load``
    when the run measured it): where they cannot carry inter-token gaps, the ITL median, std and percentiles
    are None (``itl_ms_note`` says why) and only the mean, which coalescing leaves intact, is kept.

    Latency statistics use successful requests only; ``failed`` counts the others and
    ``errors`` holds their distinct messages with counts, most frequent first, at most 10 (a run
    with failures has ``all_ok = False``: its numbers are not to be published as a success).
    """
    if duration_s <= 0:
        raise InvalidInputError(f"duration_s={duration_s} must be positive")
    check_percentiles(percentiles)
    req = per_request(records)
    ok = req.filter(pl.col("ok"))
    failed = req.filter(~pl.col("ok"))
    no_usage = records.filter(pl.col("error").is_null() & pl.col("output_tokens").is_null()).height
    if no_usage:
        log.warning("%d streams carried no usage: their output tokens are counted as chunks", no_usage)
    total_in = int(ok["input_tokens"].fill_null(0).sum())
    total_out = int(ok["output_tokens"].sum())
    chunks = int(ok["n_chunks"].sum())
    good = _meeting_slo(ok, slo)
    layout = gpus or GpuLayout()
    per_decode = per_prefill = None
    if layout.prefill_gpus is not None and layout.decode_gpus is not None:
        per_decode = total_out / duration_s / layout.decode_gpus
        per_prefill = total_in / duration_s / layout.prefill_gpus
    errors: tuple[tuple[str, int], ...] = ()
    if failed.height:
        counts = failed.group_by("error").len().sort(["len", "error"], descending=[True, False]).head(10)
        errors = tuple((str(e), int(n)) for e, n in counts.iter_rows())
    later_chunks = chunks - ok.height
    timing = client_timing(records, client_load)
    itl = LatencyStats.of(ok["itl_ms"].explode(), percentiles)
    if not timing.itl_measurable:
        mean = itl.mean if timing.itl_mean_measurable else None
        itl = LatencyStats(mean, None, None, tuple((p, None) for p, _ in itl.percentiles))
    return ClientSummary(
        duration=duration_s,
        completed=ok.height,
        failed=failed.height,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=ok.height / duration_s,
        output_throughput=total_out / duration_s,
        total_token_throughput=(total_in + total_out) / duration_s,
        ttft=LatencyStats.of(ok["ttft_ms"], percentiles),
        tpot=LatencyStats.of(ok["tpot_ms"], percentiles),
        itl=itl,
        e2el=LatencyStats.of(ok["e2el_ms"], percentiles),
        interactivity=LatencyStats.of(ok["interactivity"], percentiles),
        total_chunks=chunks,
        tokens_per_chunk=total_out / chunks if chunks else None,
        tokens_per_chunk_after_first=(total_out - ok.height) / later_chunks if later_chunks > 0 else None,
        num_nodes=layout.nodes,
        num_gpus=layout.gpus,
        output_throughput_per_gpu=total_out / duration_s / layout.gpus,
        total_token_throughput_per_gpu=(total_in + total_out) / duration_s / layout.gpus,
        good_requests=good,
        request_goodput=None if good is None else good / duration_s,
        output_throughput_per_decode_gpu=per_decode,
        input_throughput_per_prefill_gpu=per_prefill,
        errors=errors,
        timing=timing,
    )
