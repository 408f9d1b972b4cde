"""Reading a stored run's facts: which model, framework and image it ran, its M2 points.

The reports (:mod:`alflow.reports.content`) and the exports (:mod:`alflow.reports.exports`) both read
runs through these functions, so one question (which framework ran?) has one answer everywhere.
Runs written by older versions lack some keys: every accessor tolerates that and answers ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from alflow.errors import AlflowError
from alflow.results.store import StoredRun


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
    if not run.has(f"{name}.parquet"):
        return None
    try:
        return run.table(name)
    except AlflowError:
        return None


def json_or_none(run: StoredRun, name: str) -> dict[str, Any] | None:
    """The run's ``NAME.json``, or None when the run has none (or it cannot be read)."""
    if not run.has(f"{name}.json"):
        return None
    try:
        return run.json(name)
    except AlflowError:
        return None


def model_id(run: StoredRun) -> str | None:
    """The model the run served (from its configuration)."""
    config = run.manifest.get("config") or {}
    mid = get_path(config, "model", "id") or get_path(config, "server", "model")
    if mid is None and isinstance(config.get("models"), list):
        mids = [str(m.get("id")) for m in config["models"] if isinstance(m, Mapping)]
        mid = ", ".join(mids) or None
    return None if mid is None else str(mid)


def framework(run: StoredRun) -> str | None:
    """The serving framework of the run (provenance first, then configuration)."""
    prov = run.manifest.get("provenance") or {}
    fw = get_path(prov, "server", "provenance", "framework") or get_path(
        run.manifest.get("config"), "server", "framework"
    )
    return None if fw is None else str(fw)


def image(run: StoredRun) -> tuple[str | None, str | None]:
    """The container image and its digest, where the run had one."""
    prov = run.manifest.get("provenance") or {}
    server = get_path(prov, "server") or {}
    img = (
        get_path(server, "image")
        or get_path(server, "provenance", "image")
        or get_path(run.manifest.get("config"), "server", "image")
    )
    digest = get_path(server, "image_digest")
    return (None if img is None else str(img), None if digest is None else str(digest))


def m2_points(run: StoredRun) -> list[dict[str, Any]]:
    """The M2 points (one per concurrency): ``spec_stats.parquet``, else the summary's points."""
    frame = table_or_none(run, "spec_stats")
    if frame is not None and frame.height:
        return [dict(r) for r in frame.iter_rows(named=True)]
    summary = json_or_none(run, "summary") or {}
    return [dict(p) for p in summary.get("points") or [] if isinstance(p, Mapping)]
