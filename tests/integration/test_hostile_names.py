"""A hostile model name and server label through real sim flow runs: report.md and the Prefect artifacts.

The name holds HTML, a javascript link, an image, a newline, rich markup and a table pipe; rendered by
a Markdown renderer it must read as typed and produce no script, link or image.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from alflow.config import (
    CalibrateParams,
    LoadConfig,
    ModelSpec,
    SamplingParams,
    ServerPlacement,
    SpeedBenchWorkload,
    server_config,
)
from alflow_flows.calibrate import calibrate
from tests.integration.sim_runs import quick_m2, run_artifacts
from tests.markdown_check import HOSTILE, assert_inert, md_text

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

NAME = " ".join(HOSTILE)
SHOWN = " ".join(NAME.split())  # as a reader sees it: the newline is a space
# a model id holds no control character (refused at load: alflow.util.names.check_identifier), so the id carries the
# name with its newline as a space; the free-text label keeps the newline
MODEL_ID = SHOWN
MODEL = ModelSpec(id=MODEL_ID, sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=64))
SERVER = server_config(
    framework="sim", model=MODEL_ID, label=f"label {NAME}", extra_args=("--time-scale", "0")
)


def markdown_artifacts(state: object) -> list[str]:
    found = run_artifacts(state, kind="markdown")
    links = [str(a.data) for a in found if str(a.key).endswith("-html")]  # the link to report.html
    for (
        link
    ) in links:  # one Markdown link whose target is a percent-encoded file URI, whatever the path holds
        assert re.fullmatch(r"\[report\.html\]\(file:///[^()\[\]<>\s]+/report\.html\)", link), link
    return [str(a.data) for a in found if not str(a.key).endswith("-html")]


def check(markdown: str) -> None:
    assert_inert(markdown)
    text = md_text(markdown)
    assert SHOWN in text
    assert f"label {SHOWN}" in text


def test_m2_report_and_artifact_show_a_hostile_name_as_typed(tmp_path: Path) -> None:
    root = tmp_path / "results [x](javascript:alert(1))"
    state = quick_m2(MODEL, SERVER, root, k=3, target_al=2.73, isl=32, osl=16)
    out = state.result()
    (artifact,) = markdown_artifacts(state)
    report = (Path(out.run_dir) / "report.md").read_text()
    assert artifact == report
    check(report)
    assert "# M2 synthetic benchmark" in report  # the title, after the simulated banner


def test_m0_report_and_artifact_show_a_hostile_name_as_typed(tmp_path: Path) -> None:
    params = CalibrateParams(
        models=(MODEL,),
        ks=(1,),
        server=SERVER,
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        workload=SpeedBenchWorkload(category="coding", max_tokens=32, limit=2),
        load=LoadConfig(concurrency=2),
        reference_path=str(tmp_path / "ref.yaml"),
    )
    state = calibrate(params=params, return_state=True)
    assert state.is_completed(), state.message
    (artifact,) = markdown_artifacts(state)
    check(artifact)
    assert "# M0 calibration" in artifact
