"""The shape test end to end: its false-alarm bound, the M2 point's fields, their storage, charts and exports.

``test_shape_audit.py`` covers the audit's rejection of a wrong scheme and the reports' sections; this file covers
the threshold (a property test over schemes, K and targets), :func:`alflow.methods.points.m2_point` filling the point, the
round trip through ``spec_stats.parquet`` and ``summary.json`` (older runs too), the grouped bar chart, the flow's
Markdown summary and the JSON/CSV export rows.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alflow.acceptance import stats
from alflow.acceptance import synthetic as syn
from alflow.gates import AUDIT_MIN_FIT_P, AuditDetails, Verdict, audit_synthetic, shown_counts
from alflow.measure import Measurement
from alflow.methods.points import al_source, m2_point
from alflow.metrics.client import ClientSummary, LatencyStats
from alflow.reports import svg
from alflow.reports.content import build_report
from alflow.reports.exports import inferencex_rows, rows_csv, rows_json
from alflow.reports.render import render
from alflow.results.rows import M2Point
from alflow.results.store import RunWriter, open_run
from alflow.results.view import m2_points
from tests.markdown_check import assert_inert, md_text
from tests.unit.report_runs import write_m2

pytestmark = pytest.mark.unit

PER_REQUEST_SCHEMES = tuple(
    name for name in syn.UNBIASED_SCHEMES if syn.SCHEMES[name].granularity == "per-request"
)
EXAMPLES = 200
"""Examples of the property test. Under the scheme a point fails the shape test with probability at most 5.4e-6
at AUDIT_MIN_FIT_P = 1e-8 (the worst case of the chi-square's small-cell tail, see alflow.gates.AUDIT_MIN_FIT_P),
so 200 examples hold a false failure with probability at most 200 x 5.4e-6 = 1.1e-3; hypothesis runs them
derandomized, so the examples (and the outcome) are the same on every run: the test cannot flake."""


def _steps(scheme: str, k: int, al: float, n: int, seed: int) -> stats.SpecStats:
    sampler = syn.sampler(scheme, k, al=al, seed=seed)
    return stats.from_steps([sampler.draw_step(1)[0] for _ in range(n)], k)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(
    scheme=st.sampled_from(PER_REQUEST_SCHEMES),
    k=st.integers(min_value=1, max_value=7),
    frac=st.floats(min_value=0.0, max_value=1.0),
    n=st.integers(min_value=50, max_value=3000),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_steps_drawn_by_the_scheme_itself_pass_the_shape_test(
    scheme: str, k: int, frac: float, n: int, seed: int
) -> None:
    al = 1.0 + frac * k
    expected = syn.distribution(scheme, k, al=al)
    verdict = audit_synthetic(_steps(scheme, k, al, n, seed), expected, subject="property")
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.fit_p_value is not None
    assert verdict.details.fit_p_value >= AUDIT_MIN_FIT_P, verdict.message
    assert "does not fit" not in verdict.message
    observed = verdict.details.histogram_observed
    assert observed is not None
    assert sum(observed) == n
    assert verdict.details.histogram_expected == pytest.approx([p * n for p in expected.pmf])


def test_the_threshold_is_the_audits_default_and_a_stricter_one_is_honoured() -> None:
    expected = syn.distribution("vllm", 3, al=2.3)
    right = _steps("vllm", 3, 2.3, 800, seed=11)
    verdict = audit_synthetic(right, expected, subject="right")
    assert verdict.passed
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.fit_p_value is not None
    assert f"shape test p={verdict.details.fit_p_value:.3g}" in verdict.message
    strict = audit_synthetic(right, expected, subject="strict", min_fit_p=1.0)  # every p is below 1
    assert not strict.passed
    assert "< 1;" in strict.message


def test_a_length_the_scheme_cannot_give_is_named_in_the_message() -> None:
    pmf = syn.distribution("vllm", 3, al=2.3).pmf
    text = shown_counts({2: 70, 3: 28, 5: 2}, pmf)
    assert text == "1: 0 vs 0.0, 2: 70 vs 70.0, 3: 28 vs 30.0, 4: 0 vs 0.0, 5: 2 vs 0.0"


def test_a_per_batch_scheme_keeps_the_counts_but_is_not_tested() -> None:
    expected = syn.distribution("sglang-multinomial", 3, al=2.3)
    verdict = audit_synthetic(_steps("vllm", 3, 2.3, 500, seed=2), expected, subject="batch")
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.fit_p_value is None
    assert verdict.details.histogram_observed is not None
    assert "does not fit" not in verdict.message


# --------------------------------------------------------------------------------------------
# m2_point


def _measurement(spec: stats.SpecStats | None) -> Measurement:
    none = LatencyStats(None, None, None, ((99.0, None),))
    client = ClientSummary(
        duration=2.0, completed=8, failed=0, total_input_tokens=800, total_output_tokens=1024,
        request_throughput=4.0, output_throughput=512.0, total_token_throughput=912.0, ttft=none, tpot=none,
        itl=none, e2el=none, interactivity=none, total_chunks=263, tokens_per_chunk=3.9,
        tokens_per_chunk_after_first=4.0, num_nodes=1, num_gpus=1, output_throughput_per_gpu=512.0,
        total_token_throughput_per_gpu=912.0,
    )  # fmt: skip
    return Measurement(
        records=pl.DataFrame({"ok": [True] * 8}),
        client=client,
        spec_stats=spec,
        dialect="vllm",
        duration_s=2.0,
    )


def _m2(m: Measurement, audit: Verdict | None) -> M2Point:
    point, _ = m2_point(
        m, concurrency=4, k=3, framework="vllm", target_al=2.3, nodes=1, audit=audit, metrics_where="http://x"
    )
    return point


def test_m2_point_fills_the_shape_fields_from_the_audit_and_the_statistics() -> None:
    measured = replace(_steps("vllm", 3, 2.3, 600, seed=5), source="per-request", note="exact, from the x")
    verdict = audit_synthetic(measured, syn.distribution("vllm", 3, al=2.3), subject="p")
    assert isinstance(verdict.details, AuditDetails)
    point = _m2(_measurement(measured), verdict)
    assert point.valid
    assert point.scheme == "vllm"
    assert point.al_source == "per-request"
    assert point.fit_p_value == verdict.details.fit_p_value
    assert point.histogram_observed == verdict.details.histogram_observed
    assert point.histogram_expected == verdict.details.histogram_expected
    assert point.histogram_observed is not None
    assert sum(point.histogram_observed) == 600


def test_m2_point_without_stats_or_histogram_leaves_the_shape_fields_empty() -> None:
    point = _m2(_measurement(None), None)
    assert (point.scheme, point.al_source, point.fit_p_value, point.histogram_observed) == (
        None,
        None,
        None,
        None,
    )
    counters = stats.from_counters(1000, 1300, draft_tokens=3000, k=3)
    verdict = audit_synthetic(counters, syn.distribution("vllm", 3, al=2.3), subject="c")
    point = _m2(_measurement(counters), verdict)
    assert point.al_source == "counters"
    assert point.scheme == "vllm"
    assert (point.fit_p_value, point.histogram_observed, point.histogram_expected) == (None, None, None)


def test_al_source_follows_the_statistics_source() -> None:
    base = stats.from_counters(10, 13, k=3)
    assert al_source(base) == "counters"
    assert al_source(replace(base, source="per-request")) == "per-request"
    assert al_source(replace(base, source="steps")) == "steps"
    # window_stats marks its exact statistics by their source; a note alone does not make them exact
    assert (
        al_source(replace(base, note="exact, from the metrics.speculative_decoding of 8 requests"))
        == "counters"
    )


# --------------------------------------------------------------------------------------------
# Storage: spec_stats.parquet and summary.json, older runs


def _row(concurrency: int, **shape: object) -> dict[str, object]:
    return {
        "concurrency": concurrency, "k": 3, "framework": "vllm", "target_al": 2.3, "achieved_al": 2.3,
        "valid": True, "partial": False, "audit": "ok", "num_drafts": 100, "duration_s": 1.0, **shape,
    }  # fmt: skip


SHAPE = {
    "scheme": "vllm",
    "al_source": "per-request",
    "fit_p_value": 0.25,
    "histogram_observed": [0, 68, 32, 0],
    "histogram_expected": [0.0, 70.0, 30.0, 0.0],
}


def _stored(root: Path, rows: list[dict[str, object]], *, table: bool = True) -> list[M2Point]:
    with RunWriter(root, "m2", run_id=f"m2shape{len(rows)}{int(table)}00", config={}, provenance={}) as w:
        if table:
            w.write_table("spec_stats", pl.DataFrame(rows))
        w.write_summary({"flow": "m2", "points": rows})
    return m2_points(open_run(w.dir))


def test_list_columns_round_trip_through_spec_stats_parquet(tmp_path: Path) -> None:
    points = [M2Point.model_validate(_row(4, **SHAPE)), M2Point.model_validate(_row(8))]
    got = _stored(tmp_path, [p.model_dump() for p in points])
    assert got == points
    assert got[0].histogram_observed == (0, 68, 32, 0)
    assert got[0].histogram_expected == (0.0, 70.0, 30.0, 0.0)
    assert got[1].histogram_observed is None


def test_a_run_whose_points_have_no_histogram_at_all_loads(tmp_path: Path) -> None:
    points = [M2Point.model_validate(_row(4)), M2Point.model_validate(_row(8))]  # all-null list columns
    assert _stored(tmp_path, [p.model_dump() for p in points]) == points


def test_older_runs_without_the_columns_load_from_parquet_and_from_the_summary(tmp_path: Path) -> None:
    old = [_row(4), _row(8)]  # written before the shape fields existed: no such keys or columns
    for table in (True, False):
        got = _stored(tmp_path / str(table), old, table=table)
        assert [p.concurrency for p in got] == [4, 8]
        assert all(
            p.fit_p_value is None and p.histogram_observed is None and p.al_source is None for p in got
        )


def test_the_summary_keeps_the_histograms_as_lists(tmp_path: Path) -> None:
    point = M2Point.model_validate(_row(4, **SHAPE))
    assert json.loads(json.dumps(point.model_dump()))["histogram_observed"] == [0, 68, 32, 0]
    assert _stored(tmp_path, [point.model_dump()], table=False) == [point]


# --------------------------------------------------------------------------------------------
# The grouped bar chart, the flow's summary, the exports


def test_the_bar_chart_draws_one_bar_per_value_and_escapes_every_text() -> None:
    chart = svg.BarChart(
        "t <b>",
        "x & y",
        "steps",
        ["1", "<2>"],
        [svg.Bars("expected <i>", [1.0, 2.5], outline=True), svg.Bars("observed", [None, 3.0])],
    )
    out = str(svg.render(chart))
    assert out.count('class="bar"') == 3  # None draws no bar
    assert "t &lt;b&gt;" in out
    assert "x &amp; y" in out
    assert "&lt;2&gt;" in out
    assert "expected &lt;i&gt;" in out
    assert "<b>" not in out
    assert "<i>" not in out
    assert "<title>&lt;2&gt;, observed: 3</title>" in out
    assert 'fill="none"' in out  # the outlined (expected) bars
    empty = str(svg.render(svg.BarChart("e", "x", "y", ["1"], [svg.Bars("s", [None])])))
    assert "no data to plot" in empty
    assert 'class="bar"' not in empty


def test_the_m2_html_report_draws_a_grouped_bar_chart_per_point_with_the_scheme_escaped(
    tmp_path: Path,
) -> None:
    shape = {**SHAPE, "scheme": "<img src=x>", "al_source": "counters"}
    html = render(build_report(open_run(write_m2(tmp_path / "results", shape=shape))), "html")
    assert "verify steps by accept length, expected vs observed (p = 0.25)" in html
    assert "expected (&lt;img src=x&gt; at 2.5000)" in html
    assert "observed (counters)" in html
    assert "<img src=x>" not in html


def test_report_md_shows_the_al_source_and_the_shape_p_of_each_point(tmp_path: Path) -> None:
    from alflow.reports import render_run

    _stored(tmp_path, [_row(4, **SHAPE), _row(8)])
    (run,) = (tmp_path / "m2").iterdir()
    text = render_run(run, "md")
    assert_inert(text)
    rendered = md_text(text)
    assert "concurrency AL source scheme p-value" in rendered
    assert "4 per-request vllm 0.25" in rendered
    assert "8 per-request" not in rendered  # an older point without them is not in the shape table


def test_the_m2_export_rows_carry_the_shape_columns_in_json_and_csv(tmp_path: Path) -> None:
    rows = inferencex_rows(open_run(write_m2(tmp_path / "results", shape=SHAPE)))
    first, second = rows
    assert list(first)[-4:] == ["al_source", "fit_p_value", "histogram_observed", "histogram_expected"]
    assert (first["al_source"], first["fit_p_value"]) == ("per-request", 0.25)
    assert first["histogram_observed"] == [0, 68, 32, 0]
    assert (second["al_source"], second["histogram_observed"]) == (None, None)
    assert json.loads(rows_json(rows))[0]["histogram_expected"] == [0.0, 70.0, 30.0, 0.0]
    table = list(csv.DictReader(io.StringIO(rows_csv(rows))))
    assert table[0]["histogram_observed"] == "0;68;32;0"
    assert table[0]["histogram_expected"] == "0.0;70.0;30.0;0.0"
    assert table[0]["fit_p_value"] == "0.25"
    assert (table[1]["histogram_observed"], table[1]["al_source"]) == ("", "")
