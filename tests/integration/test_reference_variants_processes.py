"""The ``alflow reference`` commands importing, showing and exporting a drafter variant; they start processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_reference_variants import GOLDEN_KIMI_PROB

pytestmark = pytest.mark.integration

ALFLOW = str(Path(sys.executable).parent / "alflow")


def test_the_cli_imports_shows_the_variant_and_exports(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(GOLDEN_KIMI_PROB)
    into = tmp_path / "t.yaml"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ALFLOW, "reference", *args], capture_output=True, text=True, timeout=60, check=False
        )

    out = run("import-inferencex", str(tmp_path / "b.yaml"), "--into", str(into))
    assert out.returncode == 0, out.stderr
    assert "imported 8 values" in out.stdout
    shown = run("show", str(into))
    assert shown.returncode == 0, shown.stderr
    assert "probabilistic" in shown.stdout
    assert "IMPORTED values, not measured by alflow" in shown.stdout
    exported = run("export-inferencex", str(into), "--out", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    assert (
        tmp_path / "out" / "kimi-k3_dspark_probabilistic_sample_method_block_rejection_sample_method.yaml"
    ).exists()
    bad = run("import-inferencex", str(tmp_path / "b.yaml"), "--into", str(into), "--prefix-caching", "maybe")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "--prefix-caching 'maybe': give on or off" in bad.stderr
