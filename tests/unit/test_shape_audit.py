"""The M2 audit by shape: the pooled accept-length histogram against the scheme's pmf, stored and reported.

Also M0's and M1's per-request acceptance (AL percentiles and the pooled histogram) in their reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from alflow.acceptance import stats
from alflow.acceptance import synthetic as syn
from alflow.gates import AUDIT_MIN_FIT_P, AuditDetails, audit_synthetic
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.measure import request_acceptance, stored_acceptance
from alflow.reports.content import build_report
from alflow.reports.render import render
from alflow.results.rows import M2Point
from alflow.results.store import RunWriter, open_run
from alflow.util.rows import dump_row
from tests.unit.report_runs import write_m0, write_m2

pytestmark = pytest.mark.unit

K = 3
TARGET = 2.3  # min-variance at K = 3: every step accepts 1 or 2 drafts (lengths 2 and 3)


def _draws(scheme: str, n: int, seed: int) -> stats.SpecStats:
    sampler = syn.sampler(scheme, K, al=TARGET, seed=seed)
    return stats.from_steps([sampler.draw_step(1)[0] for _ in range(n)], K)


def test_a_wrong_scheme_with_the_right_mean_fails_naming_p_and_the_counts() -> None:
    expected = syn.distribution("vllm", K, al=TARGET)
    wrong = _draws("sglang-multinomial", 600, seed=3)
    verdict = audit_synthetic(wrong, expected, subject="wrong")
    assert not verdict.passed
    assert "accept-length histogram does not fit scheme vllm (chi-square p=0.00e+00" in verdict.message
    assert "observed vs expected: 1: " in verdict.message
    assert isinstance(verdict.details, AuditDetails)
    observed = verdict.details.histogram_observed
    assert observed is not None
    assert sum(observed) == 600
    assert verdict.details.histogram_expected == pytest.approx((0.0, 0.7 * 600, 0.3 * 600, 0.0))


def test_the_right_scheme_never_fails_the_shape_test_over_200_fixed_seeds() -> None:
    """Under the scheme a point fails with probability at most 5.4e-6 at 1e-8 (gates.AUDIT_MIN_FIT_P): 200 draws hold
    a false alarm with probability at most 1.1e-3, and the seeds are fixed."""
    expected = syn.distribution("vllm", K, al=TARGET)
    worst = 1.0
    for seed in range(200):
        verdict = audit_synthetic(_draws("vllm", 400, seed), expected, subject=f"seed {seed}")
        assert verdict.passed, verdict.message
        assert isinstance(verdict.details, AuditDetails)
        assert verdict.details.fit_p_value is not None
        worst = min(worst, verdict.details.fit_p_value)
    assert worst > AUDIT_MIN_FIT_P
    assert worst < 0.05  # p spreads over [0, 1]: the test has power to look


def test_the_m2_point_keeps_the_shape_and_older_rows_still_load() -> None:
    expected = syn.distribution("vllm", K, al=TARGET)
    measured = _draws("vllm", 500, seed=1)
    verdict = audit_synthetic(measured, expected, subject="p")
    assert isinstance(verdict.details, AuditDetails)
    d = verdict.details
    row = {
        "concurrency": 4, "k": K, "framework": "vllm", "target_al": TARGET, "achieved_al": measured.al,
        "valid": True, "partial": False, "audit": verdict.message, "num_drafts": 500, "duration_s": 1.0,
        "scheme": d.scheme, "al_source": "per-request", "fit_p_value": d.fit_p_value,
        "histogram_observed": list(d.histogram_observed or ()), "histogram_expected": list(d.histogram_expected or ()),
    }  # fmt: skip
    point = M2Point.model_validate(row)
    assert point.histogram_observed == tuple(d.histogram_observed or ())
    stored = point.model_dump()
    assert isinstance(stored["histogram_observed"], list)
    back = pl.DataFrame([stored]).to_dicts()[0]  # spec_stats.parquet's round trip
    assert M2Point.model_validate(back) == point
    assert M2Point.model_validate(json.loads(json.dumps(stored))) == point  # summary.json's
    old = M2Point.model_validate({k: v for k, v in row.items() if k not in ("scheme", "al_source", "fit_p_value")} | {
        "histogram_observed": None, "histogram_expected": None})  # fmt: skip
    assert (old.fit_p_value, old.histogram_observed, old.al_source) == (None, None, None)


def test_the_m2_report_shows_p_counts_and_a_chart_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>|*x*"
    run = write_m2(
        tmp_path / "results",
        shape={
            "scheme": hostile,
            "al_source": "per-request",
            "fit_p_value": 0.4321,
            "histogram_observed": [0, 1742, 758, 0],
            "histogram_expected": [0.0, 1750.0, 750.0, 0.0],
        },
    )
    report = build_report(open_run(run))
    shape = next(s for s in report.sections if s.title.startswith("Accept-length histogram"))
    assert shape.status != "fail"
    row = dict(zip(shape.tables[0].columns, shape.tables[0].rows[0], strict=True))
    assert row["p-value"] == "0.432"
    assert row["AL source"] == "per-request"
    assert row["len 2: obs / exp"] == "1742 / 1750.0"
    assert len(shape.figures) == 1  # the c=8 point has no histogram (an older row): not charted
    html = render(report, "html")
    md = render(report, "md")
    assert "verify steps by accept length, expected vs observed (p = 0.432)" in html
    assert html.count('class="bar"') == 8  # expected and observed at lengths 1..4 (a 0 is a flat bar)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html
    assert "1742 / 1750.0" in md
    assert "<script>" not in md


def test_a_report_without_histograms_says_so(tmp_path: Path) -> None:
    report = build_report(open_run(write_m2(tmp_path / "results")))
    shape = next(s for s in report.sections if s.title.startswith("Accept-length histogram"))
    assert "No point has a histogram" in " ".join(shape.paragraphs)
    assert not shape.tables


def _records(rows: list[tuple[int, int, list[int] | None]]) -> pl.DataFrame:
    recs = []
    for i, (steps, accepted, hist) in enumerate(rows):
        rec = RequestRecord(
            request_id=i, session_id=str(i), spec_verify_ct=steps, spec_accepted_drafts=accepted
        )
        rec.spec_accept_hist = hist
        recs.append(rec)
    recs.append(
        RequestRecord(request_id=99, session_id="w", warmup=True, spec_verify_ct=1, spec_accepted_drafts=3)
    )
    recs.append(
        RequestRecord(request_id=98, session_id="e", error="boom", spec_verify_ct=1, spec_accepted_drafts=0)
    )
    recs.append(RequestRecord(request_id=97, session_id="z", spec_verify_ct=0, spec_accepted_drafts=0))
    return records_frame(recs)


def test_per_request_acceptance_percentiles_and_pooled_histogram() -> None:
    got = request_acceptance(
        _records([(10, 10, [2, 6, 2, 0]), (10, 20, [0, 2, 6, 2]), (10, 30, [0, 0, 0, 10])])
    )
    assert got is not None
    assert got.requests == 3  # warm-up, failed and step-less requests left out
    assert (got.p10_al, got.p50_al, got.p90_al) == pytest.approx((2.2, 3.0, 3.8))
    assert got.mean_al == pytest.approx(3.0)
    assert got.histogram == (2, 8, 8, 12)
    assert stored_acceptance(json.loads(json.dumps(dump_row(got)))) == got
    assert stored_acceptance({"requests": 3}) is None  # not one: an older or damaged file
    assert request_acceptance(records_frame([RequestRecord(request_id=0, session_id="a")])) is None


def test_m1_and_m0_reports_show_per_request_acceptance(tmp_path: Path) -> None:
    root = tmp_path / "results"
    with RunWriter(root, "m1", run_id="m1perreq0001", config={"model": {"id": "m"}}, provenance={}) as w:
        w.write_table("requests", _records([(10, 10, [2, 6, 2, 0]), (10, 30, [0, 0, 0, 10])]))
        w.write_summary({"flow": "m1", "passed": True, "verdicts": []})
    m1 = build_report(open_run(w.dir))
    section = next(s for s in m1.sections if s.title == "Per-request acceptance")
    row = dict(zip(section.tables[0].columns, section.tables[0].rows[0], strict=True))
    assert (row["requests"], row["p50 AL"], row["2 accepted"]) == ("2", "3.0000", "2")
    per_request = request_acceptance(_records([(10, 10, [2, 6, 2, 0])]))
    assert per_request is not None
    points = {"m|ngram|off|3": {"k": 3, "per_request": dump_row(per_request)}, "m|ngram|off|2": {"k": 2}}
    m0 = build_report(open_run(write_m0(root, scrapes={"points": points})))
    section = next(s for s in m0.sections if s.title == "Per-request acceptance")
    assert [r[0] for r in section.tables[0].rows] == ["m|ngram|off|3"]
    assert all(
        s.title != "Per-request acceptance"
        for s in build_report(open_run(write_m0(tmp_path / "r2"))).sections
    )
    with RunWriter(root, "m1", run_id="m1plain00001", config={"model": {"id": "m"}}, provenance={}) as w2:
        w2.write_table("requests", records_frame([RequestRecord(request_id=0, session_id="a")]))
        w2.write_summary({"flow": "m1", "passed": True, "verdicts": []})
    assert all(s.title != "Per-request acceptance" for s in build_report(open_run(w2.dir)).sections)
