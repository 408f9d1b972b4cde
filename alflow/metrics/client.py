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
from typing import Final

import polars as pl

from alflow.errors import InvalidInputError
from alflow.jsonutil import note_nonfinite

log = logging.getLogger(__name__)

DEFAULT_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)
LATENCY_METRICS: Final = ("ttft", "tpot", "itl", "e2el")


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
    A server configuration's layout comes from :func:`alflow.topology.gpu_layout`.
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


def ttft_ms() -> pl.Expr:
    """``(first_token_ns - start_ns) / 1e6``: time to the first chunk carrying output."""
    return ((pl.col("first_token_ns") - pl.col("start_ns")) / 1e6).alias("ttft_ms")


def e2el_ms() -> pl.Expr:
    """``(end_ns - start_ns) / 1e6``: request start to the last chunk carrying output."""
    return ((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("e2el_ms")


def n_chunks() -> pl.Expr:
    """``len(chunk_ns)``: network reads that carried output."""
    return pl.col("chunk_ns").list.len().cast(pl.Int64).alias("n_chunks")


def output_tokens() -> pl.Expr:
    """Output tokens from the server's usage; the chunk count where no usage was sent."""
    return (
        pl.col("output_tokens").fill_null(pl.col("chunk_ns").list.len().cast(pl.Int64)).alias("output_tokens")
    )


def tpot_ms() -> pl.Expr:
    """``(end_ns - first_token_ns) / 1e6 / (output_tokens - 1)``; null for one-token outputs."""
    out = output_tokens()
    return (
        pl.when(out > 1)
        .then((pl.col("end_ns") - pl.col("first_token_ns")) / 1e6 / (out - 1))
        .otherwise(None)
        .alias("tpot_ms")
    )


def itl_ms() -> pl.Expr:
    """``diff(chunk_ns) / 1e6`` per request (a list): gaps between consecutive output chunks."""
    return (pl.col("chunk_ns").list.diff(null_behavior="drop") / 1e6).alias("itl_ms")


def interactivity() -> pl.Expr:
    """``1000 / tpot_ms``: output tokens per second as one user sees them."""
    return (1000.0 / tpot_ms()).alias("interactivity")


def tokens_per_chunk() -> pl.Expr:
    """``output_tokens / n_chunks``: with one chunk per engine step, the client-side AL."""
    return (output_tokens() / n_chunks()).alias("tokens_per_chunk")


def per_request(records: pl.DataFrame, *, include_warmup: bool = False) -> pl.DataFrame:
    """One row per request with ``ok`` and the per-request metrics (null where undefined)."""
    frame = records if include_warmup else records.filter(~pl.col("warmup"))
    return frame.with_columns(
        pl.col("error").is_null().alias("ok"),
        ttft_ms(),
        e2el_ms(),
        tpot_ms(),
        itl_ms(),
        interactivity(),
        n_chunks(),
        tokens_per_chunk(),
        output_tokens(),
    )


def check_percentiles(values: Sequence[float], source: str = "percentiles") -> tuple[float, ...]:
    """``values`` if every one is a finite number in (0, 100] and there is at least one, else raise naming ``source``."""
    if not values:
        raise InvalidInputError(f"{source}: give at least one percentile in (0, 100]")
    for p in values:
        if isinstance(p, bool) or not math.isfinite(p) or not 0.0 < p <= 100.0:
            raise InvalidInputError(f"{source} {p:g}: each percentile must be a number in (0, 100]")
    return tuple(float(p) for p in values)


def _pkey(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def _stats(values: pl.Series, name: str, unit: str, percentiles: Sequence[float]) -> dict[str, float | None]:
    """mean, median, std (population, as vLLM) and linear-interpolated percentiles of ``values``."""
    vals = values.drop_nulls().cast(pl.Float64)
    empty = vals.len() == 0
    out: dict[str, float | None] = {
        f"mean_{name}{unit}": None if empty else float(vals.mean()),  # type: ignore[arg-type]
        f"median_{name}{unit}": None if empty else float(vals.median()),  # type: ignore[arg-type]
        f"std_{name}{unit}": None if empty else float(vals.std(ddof=0)),  # type: ignore[arg-type]
    }
    for p in percentiles:
        q = None if empty else vals.quantile(p / 100.0, interpolation="linear")
        out[f"p{_pkey(p)}_{name}{unit}"] = None if q is None else float(q)
    return out


def summarize(
    records: pl.DataFrame,
    *,
    duration_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: SLO | None = None,
    gpus: GpuLayout | None = None,
) -> dict[str, object]:
    """Run-level client metrics from records of the measured phase (warm-up rows are dropped).

    Latency statistics use successful requests only; ``failed`` counts the others and
    ``errors`` lists their distinct messages with counts (a run with failures is flagged by
    ``all_ok = False``, its numbers are not to be published as a success).
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
    out: dict[str, object] = {
        "duration": duration_s,
        "completed": ok.height,
        "failed": failed.height,
        "all_ok": failed.height == 0,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": ok.height / duration_s,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
    }
    if slo is not None and not slo.empty:
        good = pl.lit(value=True)
        for col, limit in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2el_ms", slo.e2el_ms)):
            if limit is not None:
                good = good & (pl.col(col).is_null() | (pl.col(col) <= limit))
        n_good = ok.filter(good).height
        out["good_requests"] = n_good
        out["request_goodput"] = n_good / duration_s
    out.update(_stats(ok["ttft_ms"], "ttft", "_ms", percentiles))
    out.update(_stats(ok["tpot_ms"], "tpot", "_ms", percentiles))
    out.update(_stats(ok["itl_ms"].explode(), "itl", "_ms", percentiles))
    out.update(_stats(ok["e2el_ms"], "e2el", "_ms", percentiles))
    inter = _stats(ok["interactivity"], "interactivity", "_tokens_per_s", percentiles)
    out.update(inter)
    note_nonfinite(
        out, "tpot_ms = 0 for a request (its output after the first chunk came all at once)", inter
    )
    out["total_chunks"] = chunks
    out["tokens_per_chunk"] = total_out / chunks if chunks else None
    later_chunks = chunks - ok.height
    out["tokens_per_chunk_after_first"] = (total_out - ok.height) / later_chunks if later_chunks > 0 else None
    layout = gpus or GpuLayout()
    out["num_nodes"] = layout.nodes
    out["num_gpus"] = layout.gpus
    out["output_throughput_per_gpu"] = total_out / duration_s / layout.gpus
    out["total_token_throughput_per_gpu"] = (total_in + total_out) / duration_s / layout.gpus
    if layout.prefill_gpus is not None and layout.decode_gpus is not None:
        out["output_throughput_per_decode_gpu"] = total_out / duration_s / layout.decode_gpus
        out["input_throughput_per_prefill_gpu"] = total_in / duration_s / layout.prefill_gpus
    if failed.height:
        counts = failed.group_by("error").len().sort("len", descending=True).head(10)
        out["errors"] = {str(e): int(n) for e, n in counts.iter_rows()}
    return out
