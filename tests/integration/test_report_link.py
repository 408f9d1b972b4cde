"""The "report.html" link artifact of real sim M2 runs: the results site's page when a URL is set, else the file.

The setting is read as a user sets it: the worker's environment ``ALFLOW_RESULTS_URL``, else the Prefect
Variable ``alflow-results-url`` on the run's Prefect API. A bad value never fails the run: the link falls back
to the stored file and the artifact says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.client.schemas.objects import Artifact
from prefect.variables import Variable

from alflow.config import ModelSpec, SamplingParams, server_config
from alflow.results.links import RESULTS_URL_ENV, RESULTS_URL_VARIABLE
from tests.integration.sim_runs import quick_m2, run_artifacts

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture
def no_site_variable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(RESULTS_URL_ENV, raising=False)
    Variable.unset(RESULTS_URL_VARIABLE)
    yield
    Variable.unset(RESULTS_URL_VARIABLE)


def _m2(tmp_path: Path) -> tuple[str, Artifact]:
    """One quick sim M2 run: its run directory and its report link artifact."""
    model = ModelSpec(id="link-model", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=16))
    server = server_config(framework="sim", model="link-model", extra_args=("--time-scale", "0"))
    state = quick_m2(model, server, tmp_path / "results", k=2, target_al=2.0, isl=16, osl=8)
    (link,) = [a for a in run_artifacts(state) if str(a.key).endswith("-html")]
    return state.result().run_dir, link


@pytest.mark.usefixtures("no_site_variable")
def test_with_the_environment_set_the_link_opens_the_runs_page_on_the_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RESULTS_URL_ENV, "https://results.team.example/alflow/")
    run_dir, artifact = _m2(tmp_path)
    flow, name = Path(run_dir).parts[-2:]
    assert artifact.type == "markdown"  # Prefect stores a link artifact as a Markdown link
    assert (
        artifact.data
        == f"[report on the results site](https://results.team.example/alflow/runs/{flow}/{name}/)"
    )
    assert "alflow results serve" not in str(artifact.description)


@pytest.mark.usefixtures("no_site_variable")
def test_the_prefect_variable_sets_the_site_when_the_environment_does_not(tmp_path: Path) -> None:
    Variable.set(RESULTS_URL_VARIABLE, "http://127.0.0.1:8765", overwrite=True)
    run_dir, artifact = _m2(tmp_path)
    flow, name = Path(run_dir).parts[-2:]
    assert artifact.data == f"[report on the results site](http://127.0.0.1:8765/runs/{flow}/{name}/)"


@pytest.mark.usefixtures("no_site_variable")
def test_without_a_site_the_link_is_the_file_and_says_how_to_share_it(tmp_path: Path) -> None:
    run_dir, artifact = _m2(tmp_path)
    assert artifact.data == f"[report.html]({(Path(run_dir) / 'report.html').resolve().as_uri()})"
    assert "alflow results serve" in str(artifact.description)
    assert RESULTS_URL_VARIABLE in str(artifact.description)


@pytest.mark.usefixtures("no_site_variable")
def test_a_bad_site_url_falls_back_to_the_file_and_the_artifact_says_why(tmp_path: Path) -> None:
    Variable.set(RESULTS_URL_VARIABLE, "https://user:hunter2@results.example/", overwrite=True)
    _run_dir, artifact = _m2(
        tmp_path
    )  # the run completes: the measurement is stored, the setting only a link
    assert str(artifact.data).startswith("[report.html](file://")
    description = str(artifact.description)
    assert "was not used" in description
    assert "carries credentials" in description
    assert "hunter2" not in description
