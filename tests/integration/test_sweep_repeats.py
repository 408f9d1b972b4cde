"""The K sweep with repeats on the sim: each (K, concurrency) measured three times, K chosen with its spread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.config import SweepParams
from alflow.methods.kchoice import Objective, choose_k
from alflow.results.store import open_run
from alflow.results.view import m2_points
from alflow_flows.sweep import sweep
from tests.integration.test_flows import sweep_templates

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


def test_sweep_with_three_repeats_reports_the_chosen_k_with_its_spread(tmp_path: Path) -> None:
    gate_params, bench = sweep_templates(
        tmp_path, (1, 2), concurrencies=(4,), prompts_per_concurrency=3, warmup_per_concurrency=1, repeats=3
    )
    out = sweep(params=SweepParams.model_validate({"ks": (1, 2), "gate": gate_params, "benchmark": bench}))

    # every repeat is its own stored point (never averaged away), in the M2 runs and in the sweep's run
    assert sorted((p.k, p.repeat) for p in out.points) == [(k, r) for k in (1, 2) for r in range(3)]
    assert all(p.valid for p in out.points)
    for o in out.per_k.values():
        assert o.benchmark_run is not None
        assert o.benchmark_run.run_dir
        m2 = open_run(o.benchmark_run.run_dir)
        assert sorted(p.repeat for p in m2_points(m2)) == [0, 1, 2]
        requests = m2.table("requests")
        assert sorted(set(requests["repeat"].to_list())) == [0, 1, 2]
        measured = requests.filter(~requests["warmup"])
        assert measured.height == 3 * 3 * 4  # 3 repeats x 3 prompts per concurrency x concurrency 4
        assert m2.json("summary")["repeats"] == 3
    assert out.run_dir is not None
    stored = open_run(out.run_dir)
    points = m2_points(stored)
    assert len(points) == 6
    summary = stored.json("summary")
    assert summary["repeats"] == 3
    (thr,) = choose_k(points, Objective.throughput)
    stored_thr = [c for c in summary["k_choice"] if c["objective"] == "throughput"]
    assert [c["chosen_k"] for c in stored_thr] == [thr.chosen.k]
    assert [c["n"] for c in stored_thr[0]["candidates"]] == [3, 3]
    assert summary["best_k"][0]["best_k_throughput"] == thr.chosen.k
    assert summary["best_k"][0]["output_throughput_per_gpu"] == pytest.approx(thr.chosen.median)

    md = (Path(out.run_dir) / "report.md").read_text()
    assert "3 repeat\\(s\\) per \\(K, concurrency\\)" in md
    chosen_row = f"| 4 | throughput | {thr.chosen.k} | {thr.chosen.score:.1f} |"
    assert chosen_row in md
    assert md.count("| 4 | 1 | 3/3 |") == 1
    assert md.count("| 4 | 2 | 3/3 |") == 1
    html = (Path(out.run_dir) / "report.html").read_text()
    assert "K with its uncertainty" in html
    assert "Spread over repeats" in html

    result = CliRunner().invoke(app, ["report", "k-schedule", out.run_dir])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "num_speculative_tokens": thr.chosen.k,
        "num_speculative_tokens_per_batch_size": [[1, 4, thr.chosen.k]],
    }
    assert "concurrency 1 was not measured" in result.stderr
