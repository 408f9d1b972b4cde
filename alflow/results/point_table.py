"""The one check of a run's M2 points (``spec_stats.parquet`` of an M2 or sweep run, ``summary.json``'s points).

Issue #49, hostile round 17 (F3): ``requests.parquet`` was checked as it was read, the points table not at all, so
K=0 with AL 3.27, concurrency -4 or 2^62, a TPOT of -5 ms, a throughput of -1e300 and the same point twice were
shown as "All N point(s) valid", ``passed`` and trended, and a column of the wrong type made the run "store no
benchmark points". Every reader of the points table goes through :func:`checked_point_table` (its columns, then each
row once: :meth:`alflow.results.store.StoredRun.table` and :meth:`~alflow.results.store.StoredRun.points`), and
``summary.json``'s points through :func:`checked_points` (:func:`alflow.results.view.m2_points`); a table that fails is a :class:`~alflow.results.store.StoreError` of one
line naming the file, the column (or rows) and what alflow writes, so its run is ``unreadable`` with that reason.

The bounds are what the configuration lets a run measure (:data:`~alflow.config.base.MAX_CONCURRENCY`, K in
[:data:`~alflow.acceptance.synthetic.K_MIN`, :data:`~alflow.acceptance.synthetic.K_MAX`], ``repeats`` at most
:data:`~alflow.config.base.MAX_REPEATS`, ``nodes`` at most :data:`~alflow.config.base.MAX_NODES`) and what the
measurement can give (an AL in [1, K + 1], finite non-negative throughputs, latencies and counts).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import polars as pl
from polars.datatypes import DataTypeClass
from pydantic import ValidationError

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.config.base import MAX_CONCURRENCY, MAX_NODES, MAX_REPEATS
from alflow.errors import AlflowError
from alflow.metrics.point_metrics import INTERACTIVITY, POINT_METRICS
from alflow.results.rows import M2Point

POINT_FLOWS: Final = frozenset({"m2", "sweep"})
"""The flows whose ``spec_stats.parquet`` is a table of M2 points (M1's holds its spec-decode statistics)."""
RUN_MAX_POINTS: Final = 1_000
"""The most points one M2 run measures (:data:`alflow.methods.m2.MAX_POINTS` is this: its plan is stopped there)."""
MAX_POINTS: Final = {"m2": RUN_MAX_POINTS, "sweep": (K_MAX - K_MIN + 1) * RUN_MAX_POINTS}
"""The most points a run of each flow in :data:`POINT_FLOWS` is read with: what alflow can write. An M2 run stops at
:data:`RUN_MAX_POINTS`; a sweep stores the points of one M2 run per K, each K once (``SweepParams`` refuses a K
twice), so at most 16 x 1,000."""
REQUIRED: Final = ("concurrency", "k", "target_al")
"""The columns that make a row a point (:class:`~alflow.results.rows.M2Point` refuses a row without them)."""
_SLACK: Final = 1e-9
"""Rounding allowed at a bound computed in floating point (an AL of exactly K + 1, a p-value of 1)."""


class PointTableError(AlflowError):
    """A table or list of M2 points that is not as alflow writes it (the message names where and why)."""


def _kind_of(annotation: object) -> str:
    """``integer``, ``number``, ``boolean``, ``text``, ``integer list`` or ``number list`` of a field's type."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = args
        args = list(typing.get_args(annotation))
    if typing.get_origin(annotation) is tuple:
        return f"{_kind_of(args[0])} list"
    kinds = {int: "integer", float: "number", bool: "boolean", str: "text"}
    if annotation not in kinds:
        raise TypeError(f"M2Point field of type {annotation!r}: no stored kind")
    return kinds[annotation]


def _column_kinds() -> dict[str, str]:
    kinds = {
        name: _kind_of(info.annotation) for name, info in M2Point.model_fields.items() if name != "metrics"
    }
    kinds.update({m.name: "number" for m in POINT_METRICS})
    return kinds


COLUMN_KINDS: Final = _column_kinds()
"""The kind of every column alflow writes in a points table: :class:`M2Point`'s fields and the declared figures."""
_CANONICAL: Final[dict[str, pl.DataType]] = {
    "integer": pl.Int64(),
    "number": pl.Float64(),
    "boolean": pl.Boolean(),
    "text": pl.String(),
    "integer list": pl.List(pl.Int64()),
    "number list": pl.List(pl.Float64()),
}
"""The dtype alflow writes for each kind (``pl.DataFrame`` of ``model_dump()`` rows); a column is read as it."""


def dtype_fits(got: DataTypeClass | pl.DataType, expected: DataTypeClass | pl.DataType) -> bool:
    """Whether a stored column of ``got`` reads as alflow's ``expected`` without loss: the one rule of the tables.

    Exactly, or all nulls; a list of what fits the expected list's items; another integer width for an integer
    (Int32 as Int64: a value beyond the expected width fails the cast, named then); an integer or another float for a
    float. Booleans and text exactly (a ``valid`` or ``warmup`` of integers is no table alflow wrote). The points table
    (:func:`checked_point_columns`) and the requests table (:func:`alflow.results.store.StoredRun.table`) use it.
    """
    if got in (expected, pl.Null):
        return True
    if isinstance(expected, pl.List):
        return isinstance(got, pl.List) and dtype_fits(got.inner, expected.inner)
    if expected.is_integer():
        return got.is_integer()
    if expected.is_float():
        return got.is_integer() or got.is_float()
    return False


def checked_point_columns(where: str, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (a points table) with each known column of the kind alflow writes, read as alflow's dtype.

    Raises :class:`PointTableError` (one line naming ``where`` and the column) for a column of another kind
    (:func:`dtype_fits`: ``valid`` of integers, ``achieved_al`` a struct, ``start`` text), a required column (:data:`REQUIRED`) missing or null, or an integer beyond 64 bits. Other columns are kept.
    """
    casts = []
    for column, dtype in frame.schema.items():
        kind = COLUMN_KINDS.get(column)
        if kind is None:
            continue  # a column this version does not know: ignored, as M2Point ignores it
        wanted = _CANONICAL[kind]
        if not dtype_fits(dtype, wanted):
            raise PointTableError(
                f"{where}: column {column} holds {dtype}, alflow writes {wanted} ({kind}): not as alflow wrote it"
            )
        if dtype != pl.Null and dtype != _CANONICAL[kind]:
            casts.append(column)
    if frame.height:
        for column in REQUIRED:
            if column not in frame.columns:
                raise PointTableError(f"{where}: no column {column}: every point alflow writes has one")
            if frame[column].null_count():
                raise PointTableError(f"{where}: column {column} is empty in some row: every point has one")
    for column in casts:
        try:
            frame = frame.with_columns(pl.col(column).cast(_CANONICAL[COLUMN_KINDS[column]], strict=True))
        except pl.exceptions.PolarsError:  # a UInt64 beyond Int64: no count alflow writes
            series = frame[column]
            held = f"{series.max()!r:.40}" if series.dtype.is_integer() else "a value"
            raise PointTableError(
                f"{where}: column {column} holds {held}, beyond the 64-bit integers alflow writes: not as alflow "
                "wrote it"
            ) from None
    return frame


def _number(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _within(low: float, high: float | None = None) -> Callable[[float], bool]:
    def ok(value: float) -> bool:  # an int beyond a float's range (summary.json's 10**400) compares exactly
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return low - _SLACK <= value and (high is None or value <= high + _SLACK)

    return ok


_NON_NEGATIVE: Final = _within(0.0)


def _at_least_zero(value: float) -> bool:
    return value >= 0.0  # NaN is not; +inf is


_SHARE: Final = _within(0.0, 1.0)


def _rules(p: M2Point) -> Iterable[tuple[str, object, Callable[[Any], bool], str]]:
    """(column, value, test, what alflow writes) of each bounded field of ``p`` that holds a value."""
    al = _within(1.0, p.k + 1)
    yield "concurrency", p.concurrency, _within(1, MAX_CONCURRENCY), f"an integer in [1, {MAX_CONCURRENCY:,}]"
    yield "k", p.k, _within(K_MIN, K_MAX), f"an integer in [{K_MIN}, {K_MAX}]"
    yield "target_al", p.target_al, al, f"a number in [1, K + 1 = {p.k + 1}]"
    yield "achieved_al", p.achieved_al, al, f"a number in [1, K + 1 = {p.k + 1}]"
    yield "expected_al", p.expected_al, al, f"a number in [1, K + 1 = {p.k + 1}]"
    yield "repeat", p.repeat, _within(0, MAX_REPEATS - 1), f"an integer in [0, {MAX_REPEATS - 1}]"
    yield "nodes", p.nodes, _within(1, MAX_NODES), f"an integer in [1, {MAX_NODES:,}]"
    yield "num_gpus", p.num_gpus, _within(1), "an integer of at least 1"
    for name in ("num_drafts", "completed", "failed"):
        yield name, getattr(p, name), _NON_NEGATIVE, "a count (0 or more)"
    for name in ("duration_s", "allowed_deviation", "client_cpu_share", "loop_lag_p99_ms"):
        yield name, getattr(p, name), _NON_NEGATIVE, "a finite number of at least 0"
    for name in ("fit_p_value", "coalesced_share"):
        yield name, getattr(p, name), _SHARE, "a number in [0, 1]"
    for m in POINT_METRICS:
        if (
            m is INTERACTIVITY
        ):  # 1 / TPOT: infinite where every request's TPOT was 0 (one chunk), as alflow stores it
            yield m.name, p.value(m), _at_least_zero, "a number of at least 0 (infinite at a TPOT of 0)"
        else:
            yield m.name, p.value(m), _NON_NEGATIVE, "a finite number of at least 0"
    for name in ("histogram_observed", "histogram_expected"):
        values = getattr(p, name) or ()
        bad = next((v for v in values if not _NON_NEGATIVE(v)), None)
        yield name, bad, _NON_NEGATIVE, "finite numbers of at least 0"


def point_problem(p: M2Point) -> str | None:
    """The first field of ``p`` outside what alflow writes: ``column X holds V, alflow writes ...``; None: none."""
    for column, value, ok, allowed in _rules(p):
        if value is not None and not ok(value):
            return f"column {column} holds {_number(value)}, alflow writes {allowed}"
    return None


def max_points(flow: str) -> int:
    """The most points a ``flow`` run writes (:data:`MAX_POINTS`; one M2 run's for a flow not in it)."""
    return MAX_POINTS.get(flow, RUN_MAX_POINTS)


def refuse_beyond(where: str, count: int, flow: str) -> None:
    """Raise :class:`PointTableError` when ``count`` points are more than a ``flow`` run can write (:data:`MAX_POINTS`).

    A million rows held a whole root's refresh for a minute: a table past the bound is not read at all.
    """
    most = max_points(flow)
    if count > most:
        raise PointTableError(
            f"{where}: more than {most:,} points, not read ({flow} runs write at most {most:,})"
        )


def checked_points(
    where: str, rows: Sequence[Mapping[str, Any]], *, flow: str, strict: bool = True
) -> list[M2Point]:
    """The M2 points of ``rows``, each within what alflow writes, one per (K, concurrency, repeat).

    At most :data:`MAX_POINTS` of a ``flow`` run (counted before any row is read). ``strict``: a row that is no point (:class:`M2Point` refuses it) is an error, as in a table whose columns were
    checked; else it is left out (``summary.json``'s points, read tolerantly). Raises :class:`PointTableError` naming
    ``where``, the row (1-based) and the column, or the two rows that are the same point.
    """
    refuse_beyond(where, len(rows), flow)
    return _points(where, rows, strict=strict)


def _points(where: str, rows: Iterable[Mapping[str, Any]], *, strict: bool) -> list[M2Point]:
    points: list[M2Point] = []
    seen: dict[tuple[int, int, int], int] = {}
    for i, row in enumerate(rows, 1):
        try:
            point = M2Point.model_validate(row)
        except ValidationError as exc:
            if not strict:
                continue
            err = exc.errors()[0]
            column = ".".join(str(part) for part in err["loc"]) or "(row)"
            raise PointTableError(
                f"{where}: row {i}: {column}: {err['msg']}: not a point alflow writes"
            ) from None
        problem = point_problem(point)
        if problem is not None:
            raise PointTableError(f"{where}: row {i}: {problem}: not a point alflow measured")
        key = (point.k, point.concurrency, point.repeat)
        first = seen.setdefault(key, i)
        if first != i:
            raise PointTableError(
                f"{where}: rows {first} and {i} are the same point (K={point.k}, concurrency {point.concurrency}, "
                f"repeat {point.repeat}): alflow writes one row per point"
            )
        points.append(point)
    return points


def checked_point_table(where: str, frame: pl.DataFrame, flow: str) -> tuple[pl.DataFrame, list[M2Point]]:
    """``frame`` (a ``flow`` run's points table) as :func:`checked_point_columns` reads it, and its points.

    Each row is checked once, as :func:`checked_points` checks it (at most :data:`MAX_POINTS`, counted first).
    """
    refuse_beyond(where, frame.height, flow)
    frame = checked_point_columns(where, frame)
    return frame, _points(where, frame.iter_rows(named=True), strict=True)
