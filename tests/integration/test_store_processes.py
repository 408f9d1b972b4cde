"""The run store against real processes: a run killed mid-write, and the provenance facts; they start processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alflow.results import store
from alflow.results.provenance import code_version, host_info

pytestmark = pytest.mark.integration


def test_killed_run_leaves_a_readable_incomplete_store(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, polars as pl
        from alflow.results.store import RunWriter
        run = RunWriter({str(tmp_path)!r}, "m0", run_id="killed")
        run.write_table("requests", pl.DataFrame({{"request_id": [1, 2, 3]}}))
        print(run.dir, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL
    run_dir = proc.stdout.strip()
    stored = store.open_run(run_dir)
    assert stored.status == "incomplete"
    assert not stored.complete
    assert stored.table("requests").height == 3
    assert not [p for p in Path(run_dir).iterdir() if p.name.endswith(".tmp")]
    assert store.load_runs(tmp_path, "requests").is_empty()
    assert (
        store.load_runs(tmp_path, "requests", include_incomplete=True)["run_status"].to_list()
        == ["incomplete"] * 3
    )


def test_provenance_facts() -> None:
    assert code_version().startswith("alflow ")
    info = host_info()
    assert info["python"]
    assert info["cpus"] >= 1
