"""alflow's vLLM plugin (plugins/vllm-cpu-synthetic) tested where it runs: in the vLLM environment, on vLLM 0.32.0.

Its own tests (a property test of the port against a line-by-line transcription of the Triton kernels, vLLM's
C++ kernels reached unchanged outside synthetic mode, vLLM's own refusal without the port, the hook through
vLLM's dispatcher and ``rejection_sample()``, the refusal of another vLLM version) run under the vLLM
environment's interpreter; this test runs them and requires every one to pass, none skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.vllm_support import require_vllm

pytestmark = [pytest.mark.engines, pytest.mark.vllm]

ENV = require_vllm()
PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "vllm-cpu-synthetic"
EXPECTED_TESTS = 7


def test_the_ports_own_tests_pass_in_the_vllm_environment() -> None:
    done = subprocess.run(
        [str(ENV / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        capture_output=True,
        text=True,
        cwd=PLUGIN,
        timeout=600,
        check=False,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    summary = re.search(r"(\d+) passed", done.stdout)
    assert summary is not None, tail
    assert int(summary.group(1)) == EXPECTED_TESTS, tail
    assert "skipped" not in done.stdout.splitlines()[-1], tail


def test_the_plugin_is_installed_in_the_vllm_environment_only() -> None:
    site = sorted(ENV.glob("lib/python*/site-packages"))
    assert any(list(s.glob("alflow_vllm_cpu_synthetic-*.dist-info")) for s in site)
    ours = sorted(Path(__file__).resolve().parents[2].joinpath(".venv").glob("lib/python*/site-packages"))
    assert not any(list(s.glob("alflow_vllm_cpu_synthetic-*.dist-info")) for s in ours)
