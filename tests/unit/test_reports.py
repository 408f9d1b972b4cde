"""Reports of stored runs: content per flow, escaping, self-containment, banner, exports, CLI."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.acceptance.knobs import DRAWS_NOTE
from alflow.acceptance.synthetic import distribution
from alflow.cli import app
from alflow.frameworks.atom.knobs import FIXED_SEED
from alflow.reports import (
    al_matrix,
    al_matrix_csv,
    build_report,
    inferencex_rows,
    render_comparison,
    render_run,
    svg,
    write_html_report,
)
from alflow.reports.content import SIMULATED_BANNER
from alflow.results.store import RunWriter, open_run
from tests.markdown_check import md_html, md_text
from tests.unit.report_runs import EVIL, write_m0, write_m1, write_m2

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"
EXTERNAL = re.compile(
    r"""(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//""", re.I
)


def _assert_self_contained(html: str) -> None:
    assert EXTERNAL.search(html) is None, EXTERNAL.search(html)
    lowered = html.lower()
    for forbidden in ("<script", "<link", "<iframe", "<img", "<object", "<embed", "@import", "url("):
        assert forbidden not in lowered, forbidden
    assert not re.search(r"\s(?:src|href)\s*=", lowered)


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, str]:
    root = tmp_path / "results"
    return {
        "m0": write_m0(root),
        "m1": write_m1(root, model="org/model-b"),
        "m2": write_m2(root),
    }


# --------------------------------------------------------------------------------------------
# rendering from the store alone


@pytest.mark.parametrize("flow", ["m0", "m1", "m2"])
def test_report_renders_from_a_copied_run_directory_alone(
    runs: dict[str, str], tmp_path: Path, flow: str
) -> None:
    copy = tmp_path / "elsewhere" / "run"
    shutil.copytree(runs[flow], copy)
    shutil.rmtree(Path(runs[flow]).parents[1])  # nothing but the copy is left
    html = render_run(copy)
    md = render_run(str(copy), "md")
    assert html.startswith("<!DOCTYPE html>")
    assert "<svg" in html
    assert str(copy) in html
    assert md.lstrip().startswith(("#", ">"))
    _assert_self_contained(html)


def test_m0_report_has_al_by_k_per_thinking_mode_positions_matrix_and_diff(runs: dict[str, str]) -> None:
    report = build_report(open_run(runs["m0"]))
    titles = [s.title for s in report.sections]
    assert titles == [
        "Acceptance length by K",
        "Per-position acceptance",
        "Acceptance length by category",
        "Diff against the previous reference table",
    ]
    html = render_run(runs["m0"])
    assert "org/model-a mtp thinking=on" in html
    assert "org/model-a mtp thinking=off" in html
    # one curve per thinking mode in the AL-by-K chart
    al_chart = report.sections[0].figures[0].svg
    assert al_chart.count('class="series"') == 2
    assert al_chart.count('class="point"') == 6
    assert len(report.sections[1].figures) == 2
    # an entry the run stored that is not a valid reference entry is named, not dropped silently
    notes = report.sections[0].notes
    assert len(notes) == 1
    assert "1 stored entry is not a valid reference entry and is not shown" in notes[0]
    assert "provenance.model_revision" in notes[0]
    assert "One run measures one category (coding)" in report.sections[2].paragraphs[0]
    diff = report.sections[3]
    assert "2 of 2 point(s)" in diff.paragraphs[0]
    assert "+2.86%" in html  # 0.05 / 1.75
    assert "image: &#39;a&#39; -&gt; &#39;b&#39;" in html
    assert "Reused from cache" in html


def test_m0_single_category_says_so(tmp_path: Path) -> None:
    with RunWriter(tmp_path, "m0", config={"workload": {"category": "coding"}}) as w:
        w.write_summary(
            {"entries": [{"model": "m", "method": "mtp", "thinking": "off", "k": 1, "al": 1.5}], "diff": None}
        )
    report = build_report(open_run(w.dir))
    cat = next(s for s in report.sections if s.title == "Acceptance length by category")
    assert not cat.tables
    assert "One run measures one category (coding)" in cat.paragraphs[0]
    diff = next(s for s in report.sections if s.title.startswith("Diff"))
    assert "no previous reference table" in diff.paragraphs[0]


def test_m1_report_shows_verdict_al_ci_threshold_and_gsm8k(tmp_path: Path) -> None:
    passed = render_run(write_m1(tmp_path, passed=True, run_id="pass00000001"))
    assert 'class="verdict pass"' in passed
    assert "PASSED" in passed
    for text in ("3.1000", "3.0600", "3.1400", "95%", "histogram-iid", "2.9500", "3.0500"):
        assert text in passed, text
    assert "0.9300" in passed
    assert "186/200" in passed
    assert "0.9400" in passed
    assert "0.9000" in passed
    failed = render_run(write_m1(tmp_path, passed=False, al=2.5, run_id="fail00000001"), "md")
    assert "<strong>FAILED: sglang org/model-a mtp K=3</strong>" in md_html(failed)
    assert "<h2>AL gate (SPEED-Bench, synthetic acceptance off) (FAIL)</h2>" in md_html(failed)
    assert "| 2.5000 | 2.4600 | 2.5400 | 95% |" in failed  # numbers stay as they are in a cell


def test_m2_report_has_frontier_latency_and_audit_with_the_schemes_spread(runs: dict[str, str]) -> None:
    report = build_report(open_run(runs["m2"]))
    titles = [s.title for s in report.sections]
    assert titles == [
        "Throughput per GPU against interactivity",
        "Latency percentiles against concurrency",
        "Synthetic-acceptance audit",
        "Accept-length histogram against the scheme (the shape test)",
    ]
    frontier = report.sections[0].figures[0].svg
    assert frontier.count('class="point"') == 2
    assert "c=4" in frontier
    assert "c=8" in frontier
    assert len(report.sections[1].figures) == 4  # TTFT, TPOT, ITL, E2E
    latency = report.sections[1].tables[0]
    row4 = dict(zip(latency.columns, latency.rows[0], strict=True))
    assert row4["p99 ttft ms"] == "298.00"  # warm-up and failed requests are left out
    audit = report.sections[2].tables[0]
    row = dict(zip(audit.columns, audit.rows[0], strict=True))
    std = distribution("vllm", 3, al=2.5).std
    assert row["per-step std"] == f"{std:.4f}"
    assert row["steps"] == "2500"
    assert row["allowed"] == f"{max(0.02, 3.29 * std / math.sqrt(2500)):.4f}"
    assert row["deviation"] == "+0.0100"
    assert report.verdict_passed is True


def test_m2_invalid_points_make_a_failed_verdict(tmp_path: Path) -> None:
    report = build_report(open_run(write_m2(tmp_path, valid=False)))
    assert report.verdict_passed is False
    assert "1 of 2 point(s) INVALID" in str(report.verdict)
    assert report.sections[-1].title == "Failures"


# --------------------------------------------------------------------------------------------
# escaping, self-containment, banner


def test_every_template_escapes_user_strings(tmp_path: Path) -> None:
    dirs = [write_m0(tmp_path, model=EVIL), write_m1(tmp_path, model=EVIL), write_m2(tmp_path, model=EVIL)]
    outputs = [render_run(d, f) for d in dirs for f in ("html", "md")]  # type: ignore[arg-type]
    outputs += [render_comparison(dirs, "html"), render_comparison(dirs, "md")]
    for text in outputs:
        assert "<script" not in text.lower()
        assert "&lt;script&gt;" in text
    # inside the SVG legend too
    m0 = build_report(open_run(dirs[0]))
    assert "&lt;script&gt;" in m0.sections[0].figures[0].svg


def test_html_has_no_external_reference_even_with_urls_in_provenance(runs: dict[str, str]) -> None:
    html = render_run(runs["m2"])
    assert "http://127.0.0.1:8000" not in html or 'href="http' not in html
    _assert_self_contained(html)
    _assert_self_contained(render_comparison(list(runs.values())))
    assert 'xmlns="http' not in html  # inline SVG needs no namespace URL


def test_the_self_containment_check_can_fail() -> None:
    with pytest.raises(AssertionError):
        _assert_self_contained('<p><img src="https://example.com/x.png"></p>')
    with pytest.raises(AssertionError):
        _assert_self_contained('<a href="//cdn.example/x">x</a>')


@pytest.mark.parametrize("simulated", [True, False])
def test_simulated_banner_on_every_report_from_simulated_data(tmp_path: Path, simulated: bool) -> None:
    dirs = [write_m0(tmp_path, simulated=simulated), write_m2(tmp_path, simulated=simulated)]
    for d in dirs:
        html, md = render_run(d), render_run(d, "md")
        assert ('class="banner simulated"' in html) is simulated
        assert (SIMULATED_BANNER.replace("'", "&#39;") in html) is simulated
        assert (SIMULATED_BANNER in md_text(md)) is simulated
    assert ("SIMULATED DATA" in render_comparison(dirs)) is simulated


def test_incomplete_run_is_reported_as_such(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, "m2", config={"k": 3})  # never finished: a killed run
    html = render_run(w.dir)
    assert "INCOMPLETE" in html
    assert "no benchmark points" in html
    live = render_run(w.dir, live=True)
    assert "INCOMPLETE" not in live
    assert "written by the run before it closed" in live


# --------------------------------------------------------------------------------------------
# exports against golden files


def _math_m1(runs: dict[str, str]) -> str:
    """An M1 run of org/model-b on the math category: its cell joins the coding one in the same row."""
    return write_m1(
        Path(runs["m1"]).parents[1], model="org/model-b", al=2.9, category="math", run_id="m1math000001"
    )


def test_al_matrix_csv_matches_the_golden_file(runs: dict[str, str]) -> None:
    frame = al_matrix([open_run(runs["m0"]), open_run(runs["m1"]), open_run(_math_m1(runs))])
    assert frame.columns[0] == "Model"
    assert frame.columns[-1] == "Overall"
    assert al_matrix_csv(frame) == (FIXTURES / "al_matrix.csv").read_text()


def test_al_matrix_gives_a_rerun_its_own_row(tmp_path: Path) -> None:
    a = write_m1(tmp_path, run_id="aaaaaaaa0001", al=3.1)
    b = write_m1(tmp_path, run_id="bbbbbbbb0001", al=2.5)
    c = write_m1(tmp_path, run_id="cccccccc0001", al=2.0, category="math")
    frame = al_matrix([open_run(a), open_run(b), open_run(c)])
    assert frame["Model"].to_list() == [
        "org/model-a [sglang mtp K=3 thinking=off]",
        "org/model-a [sglang mtp K=3 thinking=off] run=bbbbbbbb",
    ]
    assert frame.row(0, named=True) == {
        "Model": "org/model-a [sglang mtp K=3 thinking=off]",
        "coding": 3.1,
        "math": 2.0,
        "Overall": pytest.approx(1 + (21 + 10) / 20),
    }


def test_inferencex_rows_match_the_golden_layout_and_values(runs: dict[str, str]) -> None:
    rows = inferencex_rows(open_run(runs["m2"]))
    golden = json.loads((FIXTURES / "inferencex_row_c4.json").read_text())
    assert [r["conc"] for r in rows] == [4, 8]
    assert list(rows[0]) == list(golden)
    for key, value in golden.items():
        got = rows[0][key]
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-9), key
        else:
            assert got == value, key
    assert inferencex_rows(open_run(runs["m0"])) == []


def test_inferencex_rows_keep_the_runs_itl_verdict(tmp_path: Path) -> None:
    """A point whose run withheld its ITL percentiles (loop lag: a judgement the records alone cannot repeat)
    exports no re-derived ITL percentile; its ITL mean and the other latencies stay."""
    plain = inferencex_rows(open_run(write_m2(tmp_path / "a")))[0]
    note = "ITL median, std and percentiles withheld: clock-dated reads met a loop-lag p99 of 12.0 ms"
    judged = inferencex_rows(open_run(write_m2(tmp_path / "b", shape={"itl_note": note})))[0]
    itl_keys = [k for k in plain if "itl" in k and k != "mean_itl"]
    assert itl_keys
    assert all(plain[k] is not None for k in itl_keys)
    assert all(judged[k] is None for k in itl_keys)
    assert judged["mean_itl"] == plain["mean_itl"] is not None
    assert judged["median_ttft"] == plain["median_ttft"]


# --------------------------------------------------------------------------------------------
# SVG


def test_svg_skips_non_finite_values_and_draws_error_bars() -> None:
    chart = svg.Chart(
        "t <b>",
        "x",
        "y",
        [
            svg.Series(
                "s & t", [(1, 1.0), (2, math.inf), (3, None), (4, 2.0)], errors=[(0.9, 1.1), None, None, None]
            )
        ],
    )
    out = svg.render(chart)
    assert out.count('class="point"') == 2
    assert "t &lt;b&gt;" in out
    assert "s &amp; t" in out
    assert "inf" not in out.lower()
    assert "nan" not in out.lower()
    assert out.count("<path") == 1
    empty = svg.render(
        svg.Chart("e", "x", "y", [svg.Series("s <1>", [(None, None)]), svg.Series("inf", [(1.0, math.inf)])])
    )
    assert "no data to plot" in empty
    assert ">s &lt;1&gt;</text>" in empty  # a series without a finite point is still named in the legend
    assert ">inf</text>" in empty
    assert 'class="point"' not in empty


def test_nice_ticks_cover_the_range() -> None:
    ticks = svg.nice_ticks(0.3, 9.2)
    assert ticks[0] <= 0.3
    assert ticks[-1] >= 9.2
    assert ticks == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert svg.nice_ticks(5, 5)[0] < 5 < svg.nice_ticks(5, 5)[-1]


# --------------------------------------------------------------------------------------------
# CLI


def test_cli_report_writes_html_into_the_run_directory(runs: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["report", runs["m2"]])
    assert result.exit_code == 0, result.output
    page = (Path(runs["m2"]) / "report.html").read_text()
    assert "Synthetic-acceptance audit" in page


def test_cli_report_formats_and_compare(runs: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    md = runner.invoke(app, ["report", "show", runs["m1"], "--format", "md"])
    assert md.exit_code == 0
    assert "# M1 evaluation gate" in md.output
    csv_m2 = runner.invoke(app, ["report", runs["m2"], "-f", "csv"])
    assert csv_m2.exit_code == 0
    assert csv_m2.output.splitlines()[0].startswith("hw,conc,image,model,infmax_model_prefix,framework")
    js = runner.invoke(app, ["report", runs["m2"], "-f", "json"])
    assert json.loads(js.output)[0]["conc"] == 4
    js2 = runner.invoke(app, ["report", "compare", runs["m0"], runs["m1"], "--json"])
    assert json.loads(js2.output)[-1]["Model"] == "org/model-b [sglang mtp K=3 thinking=off]"
    matrix = runner.invoke(app, ["report", "compare", runs["m0"], runs["m1"], _math_m1(runs), "-f", "csv"])
    assert matrix.output == (FIXTURES / "al_matrix.csv").read_text()
    root = str(Path(runs["m2"]).parents[1])
    by_root = runner.invoke(app, ["report", "compare", "--root", root, "--flow", "m2", "-f", "csv"])
    assert by_root.exit_code == 0, by_root.output
    assert [line.split(",")[1] for line in by_root.output.splitlines()[1:]] == ["4", "8"]
    out = tmp_path / "cmp.html"
    cmp = runner.invoke(
        app,
        [
            "report",
            "compare",
            runs["m2"],
            write_m2(tmp_path, framework="sglang", run_id="sgl000000001"),
            "-o",
            str(out),
        ],
    )
    assert cmp.exit_code == 0, cmp.output
    page = out.read_text()
    assert "m2 vllm vllm/vllm-openai:v0.11.0 K=3" in page
    assert "m2 sglang" in page
    _assert_self_contained(page)


def test_cli_report_errors_are_one_line_with_exit_code_2(runs: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "manifest.json does not exist" in missing.output
    (tmp_path / "empty").mkdir()
    nothing = runner.invoke(app, ["report", "compare", "--root", str(tmp_path / "empty")])
    assert nothing.exit_code == 2
    assert "nothing to compare" in nothing.output
    missing = runner.invoke(app, ["report", "compare", "--root", str(tmp_path / "missing")])
    assert missing.exit_code == 2
    assert "not a folder" in missing.output  # a typo is not a root without runs (R11-9)
    mixed = runner.invoke(app, ["report", "compare", runs["m0"], runs["m2"], "-f", "csv"])
    assert mixed.exit_code == 2
    assert "cannot export M2 benchmark rows together with m0" in mixed.output


def test_report_of_a_run_in_an_object_store(tmp_path: Path) -> None:
    import fsspec

    root = f"memory://alflow-reports-{tmp_path.name}"
    run_dir = write_m2(root)  # type: ignore[arg-type]
    path = write_html_report(run_dir)
    assert path == f"{run_dir}/report.html"
    page = fsspec.filesystem("memory").cat_file(path).decode()
    assert "Synthetic-acceptance audit" in page
    assert inferencex_rows(open_run(run_dir))[0]["conc"] == 4


def test_a_release_gate_warning_reaches_the_report(tmp_path: Path) -> None:
    """An image whose version is unknown: the gate's warning is stored with the server and shown in the report."""
    run_dir = write_m2(tmp_path)
    run = open_run(run_dir)
    assert not [w for w in build_report(run).warnings if w.startswith("Release gate")]
    manifest_path = Path(run_dir) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    warning = (
        "vLLM version unknown (image 'vllm/vllm-openai:latest'): synthetic acceptance needs v0.20.0 or newer"
    )
    manifest["provenance"]["server"]["provenance"]["warnings"] = [warning, "some other launch note"]
    manifest_path.write_text(json.dumps(manifest))
    shown = [w for w in build_report(open_run(run_dir)).warnings if w.startswith("Release gate")]
    assert shown == [f"Release gate: {warning}"]


def test_how_a_framework_draws_its_synthetic_acceptance_reaches_the_report(tmp_path: Path) -> None:
    """ATOM's fixed per-step seed and argmax correction (its knob warning) is stated in every report of the run."""
    run_dir = write_m2(tmp_path)
    manifest_path = Path(run_dir) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    note = DRAWS_NOTE + FIXED_SEED
    manifest["provenance"]["server"]["provenance"]["warnings"] = [note, "some other launch note"]
    manifest_path.write_text(json.dumps(manifest))
    warnings = build_report(open_run(run_dir)).warnings
    assert note in warnings
    assert "some other launch note" not in warnings


def test_nice_ticks_end_for_values_one_float_step_apart_and_extremes() -> None:
    near = svg.nice_ticks(1e5, math.nextafter(1e5, math.inf))
    assert near[0] < 1e5 < near[-1]
    assert 2 <= len(near) <= 22
    assert len(svg.nice_ticks(-1e300, 1e300)) <= 22
    assert svg.nice_ticks(0.0, 5e-324)[0] <= 0.0
