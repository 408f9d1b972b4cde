"""Hostile names through every Markdown text and CLI table: shown as typed, never a script, link or image."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from alflow.cli import app
from alflow.reports import render_comparison, render_run
from alflow.reports.markdown import escape_md, md_cell
from tests.markdown_check import HOSTILE, assert_inert, md_html, md_text
from tests.unit.report_runs import write_m0, write_m1, write_m2
from tests.unit.sse_server import threaded_sse_server

pytestmark = pytest.mark.unit

ALL = " ".join(HOSTILE)


def typed(value: str) -> str:
    """How a value reads once rendered: as typed, its line breaks as spaces."""
    return " ".join(value.split())


def columns(markdown: str) -> list[int]:
    """Cells per table row of the rendered ``markdown``."""
    rendered = md_html(markdown)
    return [row.count("<td") + row.count("<th") for row in rendered.split("<tr>")[1:]]


@pytest.mark.parametrize("value", HOSTILE)
def test_escape_md_is_inert_and_reads_as_typed(value: str) -> None:
    assert_inert(escape_md(value))
    assert md_text(escape_md(value)) == typed(value)
    table = f"| a | b |\n|---|---|\n| {md_cell(value)} | x |\n"
    assert columns(table) == [2, 2]
    assert md_text(table) == f"a b {typed(value)} x"


def test_the_inertness_check_can_fail() -> None:
    for raw in ("<script>alert(1)</script>", "![i](http://evil/x.png)", "[x](http://evil)"):
        with pytest.raises(AssertionError):
            assert_inert(raw)


def test_numbers_stay_readable_in_cells_and_text_is_escaped() -> None:
    assert md_cell("2.5000") == "2.5000"
    assert md_cell("-") == "-"
    assert md_cell("") == " "
    assert md_cell("v1.2") == "v1\\.2"
    assert escape_md("a\r\n  b\tc") == "a b c"


@pytest.mark.parametrize("value", [HOSTILE[0], HOSTILE[1], HOSTILE[2], ALL])
def test_report_md_of_stored_runs_escapes_names(tmp_path: Path, value: str) -> None:
    dirs = [write_m0(tmp_path, model=value), write_m1(tmp_path, model=value), write_m2(tmp_path, model=value)]
    for text in [*(render_run(d, "md") for d in dirs), render_comparison(dirs, "md")]:  # type: ignore[arg-type]
        assert_inert(text)
        assert typed(value) in md_text(text)
        for table in md_html(text).split("<table>")[1:]:  # no value split a cell: each table's rows as wide
            widths = {
                row.count("<td") + row.count("<th") for row in table.split("</table>")[0].split("<tr>")[1:]
            }
            assert len(widths) == 1, widths


# --------------------------------------------------------------------------------------------
# CLI tables: user strings printed literally (rich markup never parsed from them)


def reference_yaml(path: Path, models: tuple[str, ...], al: float) -> Path:
    entries = [
        {"model": m, "method": "mtp", "thinking": "off", "k": 3, "al": al + i / 100, "num_drafts": 100}
        for i, m in enumerate(models)
    ]
    data = {"kind": "example", "dataset": "speed-bench", "category": "[bold]x[/bold]", "entries": entries}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_reference_cli_tables_print_hostile_names_as_typed(tmp_path: Path) -> None:
    names = tuple(v for v in HOSTILE if "\n" not in v)
    old = reference_yaml(tmp_path / "[old].yaml", names, 2.5)
    new = reference_yaml(tmp_path / "new.yaml", names, 2.7)
    runner = CliRunner()
    env = {"COLUMNS": "400"}
    show = runner.invoke(app, ["reference", "show", str(old)], env=env)
    assert show.exit_code == 0, show.output
    diff = runner.invoke(app, ["reference", "diff", str(old), str(new)], env=env)
    assert diff.exit_code == 0, diff.output
    valid = runner.invoke(app, ["reference", "validate", str(old)], env=env)
    assert valid.exit_code == 0, valid.output
    for name in names:
        assert name in show.output, name
        assert name in diff.output, name
    assert "[bold]x[/bold]" in show.output  # the category in the title, as typed
    assert "/[old].yaml ->" in diff.output  # the title wraps to the table width
    assert str(old) in valid.output


@pytest.fixture
def sse_server() -> Iterator[str]:
    with threaded_sse_server() as server:
        yield server.base_url


@pytest.mark.parametrize("name", [*(v for v in HOSTILE if "\n" not in v), ALL.replace("\n", " ")])
def test_bench_table_prints_a_hostile_model_name_as_typed(sse_server: str, name: str) -> None:
    """Markup in a model name prints as typed (a control character, a newline included, is refused at --model)."""
    args = ["bench", "--base-url", sse_server, "--model", name, "--endpoint", "completions", "--num-prompts", "2",
            "--isl", "8", "--osl", "4", "--vocab-size", "500", "--no-metrics", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400", "OPENAI_API_KEY": ""})
    assert result.exit_code == 0, result.output
    assert f"alflow bench: {name}" in result.output


def test_demo_summaries_print_hostile_names_as_typed() -> None:
    from rich.console import Console

    from alflow.cli.demo import _print_demo, _print_tiny_demo, _print_vllm_demo
    from alflow.gates import Verdict
    from alflow.methods.outcomes import DemoBenchmark, DemoGate, DemoOutcome, M0Outcome, M1Outcome, M2Outcome
    from alflow.reference.table import ReferenceEntry
    from alflow.results.rows import M2Point

    name = " ".join(v for v in HOSTILE if "\n" not in v)
    entry = ReferenceEntry(
        model=name,
        method="ngram",
        thinking="off",
        k=3,
        concurrency=1,
        prefix_caching=False,
        al=2.5,
        num_drafts=10,
        draft_sample_method="greedy",
        rejection_sample_method="standard",
    )
    m0 = M0Outcome(f"/r/{name}", f"refs/{name}.yaml", (entry,), cached_points=(name,))
    m1 = M1Outcome(f"/r/{name}", False, (Verdict(gate="al", passed=False, message=name),))
    gate = DemoGate(name, False, f"AL gate FAILED for {name}", m1)
    point = M2Point(
        concurrency=4, k=3, framework="sim", target_al=2.5, achieved_al=2.5, valid=True, partial=False, audit=name,
        num_drafts=10, expected_al=2.5, allowed_deviation=0.05, completed=4, failed=0, output_throughput=9.0,
        nodes=1, num_gpus=1, total_token_throughput=9.0, output_throughput_per_gpu=9.0,
        total_token_throughput_per_gpu=9.0, median_interactivity_tokens_per_s=3.0, median_tpot_ms=1.0,
        median_ttft_ms=1.0, p99_ttft_ms=1.0, median_itl_ms=1.0, tokens_per_chunk=1.0, duration_s=1.0,
        fit_p_value=0.5,
    )  # fmt: skip
    m2 = M2Outcome(f"/r/{name}", 2.5, name, 1, 1, (point,))
    root = f"/r/{name}"
    outs = {
        "sim": DemoOutcome("sim", root, m0.reference_path, m0, (gate,), (DemoBenchmark(None, m2),)),
        "tiny": DemoOutcome("tiny", root, m0.reference_path, m0, (gate,)),
        "vllm": DemoOutcome(
            "vllm",
            root,
            m0.reference_path,
            m0,
            (gate,),
            (DemoBenchmark(None, m2), DemoBenchmark(1.5, failed=name)),
            label=name,
            model_path=name,
            model_source=name,
        ),
    }
    for kind, printer in (("sim", _print_demo), ("tiny", _print_tiny_demo), ("vllm", _print_vllm_demo)):
        console = Console(record=True, width=600)
        printer(console, outs[kind], 1.0)
        text = console.export_text()
        assert name in text, kind
        assert f"AL gate FAILED for {name}" in text, kind
