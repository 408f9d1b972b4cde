"""Canary secrets through real runs: nothing written or printed ever holds one.

``alflow bench`` runs against the simulated engine started with an API key (``VLLM_API_KEY``, as vLLM
reads it), with the key and with a metrics URL carrying credentials; every file under ``--out`` and
everything the command printed is searched for the canaries. The process runner passes a secret to
the server by name: the server gets the value, the run store holds only the name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from alflow.config import ProcessOptions, ServerPlacement, server_config
from alflow.results.store import RunWriter, open_run
from alflow.sim.process import SimProcess
from alflow.util.rows import dump_row
from alflow_infra.lifecycle import serving

ALFLOW = str(Path(sys.executable).with_name("alflow"))
API_KEY = "sk-CanaryApiKey-51c9e2"
METRICS_PASSWORD = "CanaryMetricsPw-88d1"
METRICS_TOKEN = "CanaryMetricsTok-0b7f"
CANARIES = (API_KEY, METRICS_PASSWORD, METRICS_TOKEN)


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def canaries_in(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [c for c in CANARIES if c.encode() in data]


def bench(args: list[str], *, key: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if key is not None:
        env["OPENAI_API_KEY"] = key
    return subprocess.run(
        [ALFLOW, "bench", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def keyed_sim() -> object:
    with SimProcess(["--time-scale", "0"], env=dict(os.environ, VLLM_API_KEY=API_KEY)) as sim:
        yield sim


def test_the_sim_guards_v1_with_its_api_key_as_vllm_does(keyed_sim: SimProcess) -> None:
    base = keyed_sim.base_url
    assert status(base + "/v1/models") == 401
    assert status(base + "/v1/models", "sk-wrong") == 401
    assert status(base + "/v1/models", API_KEY) == 200
    assert status(base + "/health") == 200
    assert status(base + "/metrics") == 200


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
def test_bench_with_a_key_and_a_secret_metrics_url_leaves_no_canary(
    keyed_sim: SimProcess, tmp_path: Path, transport: str
) -> None:
    port = keyed_sim.base_url.rsplit(":", 1)[1]
    metrics = f"http://scraper:{METRICS_PASSWORD}@127.0.0.1:{port}/metrics?token={METRICS_TOKEN}&job=sim"
    out = tmp_path / "out"
    args = ["--base-url", keyed_sim.base_url, "--num-prompts", "6", "--concurrency", "3", "--isl", "32",
            "--osl", "24", "--vocab-size", "20000", "--transport", transport, "--metrics-url", metrics]  # fmt: skip
    done = bench([*args, "--out", str(out), "--json"], key=API_KEY)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["completed"] == 6  # the key went with /v1/models, /detokenize and every stream
    assert summary["spec_decode"]["stats"]["num_drafts"] > 0  # the secret metrics URL was scraped
    assert summary["spec_decode"]["metrics_url"] == f"http://***@127.0.0.1:{port}/metrics?token=***&job=sim"
    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in written} == {"records.parquet", "snapshots.json", "summary.json"}
    for path in written:
        assert canaries_in(path.read_bytes()) == [], path.name
    assert canaries_in(done.stdout + done.stderr) == []
    table = bench(args, key=API_KEY)
    assert table.returncode == 0, table.stderr[-3000:]
    assert "server AL (vllm)" in table.stdout
    assert canaries_in(table.stdout + table.stderr) == []


def test_bench_errors_name_no_secret(keyed_sim: SimProcess, tmp_path: Path) -> None:
    port = keyed_sim.base_url.rsplit(":", 1)[1]
    common = [
        "--base-url",
        keyed_sim.base_url,
        "--num-prompts",
        "2",
        "--isl",
        "16",
        "--osl",
        "8",
        "--vocab-size",
        "20000",
    ]
    no_key = bench(common, key=None)
    assert no_key.returncode == 2
    assert "wants an API key" in no_key.stderr
    wrong = bench(common, key="sk-NotTheKey-1234")
    assert wrong.returncode == 2
    assert "refused" in wrong.stderr
    assert "sk-NotTheKey-1234" not in wrong.stdout + wrong.stderr
    dead = f"http://scraper:{METRICS_PASSWORD}@127.0.0.1:1/metrics?token={METRICS_TOKEN}"
    unreachable = bench([*common, "--metrics-url", dead, "--out", str(tmp_path / "o")], key=API_KEY)
    assert unreachable.returncode == 2
    assert "cannot scrape metrics at http://***@127.0.0.1:1/metrics?token=***" in unreachable.stderr
    assert canaries_in(unreachable.stdout + unreachable.stderr) == []
    secret_base = bench(
        ["--base-url", f"http://u:{METRICS_PASSWORD}@127.0.0.1:{port}", "--num-prompts", "1"], key=None
    )
    assert secret_base.returncode == 2  # basic auth is not the sim's key
    assert canaries_in(secret_base.stdout + secret_base.stderr) == []
    for path in (tmp_path / "o").rglob("*"):
        assert canaries_in(path.read_bytes()) == [], path.name


def test_the_process_runner_passes_a_secret_by_name_and_the_run_stores_only_the_name(tmp_path: Path) -> None:
    server = server_config(
        framework="sim", model="m", host="127.0.0.1", readiness_timeout_s=30, extra_args=("--time-scale", "0")
    )
    placement = ServerPlacement(
        runner=ProcessOptions(log_dir=str(tmp_path / "logs"), secrets=("VLLM_API_KEY",))
    )
    with serving(server, placement.runner, secret_source={"VLLM_API_KEY": API_KEY}.get) as handle:
        assert (
            status(handle.base_url + "/v1/models") == 401
        )  # the server got the value from its environment ...
        assert status(handle.base_url + "/v1/models", API_KEY) == 200
        with RunWriter(
            tmp_path / "results",
            "m2",
            config={"server": server.model_dump(mode="json"), "placement": placement.model_dump(mode="json")},
        ) as writer:
            writer.update_provenance(server=dump_row(handle))
    stored = open_run(writer.dir)
    provenance = stored.manifest.model_dump(mode="json")["provenance"]["server"]["provenance"]
    assert provenance["secrets_passed"] == ["VLLM_API_KEY"]  # ... the run keeps its name ...
    assert stored.manifest.config["placement"]["runner"]["secrets"] == ["VLLM_API_KEY"]
    for path in (tmp_path / "results").rglob("*"):
        if path.is_file():
            assert canaries_in(path.read_bytes()) == [], path  # ... and never the value
    assert canaries_in(repr(handle)) == []


def test_a_runner_secret_comes_from_the_environment_else_a_prefect_secret_block(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.blocks.system import Secret

    from alflow_tasks.servers import secret_block_name, secret_value

    assert secret_block_name("ALFLOW_CANARY_API_KEY") == "alflow-canary-api-key"
    monkeypatch.delenv("ALFLOW_CANARY_API_KEY", raising=False)
    assert secret_value("ALFLOW_CANARY_API_KEY") is None  # neither: nothing is passed
    Secret(value=API_KEY).save("alflow-canary-api-key", overwrite=True)
    assert secret_value("ALFLOW_CANARY_API_KEY") == API_KEY
    monkeypatch.setenv("ALFLOW_CANARY_API_KEY", "sk-FromTheEnvironment-1")
    assert secret_value("ALFLOW_CANARY_API_KEY") == "sk-FromTheEnvironment-1"  # the environment wins
