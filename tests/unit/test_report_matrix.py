"""``alflow report matrix``: AIPerf speed-bench-report's cells, Overall, column order and formats."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from alflow.cli.root import app
from alflow.errors import InvalidInputError
from alflow.reports.exports import al_matrix
from alflow.reports.matrix import build_matrix, detect_columns, matrix_csv, matrix_table
from alflow.results.store import RunWriter, open_run

pytestmark = pytest.mark.unit


def _entry(k: int, al: float, steps: int, drafted: int, accepted: int) -> dict[str, Any]:
    return {
        "model": "org/m",
        "method": "mtp",
        "thinking": "off",
        "k": k,
        "al": al,
        "num_drafts": steps,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        # the reference keys beside (model, method, thinking, K); unknown keys are ignored by older readers
        "draft_sample_method": "greedy",
        "rejection_sample_method": "standard",
        "concurrency": 1,
        "prefix_caching": False,
    }


def _m0(root: Path, run_id: str, workload: dict[str, Any], entries: list[dict[str, Any]], tput: float,
        dataset: dict[str, str] | None = None) -> str:  # fmt: skip
    config = {"workload": workload, "server": {"framework": "vllm"}, "models": [{"id": "org/m"}]}
    with RunWriter(root, "m0", run_id=run_id, config=config) as w:
        if dataset is not None:
            w.update_provenance(dataset=dataset)
        w.write_summary({"flow": "m0", "entries": entries})
        w.write_json(
            "scrapes",
            {
                "points": {
                    f"org/m|mtp|off|{e['k']}": {"k": e["k"], "output_throughput": tput * e["k"]}
                    for e in entries
                }
            },
        )
    return w.dir


def _m1(root: Path, run_id: str, category: str, counts: tuple[int, int, int], tput: float) -> str:
    steps, drafted, accepted = counts
    config = {
        "workload": {"kind": "speed-bench", "category": category},
        "model": {"id": "org/m"},
        "server": {"framework": "sglang"},
        "method": "mtp",
        "k": 3,
        "thinking": "off",
    }
    with RunWriter(root, "m1", run_id=run_id, config=config) as w:
        w.write_table(
            "spec_stats",
            pl.DataFrame(
                [{"num_drafts": steps, "draft_tokens": drafted, "accepted_tokens": accepted, "al": 9.9}]
            ),
        )
        w.write_summary({"flow": "m1", "client": {"output_throughput": tput}})
    return w.dir


@pytest.fixture
def literature_runs(tmp_path: Path) -> list[str]:
    gsm = _m0(
        tmp_path,
        "gsm000000001",
        {"kind": "literature", "dataset": "gsm8k"},
        [_entry(1, 1.8, 100, 100, 80), _entry(3, 2.5, 100, 300, 150)],
        tput=100.0,
        dataset={"dataset": "openai/gsm8k (subset: 20 of 1319 prompts)", "subset": "true"},
    )
    mt = _m0(
        tmp_path,
        "mtb000000001",
        {"kind": "literature", "dataset": "mtbench"},
        [_entry(1, 1.6, 300, 300, 180), _entry(3, 2.0, 300, 900, 300)],
        tput=50.0,
    )
    return [gsm, mt]


def test_cells_overall_and_column_order_follow_aiperf(literature_runs: list[str]) -> None:
    runs = [open_run(d) for d in reversed(literature_runs)]  # column order does not follow run order
    matrix = build_matrix(runs)
    assert matrix.columns == ("gsm8k", "mtbench")  # AIPerf's SPEC_AL_BENCHMARKS order
    k1, k3 = matrix.rows
    assert k1.label == "org/m [vllm mtp K=1 thinking=off]"
    assert k1.values == pytest.approx((1.8, 1.6))  # 1 + 80/100, 1 + 180/300
    assert k3.values == pytest.approx((2.5, 2.0))
    # Overall: AIPerf's macro mean of the cells, not the pooled counts of al_matrix
    assert k3.overall == pytest.approx((2.5 + 2.0) / 2)
    pooled = al_matrix(runs).row(1, named=True)["Overall"]
    assert pooled == pytest.approx(1 + (150 + 300) / (100 + 300))
    assert k3.overall != pytest.approx(pooled)
    assert matrix.notes == ("gsm8k: openai/gsm8k (subset: 20 of 1319 prompts) (run gsm00000)",)

    rate = build_matrix(runs, "accept_rate")
    assert rate.rows[1].values == pytest.approx((150 / 300, 300 / 900))
    assert rate.rows[1].overall == pytest.approx((0.5 + 1 / 3) / 2)
    tput = build_matrix(runs, "throughput")
    assert tput.rows[0].values == pytest.approx((100.0, 50.0))
    assert tput.rows[1].overall == pytest.approx((300.0 + 150.0) / 2)


def test_m1_cells_come_from_counters_and_the_later_run_wins(tmp_path: Path) -> None:
    a = _m1(tmp_path, "m1a000000001", "math", (100, 300, 120), 80.0)
    b = _m1(tmp_path, "m1b000000001", "coding", (100, 300, 210), 90.0)
    again = _m1(tmp_path, "m1c000000001", "coding", (100, 300, 150), 70.0)
    matrix = build_matrix([open_run(d) for d in (a, b, again)])
    assert matrix.columns == ("coding", "math")  # SPEED-Bench's qualitative order
    (row,) = matrix.rows
    assert row.label == "org/m [sglang mtp K=3 thinking=off]"
    assert row.values == pytest.approx((2.5, 2.2))  # counters win over the stored al 9.9
    assert "run m1c00000 replaces run m1b00000" in matrix.notes[0]
    assert build_matrix([open_run(a)], "throughput").rows[0].values == (80.0,)


def test_formats_and_unknown_inputs(literature_runs: list[str], tmp_path: Path) -> None:
    matrix = build_matrix([open_run(d) for d in literature_runs])
    rows = list(csv.reader(io.StringIO(matrix_csv(matrix))))
    assert rows[0] == ["Model", "gsm8k", "mtbench", "Overall"]
    assert rows[2] == ["org/m [vllm mtp K=3 thinking=off]", "2.50", "2.00", "2.25"]
    table = matrix_table(matrix, digits=3)
    assert table.splitlines()[0] == "Acceptance Length Report"
    assert "org/m [vllm mtp K=3 thinking=off]  2.500    2.000    2.250" in table
    assert detect_columns({"zeta", "gsm8k"}) == ["gsm8k", "zeta"]
    with pytest.raises(InvalidInputError, match="unknown matrix metric 'speed'"):
        build_matrix([], "speed")
    with RunWriter(tmp_path, "m2", run_id="m2x000000001", config={}) as w:
        pass
    with pytest.raises(InvalidInputError, match=r"the matrix reads M0 and M1 runs; not: .*\(m2\)"):
        build_matrix([open_run(w.dir)])


def test_cli_prints_the_matrix_in_each_format(literature_runs: list[str]) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["report", "matrix", *literature_runs])
    assert out.exit_code == 0, out.output
    header = out.stdout.splitlines()[1].split()
    assert header == ["Model", "gsm8k", "mtbench", "Overall"]
    data = json.loads(runner.invoke(app, ["report", "matrix", *literature_runs, "--json"]).stdout)
    assert data["columns"] == ["gsm8k", "mtbench"]
    assert data["rows"][1]["values"] == {"gsm8k": 2.5, "mtbench": 2.0}
    rate = runner.invoke(app, ["report", "matrix", *literature_runs, "--metric", "accept_rate", "-f", "csv"])
    assert rate.stdout.splitlines()[2] == "org/m [vllm mtp K=3 thinking=off],0.50,0.33,0.42"
    bad = runner.invoke(app, ["report", "matrix", *literature_runs, "--metric", "speed"])
    assert bad.exit_code == 2
    assert "--metric 'speed' is not one of: accept_length, accept_rate, throughput" in bad.output
