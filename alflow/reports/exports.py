"""Exports to the formats peers publish.

- :func:`al_matrix`: the acceptance-length matrix of peers' speculative-decoding reports (AIPerf's
  ``speed-bench-report``): CSV header ``Model,<category columns>,Overall``, one row per model
  configuration. The ``Model`` cell is ``<model> [<framework> <method> K=<k> thinking=<mode>]`` so
  that K and thinking mode never collide in one row. ``Overall`` pools the categories:
  ``1 + sum(accepted) / sum(verify steps)`` where every cell has its counts, else the mean of the
  category ALs. Sources: M0 runs (each calibration entry) and M1 runs (the measured AL).
- :func:`inferencex_rows`: one row per M2 concurrency point in the field layout of the public
  InferenceX results (``utils/process_result.py`` of SemiAnalysisAI/InferenceX, single node):
  ``hw, conc, image, model, infmax_model_prefix, framework, precision, spec_decoding, disagg, isl,
  osl, is_multinode, tp, ep, dp_attention, tput_per_gpu, output_tput_per_gpu, input_tput_per_gpu``,
  then every ``*_ms`` latency statistic of ``vllm bench serve`` converted to seconds with the
  ``_ms`` suffix dropped (``median_ttft``, ``p99_tpot``, ...) and, for each TPOT statistic, the
  interactivity ``1000 / tpot_ms`` under the same name with ``tpot`` replaced by ``intvty``.
  alflow adds the speculative facts after them (``num_speculative_tokens``, ``synthetic_scheme``,
  ``target_al``, ``achieved_al``, ``audit_valid``, ``simulated``, ``alflow_run_id``, ``repeat``: which repeat of
  its (K, concurrency) the point is, 0-based, ``BenchmarkParams.repeats``) and the audit's shape
  test, named as the stored point names them (``al_source``: ``per-request`` or ``counters``;
  ``fit_p_value``; ``histogram_observed`` and ``histogram_expected``: verify steps by accept length
  1..K+1). In JSON the histograms are lists; in CSV one cell each, the counts joined by ``;``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import polars as pl

from alflow.metrics.client import GpuLayout, summarize
from alflow.metrics.point_metrics import OUTPUT_PER_GPU, POINT_METRICS, TOTAL_PER_GPU
from alflow.reports.markdown import spreadsheet_safe
from alflow.reports.matrix import m0_label, m1_label, run_column
from alflow.reports.svg import finite
from alflow.results.store import StoredRun
from alflow.results.view import framework, get_path, image, m0_entries, m2_points, model_id, scheme
from alflow.util import jsonutil
from alflow.util.rows import dump_row

LATENCY_PERCENTILES: Final = (90.0, 95.0, 99.0)


# --------------------------------------------------------------------------------------------
# Acceptance-length matrix


def _cells(run: StoredRun) -> list[dict[str, Any]]:
    """(label, category, al, steps, accepted) cells of one M0 or M1 run."""
    category = run_column(run)  # the literature dataset, else the SPEED-Bench category
    if run.manifest.flow == "m0":
        fw = framework(run) or "?"
        entries, _unreadable = m0_entries(run)  # the run's report names the unreadable ones
        return [
            {
                "label": m0_label(e, fw),
                "category": category,
                "al": finite(e.al),
                "steps": e.num_drafts,
                "accepted": e.accepted_tokens,
            }
            for e in entries
        ]
    if run.manifest.flow != "m1" or not run.has("spec_stats.parquet"):
        return []
    frame = run.table("spec_stats")
    if not frame.height:
        return []
    row = frame.row(0, named=True)
    return [
        {
            "label": m1_label(run),
            "category": category,
            "al": finite(row.get("al")),
            "steps": row.get("num_drafts"),
            "accepted": row.get("accepted_tokens"),
        }
    ]


def al_matrix(runs: Sequence[StoredRun]) -> pl.DataFrame:
    """The AL matrix ``Model, <categories (sorted)>, Overall`` from M0/M1 runs.

    Cells of one configuration from several runs (one category each) share a row; a configuration
    that a later run measured again in the same category gets its own row, labelled ``run=<id>``.
    """
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    owner: dict[tuple[str, str], str] = {}
    for run in runs:
        rid = run.manifest.run_id
        for cell in _cells(run):
            key = (cell["label"], cell["category"])
            if key in owner and owner[key] != rid:  # the same configuration from another run: its own row
                cell["label"] = f"{cell['label']} run={rid[:8]}"
                key = (cell["label"], cell["category"])
            owner[key] = rid
            cells[key] = cell
    labels = list(dict.fromkeys(label for label, _ in cells))
    categories = sorted({cat for _, cat in cells})
    rows: list[dict[str, Any]] = []
    for label in labels:
        row: dict[str, Any] = {"Model": label}
        mine = [cells[(label, c)] for c in categories if (label, c) in cells]
        for c in categories:
            found = cells.get((label, c))
            row[c] = None if found is None else found["al"]
        counted = all(
            isinstance(x["steps"], int) and x["steps"] > 0 and isinstance(x["accepted"], int) for x in mine
        )
        if mine and counted:
            row["Overall"] = 1.0 + sum(int(x["accepted"]) for x in mine) / sum(int(x["steps"]) for x in mine)
        else:
            vals = [x["al"] for x in mine if x["al"] is not None]
            row["Overall"] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    schema: dict[str, Any] = {
        "Model": pl.String,
        **dict.fromkeys(categories, pl.Float64),
        "Overall": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def al_matrix_csv(frame: pl.DataFrame, digits: int = 2) -> str:
    """The matrix as CSV text (values with ``digits`` decimals, empty for a category not run)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([spreadsheet_safe(c) for c in frame.columns])
    for row in frame.iter_rows():
        writer.writerow(
            [spreadsheet_safe(str(row[0])), *["" if v is None else f"{v:.{digits}f}" for v in row[1:]]]
        )
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# InferenceX benchmark rows


def _latency_stats(run: StoredRun, conc: object, duration_s: float | None) -> dict[str, Any] | None:
    if not run.has("requests.parquet") or duration_s is None or duration_s <= 0:
        return None
    records = run.table("requests")
    if "concurrency" not in records.columns or records.height == 0:
        return None
    part = records.filter(pl.col("concurrency") == conc)
    if part.height == 0:
        return None
    stats = summarize(part, duration_s=duration_s, percentiles=LATENCY_PERCENTILES, gpus=GpuLayout())
    return {k: v for k, v in dump_row(stats).items() if k.endswith("_ms")}


def _inferencex_latency(stats: Mapping[str, Any]) -> dict[str, float | None]:
    """InferenceX's conversion: ``x_ms`` -> ``x`` in seconds; ``*tpot*`` also -> ``*intvty*`` = 1000 / ms."""
    out: dict[str, float | None] = {}
    for key, value in stats.items():
        v = finite(value)
        if key.endswith("ms"):
            out[key.replace("_ms", "")] = None if v is None else v / 1000.0
        if "tpot" in key:
            out[key.replace("_ms", "").replace("tpot", "intvty")] = (
                None if v is None or v <= 0 else 1000.0 / v
            )
    return out


def inferencex_rows(run: StoredRun) -> list[dict[str, Any]]:
    """One InferenceX-layout row per concurrency point of an M2 run (empty for other flows)."""
    if run.manifest.flow != "m2":
        return []
    config = run.manifest.config
    host = run.manifest.provenance.host
    par = get_path(config, "server", "parallelism") or {}
    gpus = (host.gpus if host is not None else None) or []
    simulated = run.manifest.simulated
    hw = str(gpus[0].get("name")) if gpus else ("simulated" if simulated else None)
    model = model_id(run)
    img, _ = image(run)
    tp, ep = par.get("tp"), par.get("ep")
    rows = []
    synthetic_scheme = scheme(run)
    for p in sorted(m2_points(run), key=lambda x: x.concurrency):
        total = finite(p.value(TOTAL_PER_GPU))
        output = finite(p.value(OUTPUT_PER_GPU))
        row: dict[str, Any] = {
            "hw": hw,
            "conc": p.concurrency,
            "image": img,
            "model": model,
            "infmax_model_prefix": None if model is None else model.rsplit("/", 1)[-1].lower(),
            "framework": p.framework if p.framework != "?" else framework(run),
            "precision": config.get("precision"),
            "spec_decoding": str(config.get("method") or "none"),
            "disagg": False,
            "isl": get_path(config, "workload", "isl"),
            "osl": get_path(config, "workload", "osl"),
            "is_multinode": False,
            "tp": tp,
            "ep": ep,
            "dp_attention": "false",
            "tput_per_gpu": total,
            "output_tput_per_gpu": output,
            "input_tput_per_gpu": None if total is None or output is None else total - output,
        }
        stats = _latency_stats(run, p.concurrency, finite(p.duration_s))
        if stats is not None and p.itl_note is not None:
            # the run judged these gaps with its client's load as well (loop lag), which the stored records
            # alone cannot: its verdict holds, so ITL figures it withheld are not re-derived here
            stats = {k: (None if "itl" in k and k != "mean_itl_ms" else v) for k, v in stats.items()}
        if stats is None:
            stats = {m.name: p.value(m) for m in POINT_METRICS if m.unit == "ms"}
        row.update(_inferencex_latency(stats))
        row.update(
            {
                "num_speculative_tokens": p.k,
                "synthetic_scheme": synthetic_scheme,
                "target_al": finite(p.target_al),
                "achieved_al": finite(p.achieved_al),
                "audit_valid": p.valid,
                "simulated": simulated,
                "alflow_run_id": run.manifest.run_id,
                "repeat": p.repeat,
                "al_source": p.al_source,
                "fit_p_value": finite(p.fit_p_value),
                "histogram_observed": None if p.histogram_observed is None else list(p.histogram_observed),
                "histogram_expected": None if p.histogram_expected is None else list(p.histogram_expected),
            }
        )
        rows.append(row)
    return rows


def rows_json(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a JSON list (non-finite numbers become null with a ``<field>_note``: alflow.util.jsonutil)."""
    return jsonutil.dumps(list(rows)) + "\n"


def rows_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV: columns in first-seen order, empty cells for missing values."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([spreadsheet_safe(c) for c in columns])
    for r in rows:
        writer.writerow(["" if r.get(c) is None else _cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _cell(value: object) -> str:
    if isinstance(value, list | tuple):  # a histogram: one cell, the counts joined by ";"
        return ";".join("" if v is None else _cell(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6)) if math.isfinite(value) else ""
    return spreadsheet_safe(value) if isinstance(value, str) else str(value)
