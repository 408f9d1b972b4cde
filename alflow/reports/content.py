"""What a report says: the content of one run (or several) as sections of text, tables and charts.

The builders read a stored run only (manifest, summary, parquet tables), so a report renders from
the run directory alone. One builder per flow is registered in :data:`BUILDERS` (``m0``, ``m1``,
``m2``); any other flow gets the generic part (run facts, summary, configuration). Templates turn
a :class:`Report` into HTML or Markdown; they never compute anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl
from markupsafe import Markup

from alflow import jsonutil
from alflow.acceptance.synthetic import distribution
from alflow.errors import AlflowError
from alflow.metrics.client import per_request
from alflow.reports import svg
from alflow.reports.exports import al_matrix
from alflow.results.store import StoredRun
from alflow.results.view import framework, get_path, image, json_or_none, m2_points, model_id, table_or_none

SIMULATED_BANNER: Final = (
    "SIMULATED DATA: every number in this report comes from alflow's simulated serving engine, "
    "not from a real GPU server. Do not publish or compare it as a measurement."
)
AUDIT_Z: Final = 3.29  # the z of alflow.gates.audit_synthetic's default
_LIVE: ContextVar[bool] = ContextVar("alflow_report_live", default=False)


@dataclass(frozen=True)
class Table:
    """A table of already formatted cells; ``numeric`` marks right-aligned columns."""

    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    title: str = ""
    numeric: Sequence[bool] = ()

    def is_numeric(self, i: int) -> bool:
        """True when column ``i`` holds numbers (right-aligned)."""
        return i < len(self.numeric) and self.numeric[i]


@dataclass(frozen=True)
class Figure:
    """A rendered chart with its caption."""

    svg: Markup
    caption: str = ""


@dataclass
class Section:
    """One part of a report: paragraphs, figures, tables and bullet notes."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str | None = None  # "pass" or "fail" colours the section heading


@dataclass
class Report:
    """A whole report: header facts, a verdict line where there is one, sections, configuration."""

    title: str
    simulated: bool
    facts: list[tuple[str, str]]
    sections: list[Section]
    verdict: str | None = None
    verdict_passed: bool | None = None
    config_json: str = ""
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Formatting helpers


def fmt(value: object, digits: int = 2) -> str:
    """A number with ``digits`` decimals; ``-`` for missing or non-finite values; text as is."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "-"
    return str(value)


def _num(value: object) -> float | None:
    return svg.finite(value)


def run_label(run: StoredRun) -> str:
    """A short label for comparisons: flow, framework (and metrics dialect where it differs), image, K, run id."""
    config = run.manifest.get("config") or {}
    fw = framework(run) or "?"
    dialect = get_path(run.manifest.get("provenance"), "server", "dialect")
    if dialect and dialect != fw:
        fw = f"{fw}/{dialect}"
    parts = [str(run.manifest.get("flow", "?")), fw]
    img, _ = image(run)
    if img:
        parts.append(img)
    if config.get("k") is not None:
        parts.append(f"K={config['k']}")
    parts.append(str(run.manifest.get("run_id", ""))[:8])
    return " ".join(parts)


def _facts(run: StoredRun) -> list[tuple[str, str]]:
    m = run.manifest
    prov = m.get("provenance") or {}
    img, digest = image(run)
    command = get_path(prov, "server", "provenance", "command")
    facts = [
        ("Flow", str(m.get("flow"))),
        ("Run id", str(m.get("run_id"))),
        ("Status", _status_text(run)),
        ("Started", str(m.get("started"))),
        ("Finished", str(m.get("finished") or "-")),
        ("Model", model_id(run) or "-"),
        ("Framework", framework(run) or "-"),
        ("Image", img or "-"),
        ("Image digest", digest or "-"),
        ("Code version", str(prov.get("code_version") or "-")),
        ("Host", str(get_path(prov, "host", "host") or "-")),
        (
            "GPUs",
            ", ".join(
                str(g.get("name")) for g in (get_path(prov, "host", "gpus") or []) if isinstance(g, Mapping)
            )
            or "-",
        ),
        ("Prefect flow run", str(prov.get("flow_run_id") or "-")),
        ("Run directory", run.dir),
    ]
    dataset = prov.get("dataset")
    if isinstance(dataset, Mapping):
        facts.append(
            ("Dataset", " / ".join(str(dataset[k]) for k in ("dataset", "category") if dataset.get(k)))
        )
        if dataset.get("dataset_hash"):
            facts.append(("Dataset hash", str(dataset["dataset_hash"])))
    if command:
        facts.append(("Server command", str(command)))
    return facts


def _status_text(run: StoredRun) -> str:
    if _LIVE.get() and run.status == "incomplete":
        return "running (this report was written by the run before it closed)"
    error = run.manifest.get("error")
    return run.status + (f" ({error})" if error else "")


def _base(run: StoredRun, title: str) -> Report:
    simulated = bool(run.manifest.get("simulated"))
    warnings = []
    note = (run.manifest.get("provenance") or {}).get("engine_note")
    if note and not simulated:  # e.g. the tiny CPU engine: real numbers, but not a GPU server's
        warnings.append(str(note))
    if _LIVE.get():
        pass  # the run renders its own report before it closes: "running" is expected
    elif run.status == "incomplete":
        warnings.append(
            "This run is INCOMPLETE: its manifest still says running (the process was killed). "
            "The report shows what it had written."
        )
    elif run.status == "failed":
        warnings.append(f"This run FAILED: {run.manifest.get('error') or 'no error text recorded'}")
    summary = json_or_none(run, "summary") or {}
    if summary.get("partial"):
        why = "; ".join(str(f) for f in summary.get("failures") or []) or "a point stopped mid-way"
        warnings.append(f"PARTIAL results (what was measured before the failure is kept): {why}")
    return Report(
        title=title,
        simulated=simulated,
        facts=_facts(run),
        sections=[],
        config_json=jsonutil.dumps(run.manifest.get("config") or {}),
        warnings=warnings,
    )


# --------------------------------------------------------------------------------------------
# M0: calibration


def _entry_label(e: Mapping[str, Any], *, with_k: bool = True) -> str:
    text = f"{e.get('model')} thinking={e.get('thinking')}"
    return text + (f" K={e.get('k')}" if with_k else "")


def _entry_category(run: StoredRun, e: Mapping[str, Any]) -> str:
    cat = e.get("category") or get_path(run.manifest.get("config"), "workload", "category")
    return str(cat or "all")


def build_m0(run: StoredRun) -> Report:
    """M0: AL by K per thinking mode, per-position curves, category matrix, diff to the previous table."""
    report = _base(run, "M0 calibration: reference acceptance length")
    summary = json_or_none(run, "summary") or {}
    entries = [e for e in summary.get("entries") or [] if isinstance(e, Mapping)]
    if not entries:
        report.sections.append(Section("Results", paragraphs=["The run stored no calibration entries."]))
        return report
    if summary.get("reference_path"):
        report.facts.append(("Reference table", str(summary["reference_path"])))
    # AL by K, one curve per (model, method, thinking)
    categories = sorted({_entry_category(run, e) for e in entries})
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        name = f"{e.get('model')} {e.get('method')} thinking={e.get('thinking')}"
        if len(categories) > 1:  # one curve per category, never a curve across categories
            name += f" {_entry_category(run, e)}"
        curves.setdefault(name, []).append(e)
    series = []
    for name, unsorted in curves.items():
        rows = sorted(unsorted, key=lambda r: int(r.get("k") or 0))
        series.append(
            svg.Series(
                name,
                [(r.get("k"), r.get("al")) for r in rows],
                errors=[
                    (r.get("ci_low"), r.get("ci_high")) if r.get("ci_low") is not None else None for r in rows
                ],
                dashed="thinking=off" in name,
            )
        )
    ks = sorted({int(e["k"]) for e in entries if e.get("k") is not None})
    chart = svg.Chart(
        "Acceptance length by K (thinking on / off)",
        "K (speculative tokens)",
        "acceptance length (tokens per step)",
        series,
        x_ticks=ks,
    )
    sec = Section(
        "Acceptance length by K",
        paragraphs=[
            "AL = 1 + accepted drafts / verify steps over the measured window; error bars are the "
            "confidence interval where the counters allow one. Solid: thinking on; dashed: thinking off."
        ],
        figures=[svg_figure(chart)],
    )
    sec.tables.append(
        Table(
            ["model", "method", "thinking", "K", "AL", "CI low", "CI high", "steps", "accepted", "p_1..p_K"],
            [
                [
                    str(e.get("model")),
                    str(e.get("method")),
                    str(e.get("thinking")),
                    fmt(e.get("k")),
                    fmt(e.get("al"), 4),
                    fmt(e.get("ci_low"), 4),
                    fmt(e.get("ci_high"), 4),
                    fmt(e.get("num_drafts")),
                    fmt(e.get("accepted_tokens")),
                    ", ".join(fmt(p, 3) for p in e.get("per_position_rates") or []) or "-",
                ]
                for e in sorted(
                    entries, key=lambda r: (str(r.get("model")), str(r.get("thinking")), r.get("k") or 0)
                )
            ],
            numeric=[False, False, False, True, True, True, True, True, True, False],
        )
    )
    report.sections.append(sec)
    # per-position acceptance curves, one chart per (model, thinking)
    pos = Section(
        "Per-position acceptance",
        paragraphs=[
            "p_i is the probability that the first i drafts are all accepted (non-increasing in i); "
            "one curve per K."
        ],
    )
    for name, rows in curves.items():
        pos_series = [
            svg.Series(
                f"K={r.get('k')}",
                [(i, p) for i, p in enumerate(r.get("per_position_rates") or [], start=1)],
            )
            for r in sorted(rows, key=lambda r: int(r.get("k") or 0))
            if r.get("per_position_rates")
        ]
        if pos_series:
            max_k = max(len(s.points) for s in pos_series)
            pos.figures.append(
                svg_figure(
                    svg.Chart(
                        f"Per-position acceptance: {name}",
                        "draft position i",
                        "p_i (first i drafts accepted)",
                        pos_series,
                        x_ticks=list(range(1, max_k + 1)),
                        y_zero=True,
                    )
                )
            )
    if not pos.figures:
        pos.paragraphs.append("No per-position counters were recorded.")
    report.sections.append(pos)
    # category matrix
    cat_sec = Section("Acceptance length by category")
    if len(categories) > 1:
        matrix: dict[str, dict[str, float | None]] = {}
        for e in entries:
            matrix.setdefault(_entry_label(e), {})[_entry_category(run, e)] = _num(e.get("al"))
        cat_sec.tables.append(
            Table(
                ["model", *categories],
                [[label, *[fmt(vals.get(c), 2) for c in categories]] for label, vals in matrix.items()],
                numeric=[False, *[True] * len(categories)],
            )
        )
    else:
        cat_sec.paragraphs.append(
            f"One category ran ({categories[0]}); the category matrix needs several (see "
            "`alflow report compare --format csv` across runs)."
        )
    report.sections.append(cat_sec)
    # diff against the previous reference
    diff = summary.get("diff")
    diff_sec = Section("Diff against the previous reference table")
    if not isinstance(diff, Mapping):
        diff_sec.paragraphs.append("There was no previous reference table: every point is new.")
    else:
        rows_d = [r for r in diff.get("rows") or [] if isinstance(r, Mapping)]
        changed = [r for r in rows_d if r.get("status") != "unchanged"]
        diff_sec.paragraphs.append(
            f"{len(changed)} of {len(rows_d)} point(s) added, removed or changed."
            + (
                " Table-level changes: " + "; ".join(map(str, diff["table_changes"]))
                if diff.get("table_changes")
                else ""
            )
        )
        diff_sec.tables.append(
            Table(
                [
                    "model",
                    "method",
                    "thinking",
                    "K",
                    "status",
                    "old AL",
                    "new AL",
                    "delta",
                    "relative",
                    "provenance changes",
                ],
                [
                    [
                        str(r.get("model")),
                        str(r.get("method")),
                        str(r.get("thinking")),
                        fmt(r.get("k")),
                        str(r.get("status")),
                        fmt(r.get("old_al"), 4),
                        fmt(r.get("new_al"), 4),
                        fmt(r.get("delta"), 4),
                        "-" if _num(r.get("rel_delta")) is None else f"{100 * float(r['rel_delta']):+.2f}%",
                        "; ".join(map(str, r.get("provenance_changes") or [])) or "-",
                    ]
                    for r in rows_d
                ],
                numeric=[False, False, False, True, False, True, True, True, True, False],
            )
        )
    if summary.get("cached_points"):
        diff_sec.notes.append(
            "Reused from cache (not measured again): " + ", ".join(map(str, summary["cached_points"]))
        )
    report.sections.append(diff_sec)
    return report


def svg_figure(chart: svg.Chart, caption: str = "") -> Figure:
    """Render a chart into a figure."""
    return Figure(svg.render(chart), caption)


# --------------------------------------------------------------------------------------------
# M1: evaluation gate


def build_m1(run: StoredRun) -> Report:
    """M1: the verdict, AL with its CI against the threshold, GSM8K scores against theirs."""
    report = _base(run, "M1 evaluation gate")
    summary = json_or_none(run, "summary") or {}
    verdicts = [v for v in summary.get("verdicts") or [] if isinstance(v, Mapping)]
    if "passed" in summary:
        passed = bool(summary["passed"])
        report.verdict_passed = passed
        report.verdict = (
            f"{'PASSED' if passed else 'FAILED'}: {summary.get('subject') or model_id(run) or ''}"
        )
    elif run.status != "complete":
        report.verdict = "NO VERDICT: the run stopped before both gates were judged"
        report.verdict_passed = False
    for v in verdicts:
        if v.get("gate") == "al":
            report.sections.append(_al_gate_section(v, table_or_none(run, "spec_stats")))
        elif v.get("gate") == "gsm8k-accuracy":
            report.sections.append(_gsm8k_section(v, summary.get("gsm8k")))
        else:
            report.sections.append(
                Section(
                    str(v.get("gate")),
                    paragraphs=[str(v.get("message"))],
                    status="pass" if v.get("passed") else "fail",
                )
            )
    if not verdicts:
        report.sections.append(Section("Gates", paragraphs=["The run stored no verdicts."]))
    client = summary.get("client")
    if isinstance(client, Mapping):
        report.sections.append(_client_section(client))
    return report


def _al_gate_section(v: Mapping[str, Any], stats: pl.DataFrame | None) -> Section:
    passed = bool(v.get("passed"))
    ci = v.get("ci") if isinstance(v.get("ci"), Mapping) else {}
    assert isinstance(ci, Mapping)
    sec = Section(
        "AL gate (SPEED-Bench, synthetic acceptance off)",
        paragraphs=[str(v.get("message"))],
        status="pass" if passed else "fail",
    )
    level = _num(ci.get("level"))
    sec.tables.append(
        Table(
            [
                "AL",
                "CI low",
                "CI high",
                "CI level",
                "CI method",
                "compared",
                "threshold",
                "reference AL",
                "rule",
                "result",
            ],
            [
                [
                    fmt(v.get("al"), 4),
                    fmt(ci.get("low"), 4),
                    fmt(ci.get("high"), 4),
                    "-" if level is None else f"{level:.0%}",
                    str(ci.get("method") or "-"),
                    fmt(v.get("compared"), 4),
                    fmt(v.get("threshold"), 4),
                    fmt(v.get("reference_al"), 4),
                    str(v.get("rule") or "-"),
                    "pass" if passed else "FAIL",
                ]
            ],
            numeric=[True, True, True, True, False, True, True, True, False, False],
        )
    )
    al, lo, hi = _num(v.get("al")), _num(ci.get("low")), _num(ci.get("high"))
    hlines = [
        svg.HLine(float(v["threshold"]), "threshold", "#d62728")
        if _num(v.get("threshold")) is not None
        else None,
        svg.HLine(float(v["reference_al"]), "reference", "#555555")
        if _num(v.get("reference_al")) is not None
        else None,
    ]
    if al is not None:
        sec.figures.append(
            svg_figure(
                svg.Chart(
                    "Achieved AL with its confidence interval against the threshold",
                    "",
                    "acceptance length",
                    [
                        svg.Series(
                            "achieved AL (CI)", [(1, al)], errors=[(lo, hi) if lo is not None else None]
                        )
                    ],
                    hlines=[h for h in hlines if h is not None],
                    x_ticks=[1],
                    width=420,
                    height=300,
                )
            )
        )
    if stats is not None and stats.height and "per_position_rates" in stats.columns:
        row = stats.row(0, named=True)
        rates = row.get("per_position_rates") or []
        if rates:
            sec.figures.append(
                svg_figure(
                    svg.Chart(
                        "Per-position acceptance (measured)",
                        "draft position i",
                        "p_i",
                        [svg.Series(f"K={row.get('k')}", [(i, p) for i, p in enumerate(rates, start=1)])],
                        x_ticks=list(range(1, len(rates) + 1)),
                        y_zero=True,
                        width=420,
                        height=300,
                    )
                )
            )
        counts = [
            f"{fmt(row.get('num_drafts'))} verify steps",
            f"{fmt(row.get('accepted_tokens'))} accepted draft tokens",
        ]
        if row.get("draft_tokens") is not None:
            counts.append(f"{fmt(row.get('draft_tokens'))} drafted")
        if _num(row.get("acceptance_rate")) is not None:
            counts.append(f"draft acceptance rate {fmt(row.get('acceptance_rate'), 4)}")
        sec.notes.append(", ".join(counts) + ".")
    return sec


def _gsm8k_section(v: Mapping[str, Any], gsm8k: object) -> Section:
    passed = bool(v.get("passed"))
    sec = Section(
        "GSM8K accuracy gate", paragraphs=[str(v.get("message"))], status="pass" if passed else "fail"
    )
    threshold = _num(v.get("threshold"))
    scores = get_path(gsm8k if isinstance(gsm8k, Mapping) else None, "scores")
    rows = []
    if isinstance(scores, Mapping):
        for name, s in scores.items():
            if not isinstance(s, Mapping):
                continue
            acc = _num(s.get("accuracy"))
            rows.append(
                [
                    str(name),
                    fmt(acc, 4),
                    f"{fmt(s.get('correct'))}/{fmt(s.get('total'))}",
                    fmt(s.get("ci_low"), 4),
                    fmt(s.get("ci_high"), 4),
                    fmt(threshold, 4),
                    "-" if acc is None or threshold is None else ("pass" if acc >= threshold else "FAIL"),
                ]
            )
    elif isinstance(v.get("scores"), Mapping):
        for name, acc in v["scores"].items():
            a = _num(acc)
            rows.append(
                [
                    str(name),
                    fmt(a, 4),
                    "-",
                    "-",
                    "-",
                    fmt(threshold, 4),
                    "-" if a is None or threshold is None else ("pass" if a >= threshold else "FAIL"),
                ]
            )
    sec.tables.append(
        Table(
            ["score", "accuracy", "correct", "CI low", "CI high", "threshold", "result"],
            rows,
            numeric=[False, True, True, True, True, True, False],
        )
    )
    if isinstance(gsm8k, Mapping):
        sec.notes.extend(str(n) for n in gsm8k.get("notes") or [])
        if gsm8k.get("failed_requests"):
            sec.notes.append(f"{gsm8k['failed_requests']} request(s) failed.")
    return sec


def _client_section(client: Mapping[str, Any]) -> Section:
    keys = [
        ("completed", "completed requests", 0),
        ("failed", "failed requests", 0),
        ("output_throughput", "output tok/s", 1),
        ("output_throughput_per_gpu", "output tok/s/GPU", 1),
        ("median_ttft_ms", "median TTFT ms", 2),
        ("p99_ttft_ms", "p99 TTFT ms", 2),
        ("median_tpot_ms", "median TPOT ms", 3),
        ("median_interactivity_tokens_per_s", "median interactivity tok/s/user", 1),
        ("tokens_per_chunk", "tokens per chunk", 3),
    ]
    return Section(
        "Client-side metrics (AL run)",
        tables=[
            Table(
                ["metric", "value"],
                [[label, fmt(client.get(k), d)] for k, label, d in keys if k in client],
                numeric=[False, True],
            )
        ],
    )


# --------------------------------------------------------------------------------------------
# M2: synthetic benchmark


_STEPS = re.compile(r"(\d+) steps\)")


def _steps(point: Mapping[str, Any]) -> int | None:
    """Verify steps behind a point's AL: the ``num_drafts`` field, else the audit message's count."""
    n = point.get("num_drafts")
    if isinstance(n, int) and n > 0:
        return n
    match = _STEPS.search(str(point.get("audit") or ""))
    return int(match.group(1)) if match else None


def latency_percentiles(run: StoredRun, percentiles: Sequence[float] = (50, 90, 99)) -> pl.DataFrame | None:
    """Per concurrency: TTFT, TPOT, ITL and E2E latency percentiles from ``requests.parquet``."""
    records = table_or_none(run, "requests")
    if records is None or records.height == 0 or "concurrency" not in records.columns:
        return None
    req = per_request(records).filter(pl.col("ok"))
    if req.height == 0:
        return None
    itl = req.select("concurrency", pl.col("itl_ms").alias("itl")).explode("itl")
    aggs = []
    for p in percentiles:
        q = p / 100.0
        aggs += [
            pl.col("ttft_ms").quantile(q, interpolation="linear").alias(f"p{p:g}_ttft_ms"),
            pl.col("tpot_ms").quantile(q, interpolation="linear").alias(f"p{p:g}_tpot_ms"),
            pl.col("e2el_ms").quantile(q, interpolation="linear").alias(f"p{p:g}_e2el_ms"),
        ]
    main = req.group_by("concurrency").agg(aggs)
    itl_aggs = [
        pl.col("itl").quantile(p / 100.0, interpolation="linear").alias(f"p{p:g}_itl_ms") for p in percentiles
    ]
    itl_frame = itl.group_by("concurrency").agg(itl_aggs)
    return main.join(itl_frame, on="concurrency", how="left").sort("concurrency")


def audit_spread(run: StoredRun, point: Mapping[str, Any]) -> dict[str, float | None]:
    """The audit's expected mean, per-step std and allowed deviation for one M2 point.

    ``allowed = max(abs_tol, z * std / sqrt(n))`` (``z`` = 3.29 as in the audit, ``std`` the
    scheme's per-step standard deviation, ``n`` the verify steps); None where unknown.
    """
    summary = json_or_none(run, "summary") or {}
    config = run.manifest.get("config") or {}
    scheme = (
        point.get("scheme") or summary.get("scheme") or get_path(run.manifest.get("provenance"), "scheme")
    )
    target, k = _num(point.get("target_al")), point.get("k")
    out: dict[str, float | None] = {"expected": None, "std": None, "allowed": None}
    if scheme is None or target is None or not isinstance(k, int):
        return out
    try:
        dist = distribution(str(scheme), k, al=target)
    except AlflowError:
        return out
    out["expected"], out["std"] = dist.mean, dist.std
    n = _steps(point)
    abs_tol = _num(config.get("audit_abs_tol"))
    abs_tol = 0.02 if abs_tol is None else abs_tol
    if n:
        out["allowed"] = max(abs_tol, AUDIT_Z * dist.std / math.sqrt(n))
    return out


def _curve_key(p: Mapping[str, Any]) -> str:
    return f"{p.get('framework')} K={p.get('k')}"


def build_m2(run: StoredRun) -> Report:
    """M2: throughput per GPU vs interactivity, latency percentiles vs concurrency, the synthetic audit."""
    report = _base(run, "M2 synthetic benchmark")
    summary = json_or_none(run, "summary") or {}
    points = m2_points(run)
    config = run.manifest.get("config") or {}
    if summary.get("scheme"):
        report.facts.append(("Synthetic scheme", str(summary["scheme"])))
    if summary.get("target_al") is not None:
        report.facts.append(("Target AL", fmt(summary.get("target_al"), 4)))
    workload = config.get("workload") if isinstance(config.get("workload"), Mapping) else {}
    assert isinstance(workload, Mapping)
    if workload.get("isl") is not None:
        report.facts.append(("ISL / OSL", f"{workload.get('isl')} / {workload.get('osl')}"))
    if not points:
        report.sections.append(Section("Results", paragraphs=["The run stored no benchmark points."]))
        return report
    failures = [str(f) for f in summary.get("failures") or []]
    invalid = [p for p in points if not p.get("valid")]
    if summary or run.complete:
        ok = not failures and not invalid
        report.verdict_passed = ok
        report.verdict = (
            f"All {len(points)} point(s) valid: achieved AL matches the synthetic target"
            if ok
            else f"{len(invalid)} of {len(points)} point(s) INVALID: do not publish them"
        )
    # throughput vs interactivity
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        curves.setdefault(_curve_key(p), []).append(p)
    tput = [
        svg.Series(
            name,
            [
                (p.get("median_interactivity_tokens_per_s"), p.get("output_throughput_per_gpu"))
                for p in sorted(rows, key=lambda r: r.get("concurrency") or 0)
            ],
            labels=[
                f"c={p.get('concurrency')}" for p in sorted(rows, key=lambda r: r.get("concurrency") or 0)
            ],
        )
        for name, rows in curves.items()
    ]
    sec = Section(
        "Throughput per GPU against interactivity",
        paragraphs=[
            "Each point is one concurrency (c=N). Interactivity = 1000 / median TPOT (tokens/s seen by "
            "one user); throughput = output tokens / benchmark duration / GPUs."
        ],
        figures=[
            svg_figure(
                svg.Chart(
                    "Output throughput per GPU vs interactivity",
                    "interactivity (tok/s/user, median)",
                    "output throughput (tok/s/GPU)",
                    tput,
                    y_zero=True,
                )
            )
        ],
    )
    sec.tables.append(
        Table(
            [
                "concurrency",
                "framework",
                "K",
                "output tok/s/GPU",
                "total tok/s/GPU",
                "interactivity",
                "median TPOT ms",
                "median TTFT ms",
                "p99 TTFT ms",
                "completed",
                "failed",
            ],
            [
                [
                    fmt(p.get("concurrency")),
                    str(p.get("framework")),
                    fmt(p.get("k")),
                    fmt(p.get("output_throughput_per_gpu"), 1),
                    fmt(p.get("total_token_throughput_per_gpu"), 1),
                    fmt(p.get("median_interactivity_tokens_per_s"), 1),
                    fmt(p.get("median_tpot_ms"), 2),
                    fmt(p.get("median_ttft_ms"), 1),
                    fmt(p.get("p99_ttft_ms"), 1),
                    fmt(p.get("completed")),
                    fmt(p.get("failed")),
                ]
                for p in points
            ],
            numeric=[True, False, True, True, True, True, True, True, True, True, True],
        )
    )
    report.sections.append(sec)
    report.sections.append(_latency_section(run, points))
    report.sections.append(_audit_section(run, points, summary))
    if failures:
        report.sections.append(Section("Failures", notes=failures, status="fail"))
    return report


def _latency_section(run: StoredRun, points: Sequence[Mapping[str, Any]]) -> Section:
    sec = Section("Latency percentiles against concurrency")
    lat = latency_percentiles(run)
    concs = sorted({int(p["concurrency"]) for p in points if isinstance(p.get("concurrency"), int)})
    if lat is None:
        sec.paragraphs.append("No request records: median and p99 TTFT from the stored points.")
        ttft = [
            svg.Series("median TTFT", [(p.get("concurrency"), p.get("median_ttft_ms")) for p in points]),
            svg.Series(
                "p99 TTFT", [(p.get("concurrency"), p.get("p99_ttft_ms")) for p in points], dashed=True
            ),
        ]
        sec.figures.append(
            svg_figure(
                svg.Chart(
                    "TTFT vs concurrency",
                    "concurrency",
                    "TTFT (ms)",
                    ttft,
                    log_x=True,
                    x_ticks=concs,
                    y_zero=True,
                )
            )
        )
        return sec
    sec.paragraphs.append(
        "From the request records (measured phase, successful requests): p50, p90 and p99 per concurrency."
    )
    rows = lat.to_dicts()
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")):
        series = [
            svg.Series(
                f"p{p} {label}",
                [(r["concurrency"], r.get(f"p{p}_{metric}_ms")) for r in rows],
                dashed=p == 99,
            )
            for p in (50, 90, 99)
        ]
        sec.figures.append(
            svg_figure(
                svg.Chart(
                    f"{label} percentiles vs concurrency",
                    "concurrency",
                    f"{label} (ms)",
                    series,
                    log_x=True,
                    x_ticks=concs,
                    y_zero=True,
                    width=520,
                    height=340,
                )
            )
        )
    cols = [c for c in lat.columns if c != "concurrency"]
    sec.tables.append(
        Table(
            ["concurrency", *[c.replace("_ms", " ms").replace("_", " ") for c in cols]],
            [[fmt(r["concurrency"]), *[fmt(r.get(c), 2) for c in cols]] for r in rows],
            numeric=[True] * (len(cols) + 1),
        )
    )
    return sec


def _audit_section(
    run: StoredRun, points: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]
) -> Section:
    sec = Section(
        "Synthetic-acceptance audit", status="pass" if all(p.get("valid") for p in points) else "fail"
    )
    scheme = summary.get("scheme")
    sec.paragraphs.append(
        "The achieved AL (from the server's counters) must match what the scheme realises for the target, "
        f"within max(abs_tol, {AUDIT_Z} x per-step std / sqrt(verify steps)). Error bars: that allowed spread "
        f"around the scheme's expected AL{f' (scheme {scheme})' if scheme else ''}."
    )
    spreads = [audit_spread(run, p) for p in points]
    achieved, expected = [], []
    for p, s in zip(points, spreads, strict=True):
        achieved.append((p.get("concurrency"), p.get("achieved_al")))
        expected.append((p.get("concurrency"), s["expected"]))
    errs = [
        (s["expected"] - s["allowed"], s["expected"] + s["allowed"])
        if s["expected"] is not None and s["allowed"] is not None
        else None
        for s in spreads
    ]
    targets = {_num(p.get("target_al")) for p in points} - {None}
    hlines = [
        svg.HLine(t, f"target AL {t:.4f}", "#555555") for t in sorted(x for x in targets if x is not None)
    ]
    concs = sorted({int(p["concurrency"]) for p in points if isinstance(p.get("concurrency"), int)})
    sec.figures.append(
        svg_figure(
            svg.Chart(
                "Target vs achieved AL per point",
                "concurrency",
                "acceptance length",
                [
                    svg.Series(
                        "expected AL +/- allowed spread", expected, errors=errs, line=False, color="#7f7f7f"
                    ),
                    svg.Series("achieved AL", achieved, color="#1f77b4"),
                ],
                hlines=hlines,
                log_x=True,
                x_ticks=concs,
            )
        )
    )
    sec.tables.append(
        Table(
            [
                "concurrency",
                "K",
                "target AL",
                "expected AL",
                "per-step std",
                "steps",
                "achieved AL",
                "deviation",
                "allowed",
                "valid",
                "audit",
            ],
            [
                [
                    fmt(p.get("concurrency")),
                    fmt(p.get("k")),
                    fmt(p.get("target_al"), 4),
                    fmt(s["expected"], 4),
                    fmt(s["std"], 4),
                    fmt(_steps(p)),
                    fmt(p.get("achieved_al"), 4),
                    "-"
                    if _num(p.get("achieved_al")) is None or s["expected"] is None
                    else f"{float(p['achieved_al']) - s['expected']:+.4f}",
                    fmt(s["allowed"], 4),
                    "yes" if p.get("valid") else "NO",
                    str(p.get("audit") or ""),
                ]
                for p, s in zip(points, spreads, strict=True)
            ],
            numeric=[True, True, True, True, True, True, True, True, True, False, False],
        )
    )
    return sec


# --------------------------------------------------------------------------------------------
# Registry and comparison


BUILDERS: Final[dict[str, Callable[[StoredRun], Report]]] = {"m0": build_m0, "m1": build_m1, "m2": build_m2}


def build_generic(run: StoredRun) -> Report:
    """Any other flow: run facts and the summary as JSON."""
    report = _base(run, f"{run.manifest.get('flow')} run")
    summary = json_or_none(run, "summary")
    if summary is not None:
        report.sections.append(Section("Summary", paragraphs=[jsonutil.dumps(summary)]))
    return report


def build_report(run: StoredRun, *, live: bool = False) -> Report:
    """The report of one stored run (the builder registered for its flow).

    ``live``: the run is rendering its own report before it closes, so a manifest that still says
    ``running`` is expected and not reported as an interrupted run.
    """
    token = _LIVE.set(live)
    try:
        return BUILDERS.get(str(run.manifest.get("flow")), build_generic)(run)
    finally:
        _LIVE.reset(token)


def build_comparison(runs: Sequence[StoredRun]) -> Report:
    """Several runs side by side: who ran what, then the flow-specific comparison."""
    if not runs:
        raise AlflowError("give at least one run directory to compare")
    simulated = any(bool(r.manifest.get("simulated")) for r in runs)
    report = Report(
        title=f"Comparison of {len(runs)} runs",
        simulated=simulated,
        facts=[("Runs", str(len(runs)))],
        sections=[],
    )
    report.sections.append(
        Section(
            "Runs",
            tables=[
                Table(
                    ["run", "flow", "status", "simulated", "model", "framework", "image", "K", "directory"],
                    [
                        [
                            run_label(r),
                            str(r.manifest.get("flow")),
                            r.status,
                            "yes" if r.manifest.get("simulated") else "no",
                            model_id(r) or "-",
                            framework(r) or "-",
                            image(r)[0] or "-",
                            fmt(get_path(r.manifest.get("config"), "k")),
                            r.dir,
                        ]
                        for r in runs
                    ],
                )
            ],
        )
    )
    for r in runs:
        if r.status != "complete":
            report.warnings.append(f"{run_label(r)} is {r.status}: its numbers are partial or failed.")
    m2 = [r for r in runs if r.manifest.get("flow") == "m2"]
    if m2:
        report.sections.append(_compare_m2(m2))
    m1 = [r for r in runs if r.manifest.get("flow") == "m1"]
    if m1:
        report.sections.append(_compare_m1(m1))
    al_runs = [r for r in runs if r.manifest.get("flow") in ("m0", "m1")]
    if al_runs:
        frame = al_matrix(al_runs)
        if frame.height:
            report.sections.append(
                Section(
                    "Acceptance-length matrix",
                    paragraphs=[
                        "Rows: model, framework, method, K and thinking mode; columns: dataset categories."
                    ],
                    tables=[
                        Table(
                            frame.columns,
                            [
                                [str(v) if isinstance(v, str) else fmt(v, 4) for v in row]
                                for row in frame.iter_rows()
                            ],
                            numeric=[False, *[True] * (frame.width - 1)],
                        )
                    ],
                )
            )
    return report


def _compare_m2(runs: Sequence[StoredRun]) -> Section:
    series = []
    rows: list[list[str]] = []
    for r in runs:
        pts = sorted(m2_points(r), key=lambda p: p.get("concurrency") or 0)
        label = run_label(r)
        series.append(
            svg.Series(
                label,
                [
                    (p.get("median_interactivity_tokens_per_s"), p.get("output_throughput_per_gpu"))
                    for p in pts
                ],
                labels=[f"c={p.get('concurrency')}" for p in pts],
            )
        )
        rows.extend(
            [
                label,
                fmt(p.get("concurrency")),
                fmt(p.get("output_throughput_per_gpu"), 1),
                fmt(p.get("median_interactivity_tokens_per_s"), 1),
                fmt(p.get("median_tpot_ms"), 2),
                fmt(p.get("median_ttft_ms"), 1),
                fmt(p.get("achieved_al"), 4),
                "yes" if p.get("valid") else "NO",
            ]
            for p in pts
        )
    return Section(
        "M2: throughput per GPU against interactivity",
        figures=[
            svg_figure(
                svg.Chart(
                    "Output throughput per GPU vs interactivity",
                    "interactivity (tok/s/user, median)",
                    "output throughput (tok/s/GPU)",
                    series,
                    y_zero=True,
                )
            )
        ],
        tables=[
            Table(
                [
                    "run",
                    "concurrency",
                    "output tok/s/GPU",
                    "interactivity",
                    "median TPOT ms",
                    "median TTFT ms",
                    "achieved AL",
                    "valid",
                ],
                rows,
                numeric=[False, True, True, True, True, True, True, False],
            )
        ],
    )


def _compare_m1(runs: Iterable[StoredRun]) -> Section:
    rows = []
    for r in runs:
        summary = json_or_none(r, "summary") or {}
        by_gate = {str(v.get("gate")): v for v in summary.get("verdicts") or [] if isinstance(v, Mapping)}
        al = by_gate.get("al") or {}
        acc = by_gate.get("gsm8k-accuracy") or {}
        ci = al.get("ci") if isinstance(al.get("ci"), Mapping) else {}
        scores = acc.get("scores") if isinstance(acc.get("scores"), Mapping) else {}
        rows.append(
            [
                run_label(r),
                "-" if "passed" not in summary else ("PASSED" if summary["passed"] else "FAILED"),
                fmt(al.get("al"), 4),
                f"[{fmt(get_path(ci, 'low'), 4)}, {fmt(get_path(ci, 'high'), 4)}]",
                fmt(al.get("threshold"), 4),
                fmt(get_path(scores, "strict-match"), 4),
                fmt(get_path(scores, "flexible-extract"), 4),
                fmt(acc.get("threshold"), 4),
            ]
        )
    return Section(
        "M1: gate verdicts",
        tables=[
            Table(
                [
                    "run",
                    "verdict",
                    "AL",
                    "CI",
                    "AL threshold",
                    "GSM8K strict",
                    "GSM8K flexible",
                    "GSM8K threshold",
                ],
                rows,
                numeric=[False, False, True, False, True, True, True, True],
            )
        ],
    )
