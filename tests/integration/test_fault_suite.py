"""benchmarks/fault_suite.py still runs: two fast scenarios (no Prefect server) through ``--only ... --json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAST = ("error-events", "counter-reset")


def test_fault_suite_runs_two_fast_scenarios_and_reports_them_as_json(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fault_suite.py"), "--only", ",".join(FAST), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = {r["scenario"]: r for r in report["scenarios"]}
    assert list(rows) == list(FAST)
    for name, row in rows.items():
        shown = json.dumps(row, indent=1)
        assert row["as_documented"], shown
        assert row["ok"], shown
        assert row["records_kept"] == row["records_expected"] > 0, shown
        assert (row["processes_left"], row["canaries"], row["tracebacks"]) == (0, 0, 0), (name, shown)
    assert report["totals"] == {
        "tracebacks": 0,
        "silent_wrong_results": 0,
        "processes_left": 0,
        "lost_records": 0,
        "canaries": 0,
    }
    buckets = report["buckets"]
    assert buckets["clear"] + buckets["accepted"] > 0
    assert {b: n for b, n in buckets.items() if b not in ("clear", "accepted") and n} == {}
    assert report["targets_met"] is True
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(tmp_path.glob("alflow-fault-suite-*"))  # the suite removed its folders
