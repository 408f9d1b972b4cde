"""The one reader of stored runs: which model, framework and image a run served, its points, its tables.

Reports (:mod:`alflow.reports.content`), exports (:mod:`alflow.reports.exports`) and the command line
read runs through these functions, so one question (which framework ran? how far may this point's AL
be from its target?) has one answer everywhere. The manifest is typed
(:class:`~alflow.results.manifest.RunManifest`); the flow's configuration is the one part kept as JSON,
and the facts read from it are read here. Runs written by older versions lack some keys: every
accessor tolerates that and answers ``None``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import ValidationError

from alflow.acceptance.synthetic import distribution
from alflow.errors import AlflowError
from alflow.gates import Verdict
from alflow.measure import RequestAcceptance, request_acceptance, stored_acceptance
from alflow.metrics.client import per_request
from alflow.reference.table import ReferenceEntry, upgrade_entry_v1
from alflow.results.point_table import PointTableError, checked_points, max_points
from alflow.results.regression import REGRESSION_FILE, RegressionReport, parse_report
from alflow.results.rows import M2Point
from alflow.results.store import StoredRun, StoreError


def get_path(data: object, *path: str) -> Any:
    """``data[path[0]][path[1]]...``, or None where a key is missing or a level is not a mapping."""
    cur: Any = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def table_or_none(run: StoredRun, name: str) -> pl.DataFrame | None:
    """The run's ``NAME.parquet`` table, or None when the run has none (or it cannot be read)."""
    try:
        return run.table(name) if run.has(f"{name}.parquet") else None
    except AlflowError:
        return None


def table_problem(run: StoredRun, name: str) -> str | None:
    """Why the run's listed ``NAME.parquet`` cannot be read (damaged, not parquet); None: it reads, or is unlisted."""
    try:
        if run.has(f"{name}.parquet"):
            run.table(name)
    except AlflowError as exc:
        return " ".join(str(exc).split())[:300]
    return None


def json_or_none(run: StoredRun, name: str) -> dict[str, Any] | None:
    """The run's ``NAME.json``, or None when the run has none (or it cannot be read)."""
    try:
        return run.json(name) if run.has(f"{name}.json") else None
    except AlflowError:
        return None


def regression_report(run: StoredRun) -> RegressionReport | None:
    """The run's regression verdicts (``regression.json``), None when it has none or it cannot be read."""
    try:
        return regression_or_problem(run)[0]
    except AlflowError:
        return None


def regression_or_problem(run: StoredRun) -> tuple[RegressionReport | None, str | None]:
    """The run's regression verdicts, or why its ``regression.json`` cannot be read (both None: it has none)."""
    if not run.has(f"{REGRESSION_FILE}.json"):
        return None, None
    try:
        return parse_report(run.json(REGRESSION_FILE), f"{REGRESSION_FILE}.json"), None
    except AlflowError as exc:
        return None, " ".join(str(exc).replace(run.dir, ".").split())


def summary(run: StoredRun) -> dict[str, Any]:
    """The run's ``summary.json`` (empty when it wrote none)."""
    return json_or_none(run, "summary") or {}


def config_value(run: StoredRun, *path: str) -> Any:
    """A value of the flow's parameters (``config.workload.isl``), None where absent."""
    return get_path(run.manifest.config, *path)


def model_id(run: StoredRun) -> str | None:
    """The model the run served (from its configuration)."""
    config = run.manifest.config
    mid = get_path(config, "model", "id") or get_path(config, "server", "model")
    if mid is None and isinstance(config.get("models"), list):
        mids = [str(m.get("id")) for m in config["models"] if isinstance(m, Mapping)]
        mid = ", ".join(mids) or None
    return None if mid is None else str(mid)


def framework(run: StoredRun) -> str | None:
    """The serving framework of the run (provenance first, then configuration)."""
    server = run.manifest.provenance.server
    fw = (server.framework if server is not None else None) or config_value(run, "server", "framework")
    return None if fw is None else str(fw)


def dialect(run: StoredRun) -> str | None:
    """The metrics dialect the server spoke (the sim can speak another framework's)."""
    server = run.manifest.provenance.server
    return None if server is None else server.dialect


IMAGELESS_RUNNERS = frozenset({"process"})
"""Runners that start a server from an installed program, not an image: a run's image is the one its launch kept
(the sim's label, :func:`alflow.frameworks.recipes.check_install`), never the configuration's."""


def image(run: StoredRun) -> tuple[str | None, str | None]:
    """The container image and its digest, where the run had one (a process-run server had none)."""
    server = run.manifest.provenance.server
    if server is not None and server.runner in IMAGELESS_RUNNERS:
        return server.launch_image, None  # never the configuration's: it was not used
    img = (server.launch_image if server is not None else None) or config_value(run, "server", "image")
    digest = None if server is None else server.image_digest
    return (None if img is None else str(img), digest)


def served_by(run: StoredRun) -> str | None:
    """What served a run without an image: ``vllm 0.32.0 (process)`` (the live server's version); else None."""
    server = run.manifest.provenance.server
    if server is None or server.runner not in IMAGELESS_RUNNERS or server.launch_image:
        return None
    parts = [server.framework or framework(run), server.provenance.framework_version]
    return " ".join(str(p) for p in parts if p) + f" ({server.runner})"


def server_command(run: StoredRun) -> str | None:
    """The server's command line, where the recipe recorded it."""
    server = run.manifest.provenance.server
    return None if server is None else server.command


def scheme(run: StoredRun) -> str | None:
    """M2: the synthetic-acceptance scheme (the summary's, else the provenance's)."""
    value = summary(run).get("scheme") or run.manifest.provenance.scheme
    return None if value is None else str(value)


WORKLOAD_FIELDS = ("kind", "isl", "osl", "range_ratio", "endpoint")
"""The parts of an M2 run's ``workload`` a trend line names: another prompt shape is another line."""
SETUP_PATHS = (("draft_model",), *(("server", name) for name in (
    "revision", "parallelism", "nodes", "disaggregation", "enable_prefix_caching", "max_model_len", "extra_args",
)))  # fmt: skip
"""The configuration a trend line is measured under, beside the workload: another one is another line."""


def workload(run: StoredRun) -> str:
    """What an M2 run measured under, as a trend line names it: ``random isl 1024 osl 1024 ... · mtp · setup 1a2b3c4d``.

    The workload's shape in words, the speculative method, and a digest of the server settings that change the
    work per token (parallelism, nodes, engine arguments...; defaults left out, so a run written before a
    setting existed signs as one written after with it at its default). ``""`` for a run without them.
    """
    shape = config_value(run, "workload")
    words = [
        f"{name} {shape[name]}" if name != "kind" else str(shape[name])
        for name in WORKLOAD_FIELDS
        if isinstance(shape, Mapping) and shape.get(name) is not None
    ]
    method = config_value(run, "method")
    setup = {"/".join(path): _non_default(config_value(run, *path)) for path in SETUP_PATHS}
    setup = {name: value for name, value in setup.items() if value is not None}
    parts = [" ".join(words), "" if method is None else str(method)]
    if setup:
        signed = json.dumps(setup, sort_keys=True, default=str, separators=(",", ":")).encode()
        parts.append(f"setup {hashlib.sha256(signed).hexdigest()[:8]}")
    return " · ".join(part for part in parts if part)


def _non_default(value: object) -> object:
    """``value`` without its default parts (None, False, empty, 1 for a size); None when nothing is left."""
    if isinstance(value, Mapping):
        kept = {str(k): _non_default(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None} or None
    if isinstance(value, list | tuple):
        return list(value) or None
    default = value is None or value is False or value == "" or (type(value) is int and value == 1)
    return None if default else value


def m2_points(run: StoredRun) -> list[M2Point]:
    """The M2 points (one per concurrency and repeat): ``spec_stats.parquet``, else the summary's points.

    Both go through the one check of points (:mod:`alflow.results.point_table`): a table that cannot be read or holds
    what alflow never writes (K=0, a negative throughput, the same point twice, a column of another type) raises a
    :class:`StoreError` naming it, never "no points". A summary's row that is not a point (it lacks its concurrency,
    K or target) is left out, as before; one out of bounds is an error too.
    """
    try:
        if run.has("spec_stats.parquet"):
            return run.points()  # its columns and rows checked once, as it is read
        raw = summary(run).get("points") or []
        flow = run.manifest.flow
        rows = (
            [p for p in raw[: max_points(flow) + 1] if isinstance(p, Mapping)]
            if isinstance(raw, list)
            else []
        )
        return checked_points(f"{run.dir}/summary.json points", rows, flow=flow, strict=False)
    except PointTableError as exc:
        raise StoreError(str(exc)) from None


def m0_entries(run: StoredRun) -> tuple[list[ReferenceEntry], list[str]]:
    """The reference entries an M0 run measured (``summary.json``), and why any stored entry is not one.

    Keys this version does not know are ignored; an entry that still does not validate is reported as
    ``entry N: field: message``, never dropped silently.
    """
    entries: list[ReferenceEntry] = []
    problems: list[str] = []
    known = set(ReferenceEntry.model_fields)
    for i, raw in enumerate(summary(run).get("entries") or []):
        # an entry stored before the reference schema's version 2 gains the variant it was measured with
        data = (
            upgrade_entry_v1({k: v for k, v in raw.items() if k in known})
            if isinstance(raw, Mapping)
            else raw
        )
        try:
            entries.append(ReferenceEntry.model_validate(data))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(entry)"
            problems.append(f"entry {i + 1}: {where}: {err['msg']}")
    return entries, problems


def m0_request_acceptance(run: StoredRun) -> list[tuple[str, RequestAcceptance]]:
    """Per calibration point (its ``scrapes.json`` key: model, method, thinking, K), the per-request acceptance.

    Points measured by a server whose responses carried no per-request counts (or by an older alflow) are left out.
    """
    points = get_path(json_or_none(run, "scrapes"), "points")
    out: list[tuple[str, RequestAcceptance]] = []
    if not isinstance(points, Mapping):
        return out
    for key, point in points.items():
        raw = point.get("per_request") if isinstance(point, Mapping) else None
        got = stored_acceptance(raw)
        if got is not None:
            out.append((str(key), got))
    return out


def run_request_acceptance(run: StoredRun) -> RequestAcceptance | None:
    """The per-request acceptance of a run's stored requests (M1's AL point); None without per-request counts."""
    records = table_or_none(run, "requests")
    if records is None or records.height == 0 or not {"warmup", "error"} <= set(records.columns):
        return None
    return request_acceptance(records)


def m1_verdicts(run: StoredRun) -> list[Verdict]:
    """The gates' verdicts an M1 run stored (``summary.json``), with their typed details.

    A row that is not a verdict (it lacks its gate or its outcome) is left out; details a row cannot give are None.
    """
    verdicts = []
    for row in summary(run).get("verdicts") or []:
        try:
            verdicts.append(Verdict.model_validate(row))
        except ValidationError:
            continue
    return verdicts


@dataclass(frozen=True)
class AuditSpread:
    """How far an M2 point's AL may be from its target: the audit's expected mean, per-step std, allowance."""

    expected: float | None
    std: float | None
    allowed: float | None


def audit_spread(run: StoredRun, point: M2Point) -> AuditSpread:
    """The audit's expected mean and allowed deviation as the flow stored them, and the scheme's per-step std.

    The allowance is the audit's own (``max(abs_tol, z * std / sqrt(n))``, stored with the point);
    the std is the scheme's distribution at the point's K and target (None where the scheme is unknown).
    """
    std: float | None = None
    name = scheme(run)
    if name is not None:
        with contextlib.suppress(AlflowError):
            std = distribution(name, point.k, al=point.target_al).std
    return AuditSpread(expected=point.expected_al, std=std, allowed=point.allowed_deviation)


def latency_percentiles(run: StoredRun, percentiles: Sequence[float] = (50, 90, 99)) -> pl.DataFrame | None:
    """Per concurrency: TTFT, TPOT, ITL and E2E latency percentiles from ``requests.parquet``."""
    records = table_or_none(run, "requests")
    if records is None or records.height == 0 or "concurrency" not in records.columns:
        return None
    req = per_request(records).filter(pl.col("ok"))
    if req.height == 0:
        return None
    itl = req.select("concurrency", pl.col("itl_ms")).explode("itl_ms")

    def quantiles(frame: pl.DataFrame, *names: str) -> pl.DataFrame:
        return frame.group_by("concurrency").agg(
            pl.col(f"{n}_ms").quantile(p / 100.0, interpolation="linear").alias(f"p{p:g}_{n}_ms")
            for p in percentiles
            for n in names
        )

    main = quantiles(req, "ttft", "tpot", "e2el")
    return main.join(quantiles(itl, "itl"), on="concurrency", how="left").sort("concurrency")
