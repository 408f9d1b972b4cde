"""Real flows against an external sim started with an API key, the key given by its variable's name (``api_key_env``).

The sim guards ``/v1/*`` as vLLM's ``--api-key`` does (401 without ``Authorization: Bearer KEY``); its key is a
canary, in the sim's environment and in this process's under another name. M2 (chat endpoint: the random prompts
go through ``/detokenize``; the pre-flight burst; the measured load), then M0 and M1 (the GSM8K evaluation and
its synthetic-acceptance probes) run against it and pass; the canary is nowhere in the run store nor in anything
printed, and the run keeps the variable's name. With the variable unset, the flow fails at the attach in one line
naming it, before anything is measured.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    ExternalServer,
    GateParams,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    RandomWorkload,
    SamplingParams,
    ServerConfig,
    ServerPlacement,
    SpecMethod,
    SpeedBenchWorkload,
    SyntheticAcceptance,
    server_config,
)
from alflow.evals.run import bundled_gsm8k
from alflow.frameworks.recipes import build_launch
from alflow.methods.common import point_server
from alflow.results.store import open_run
from alflow.sim.process import SimProcess
from alflow_flows.benchmark import benchmark
from alflow_flows.calibrate import calibrate
from alflow_flows.gate import gate
from tests.e2e.prefect_support import database_dump
from tests.integration.test_secret_canary import status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

VAR = "ALFLOW_IT_EXTERNAL_API_KEY"
CANARY = f"sk-CanaryExternalKey-{uuid.uuid4().hex[:10]}"
MODEL = ModelSpec(id="test-llama", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=256))
FAST = ("--time-scale", "0", "--seed", "5")
ANSWERS = ("--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "0.95")


def _sim_args(server: ServerConfig) -> list[str]:
    """The sim's own arguments for ``server`` as the sim recipe renders them (without host and port)."""
    argv = list(build_launch(server).argv)
    args = argv[argv.index("serve") + 1 :]
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--host", "--port"):
            skip = True
        else:
            out.append(arg)
    return out


def _keyed_sim(server: ServerConfig) -> SimProcess:
    """The sim for ``server`` started apart from the flow, its key a canary in its own environment only."""
    env = {k: v for k, v in os.environ.items() if k != VAR}
    return SimProcess(_sim_args(server), env={**env, "VLLM_API_KEY": CANARY})


def _placement(tmp_path: Path, base_url: str) -> ServerPlacement:
    return ServerPlacement(
        runner=ExternalServer(base_url=base_url, dialect="vllm", api_key_env=VAR),
        results_root=str(tmp_path / "results"),
    )


def _m2(tmp_path: Path, base_url: str) -> BenchmarkParams:
    return BenchmarkParams(
        model=MODEL,
        k=3,
        server=server_config(framework="sim", model=MODEL.id, extra_args=FAST),
        placement=_placement(tmp_path, base_url),
        target_al=2.73,
        workload=RandomWorkload(isl=128, osl=64, endpoint="chat"),
        concurrencies=(4,),
    )


def _m2_server(params: BenchmarkParams) -> ServerConfig:
    """The server M2's first point asks for (its synthetic knobs included), as the flow builds it."""
    synthetic = SyntheticAcceptance(target_al=params.target_al or 0.0, scheme=params.scheme)
    return point_server(params.server, MODEL.id, params.method, params.k, synthetic=synthetic)


def _prefect_database_dump() -> str:
    """Prefect's database of the test harness as text, after the queued logs were sent."""
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    APILogHandler().flush()
    return database_dump(str(PREFECT_SERVER_DATABASE_CONNECTION_URL.value()))


def _no_canary_under(root: Path) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and CANARY.encode() in p.read_bytes()
    ]


@pytest.fixture
def key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, CANARY)


@pytest.mark.usefixtures("key_in_env")
def test_m2_on_an_authenticated_external_server_sends_the_key_and_stores_only_its_name(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    params = _m2(tmp_path, "http://127.0.0.1:9")
    with _keyed_sim(_m2_server(params)) as sim:
        assert status(sim.base_url + "/v1/models") == 401  # the server wants the key ...
        assert status(sim.base_url + "/v1/models", CANARY) == 200
        assert status(sim.base_url + "/metrics") == 200  # ... but not for its metrics
        params = _m2(tmp_path, sim.base_url)
        out = benchmark(params=params)
    assert [p.valid for p in out.points] == [True]
    stored = open_run(out.run_dir)
    assert stored.complete
    requests = stored.table("requests")
    assert requests.height == 10 * 4 + 2 * 4
    assert requests["error"].null_count() == requests.height  # every request (and /detokenize) was let in
    manifest = stored.manifest.model_dump(mode="json")
    assert manifest["config"]["placement"]["runner"]["api_key_env"] == VAR
    assert manifest["provenance"]["server"]["api_key_env"] == VAR
    assert manifest["provenance"]["server"]["provenance"]["external"] is True
    assert manifest["provenance"]["preflight"]["passed"] is True
    assert _no_canary_under(tmp_path / "results") == []
    printed = capfd.readouterr()
    assert CANARY not in printed.out + printed.err
    dump = _prefect_database_dump()
    assert VAR in dump  # the run's parameters are there, with the variable's name only
    assert CANARY not in dump


@pytest.mark.usefixtures("key_in_env")
def test_m0_and_m1_with_gsm8k_on_an_authenticated_external_server(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    template = server_config(framework="sim", model=MODEL.id, extra_args=(*FAST, *ANSWERS))
    point = point_server(template, MODEL.id, SpecMethod.MTP, 3)
    reference = tmp_path / "ref.yaml"
    with _keyed_sim(point) as sim:
        placement = _placement(tmp_path, sim.base_url)
        workload = SpeedBenchWorkload(category="coding", max_tokens=256)
        calibrated = calibrate(
            params=CalibrateParams(
                models=(MODEL,),
                ks=(3,),
                server=template,
                placement=placement,
                workload=workload,
                load=LoadConfig(concurrency=4),
                reference_path=str(reference),
                cache_days=0,
            )
        )
        assert len(calibrated.entries) == 1
        ok = gate(
            params=GateParams(
                model=MODEL,
                k=3,
                server=template,
                placement=placement,
                reference_path=str(reference),
                workload=workload,
                load=LoadConfig(concurrency=4),
                gsm8k=Gsm8kSettings(limit=20),
            )
        )
    assert ok.passed, [v.message for v in ok.verdicts]
    assert [v.gate for v in ok.verdicts] == ["al", "gsm8k-accuracy"]
    stored = open_run(ok.run_dir).manifest.model_dump(mode="json")
    assert stored["provenance"]["server"]["api_key_env"] == VAR
    assert _no_canary_under(tmp_path / "results") == []
    assert CANARY.encode() not in reference.read_bytes()
    printed = capfd.readouterr()
    assert CANARY not in printed.out + printed.err
    assert CANARY not in _prefect_database_dump()


def test_an_unset_variable_fails_the_flow_at_the_attach_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    params = _m2(tmp_path, "http://127.0.0.1:9")
    with _keyed_sim(_m2_server(params)) as sim:
        started = time.monotonic()
        state = benchmark(params=_m2(tmp_path, sim.base_url), return_state=True)
        took = time.monotonic() - started
    assert state.is_failed()
    message = str(state.message)
    assert (
        f"api_key_env names {VAR}, which is not set in the environment of the process that runs the flow"
        in (message)
    )
    assert "\n" not in message
    assert took < 60, took
    (run_dir,) = (tmp_path / "results" / "m2").iterdir()
    stored = open_run(run_dir)
    assert stored.status == "failed"
    assert not (run_dir / "requests.parquet").exists()  # nothing was measured
    assert "preflight" not in stored.manifest.model_dump(mode="json")["provenance"]
