"""No credential reaches Prefect: canaries through real runs, then Prefect's database searched (issue #35).

Everything runs as a user would, in subprocesses sharing one ``PREFECT_HOME`` (Prefect's temporary server,
SQLite): configs with credentials in URLs (``results_root``, an external server's ``base_url`` with
``user:pass@`` and ``?api_key=``, a metrics URL, an ``extra_env`` proxy URL with a password) are refused by
``alflow run m2`` in one line, exit 2; a real M2 run on the sim passes a secret by name (the runner's
``secrets``, its value a canary in the environment, as is ``HF_TOKEN``); a probe flow logs URLs with
credentials, fails tasks (one whose retry ``alflow_tasks.retry.retry_transient`` declines) and itself with
exceptions quoting them, and fails a gate through :func:`alflow_flows.common.gate_failure` (an event). Afterwards no canary
is in Prefect's database (an SQL dump and the raw files), anywhere under ``PREFECT_HOME``, in the run store,
in the temporary files, or in anything the commands printed.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from alflow.results.store import open_run

pytestmark = pytest.mark.integration

ALFLOW = str(Path(sys.executable).with_name("alflow"))
_ID = uuid.uuid4().hex[:8]

ALLOWED = {
    "runner secret by name": f"CanaryRunnerSecret-{_ID}",
    "HF_TOKEN in the environment": f"hf_CanaryEnv{_ID}",
}
"""Secrets given where they are allowed: by environment variable name, their values only in the environment."""
REFUSED = {
    "results_root password": f"CanaryRootPw-{_ID}",
    "base_url password": f"CanaryBasePw-{_ID}",
    "base_url api_key": f"CanaryApiKey-{_ID}",
    "metrics_url password": f"CanaryMetricsPw-{_ID}",
    "extra_env proxy password": f"CanaryProxyPw-{_ID}",
}
"""Secrets put in config URLs: each config is refused."""
PROBED = {
    "log line password": f"CanaryLogPw-{_ID}",
    "log line token": f"CanaryLogTok-{_ID}",
    "task error password": f"CanaryTaskPw-{_ID}",
    "declined retry signature": f"CanaryDeclinedSig-{_ID}",
    "gate event password": f"CanaryEventPw-{_ID}",
    "flow error password": f"CanaryFlowPw-{_ID}",
}
"""Secrets the probe flow hands Prefect's logger and states (the defence behind the refusals)."""
CANARIES = {**ALLOWED, **REFUSED, **PROBED}

PROBE = """
import os

from alflow.cli.run import prepare_local_run

prepare_local_run()

from prefect import flow, get_run_logger, task

from alflow.errors import InvalidInputError
from alflow_flows.common import gate_failure
from alflow_tasks.retry import retry_transient


@task
def unreachable() -> None:
    url = os.environ["PROBE_TASK_URL"]
    get_run_logger().info("task scraping %s", url)
    raise ConnectionError(f"cannot reach {url}")


@task(retries=2, retry_delay_seconds=0, retry_condition_fn=retry_transient)
def declined() -> None:
    raise InvalidInputError(f"the server refused {os.environ['PROBE_DECLINED_URL']}")


@flow(name="url-secrets-probe")
def probe() -> None:
    get_run_logger().warning("scraping %s", os.environ["PROBE_LOG_URL"])
    unreachable(return_state=True)
    declined(return_state=True)
    gate_failure("url-secrets-probe", f"gate failed at {os.environ['PROBE_EVENT_URL']}", {"url": os.environ["PROBE_EVENT_URL"]})
    raise RuntimeError(f"probe failed at {os.environ['PROBE_FLOW_URL']}")


state = probe(return_state=True)
print("STATE", state.type.value, state.message, flush=True)
"""


@dataclass(frozen=True)
class Ran:
    """One command's exit code and output."""

    name: str
    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in (self.stdout + self.stderr).splitlines() if line.startswith("error:")]


def _m2(tmp_path: Path) -> dict[str, Any]:
    return {
        "model": {"id": "sim/llama-3.3-70b"},
        "k": 3,
        "target_al": 2.5,
        "server": {
            "framework": "sim",
            "model": "sim/llama-3.3-70b",
            "readiness_timeout_s": 60,
            "extra_args": ["--time-scale", "0", "--seed", "5"],
        },
        "placement": {
            "runner": {"kind": "process", "secrets": ["ALFLOW_CANARY_TOKEN"]},
            "results_root": str(tmp_path / "work" / "results"),
        },
        "workload": {"kind": "random", "isl": 64, "osl": 32},
        "concurrencies": [2],
        "prompts_per_concurrency": 2,
        "warmup_per_concurrency": 0,
    }


def _refused_configs(tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Name -> (the M2 config with credentials in a URL, the field the error line must name)."""
    base = _m2(tmp_path)
    external = {"kind": "external", "dialect": "vllm"}
    changes: dict[str, tuple[str, Any, str]] = {
        "results_root": (
            "placement.results_root",
            f"s3://AKIAEXAMPLE:{REFUSED['results_root password']}@bucket/runs",
            "placement.results_root",
        ),
        "base_url": (
            "placement.runner",
            external
            | {
                "base_url": f"http://u:{REFUSED['base_url password']}@127.0.0.1:9/?api_key={REFUSED['base_url api_key']}"
            },
            "placement.runner.external.base_url",
        ),
        "metrics_url": (
            "placement.runner",
            external
            | {
                "base_url": "http://127.0.0.1:9",
                "metrics_url": f"http://scraper:{REFUSED['metrics_url password']}@127.0.0.1:9/metrics",
            },
            "placement.runner.external.metrics_url",
        ),
        "extra_env": (
            "server.extra_env",
            {"HTTPS_PROXY": f"http://me:{REFUSED['extra_env proxy password']}@proxy:3128"},
            "server.sim.extra_env",
        ),
    }
    configs = {}
    for name, (dotted, value, field) in changes.items():
        config = copy.deepcopy(base)
        parent, last = dotted.rsplit(".", 1)
        config[parent.split(".")[0]][last] = value
        configs[name] = (config, field)
    return configs


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        ALFLOW_STATE_DIR=str(tmp_path / "state"),
        TMPDIR=str(tmp_path / "tmp"),
        COLUMNS="200",
        HF_TOKEN=ALLOWED["HF_TOKEN in the environment"],
        ALFLOW_CANARY_TOKEN=ALLOWED["runner secret by name"],
        PROBE_LOG_URL=(
            f"http://scraper:{PROBED['log line password']}@127.0.0.1:9/metrics?token={PROBED['log line token']}"
        ),
        PROBE_TASK_URL=f"http://u:{PROBED['task error password']}@127.0.0.1:9/v1",
        PROBE_DECLINED_URL=f"https://h/x?X-Amz-Signature={PROBED['declined retry signature']}",
        PROBE_EVENT_URL=f"http://u:{PROBED['gate event password']}@127.0.0.1:9/v1",
        PROBE_FLOW_URL=f"s3://AKIAEXAMPLE:{PROBED['flow error password']}@bucket/x",
    )
    return env


def _run(name: str, argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> Ran:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout_s, check=False
    )
    return Ran(name, done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Ran]]:
    """Run everything once: the refused configs, the allowed M2 run, the probe flow."""
    tmp_path = tmp_path_factory.mktemp("url-secrets")
    for sub in ("input", "work", "tmp", "state", "prefect"):
        (tmp_path / sub).mkdir()
    env = _env(tmp_path)
    work = tmp_path / "work"
    ran: dict[str, Ran] = {}
    for name, (config, _) in _refused_configs(tmp_path).items():
        path = tmp_path / "input" / f"m2-{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        ran[name] = _run(name, [ALFLOW, "run", "m2", "--config", str(path)], env, work, 120)
    path = tmp_path / "input" / "m2.yaml"
    path.write_text(yaml.safe_dump(_m2(tmp_path), sort_keys=False), encoding="utf-8")
    ran["m2"] = _run("m2", [ALFLOW, "run", "m2", "--config", str(path)], env, work, 480)
    ran["probe"] = _run("probe", [sys.executable, "-c", PROBE], env, work, 300)
    return tmp_path, ran


def test_each_config_with_credentials_in_a_url_is_refused_in_one_line(
    probed: tuple[Path, dict[str, Ran]],
) -> None:
    tmp_path, ran = probed
    for name, (_, field) in _refused_configs(tmp_path).items():
        result = ran[name]
        assert result.code == 2, (name, result.stdout[-2000:], result.stderr[-2000:])
        assert len(result.error_lines) == 1, (name, result.stderr[-2000:])
        line = result.error_lines[0]
        assert f"{field}: " in line, line
        assert "credentials in a URL are refused" in line, line
        assert "by name" in line or "by environment variable name" in line, line
        assert "***" in line, line
        assert "Traceback" not in result.stderr


def test_a_secret_given_by_name_reaches_the_server_and_only_its_name_is_stored(
    probed: tuple[Path, dict[str, Ran]],
) -> None:
    tmp_path, ran = probed
    m2 = ran["m2"]
    assert m2.code == 0, (m2.stdout[-3000:], m2.stderr[-3000:])
    (run_dir,) = (tmp_path / "work" / "results" / "m2").iterdir()
    stored = open_run(run_dir)
    server = stored.manifest.model_dump(mode="json")["provenance"]["server"]["provenance"]
    assert server["secrets_passed"] == ["ALFLOW_CANARY_TOKEN"]


def test_the_probe_flow_fails_with_redacted_messages(probed: tuple[Path, dict[str, Ran]]) -> None:
    _, ran = probed
    probe = ran["probe"]
    assert probe.code == 0, (probe.stdout[-3000:], probe.stderr[-3000:])
    (state,) = [line for line in probe.stdout.splitlines() if line.startswith("STATE ")]
    assert state.startswith("STATE FAILED "), state
    assert "RuntimeError: probe failed at s3://***@bucket/x" in state, state
    printed = probe.stdout + probe.stderr
    assert (
        "task scraping http://***@127.0.0.1:9/v1" in printed
    )  # Prefect's console handler printed it redacted
    assert "ConnectionError('cannot reach http://***@127.0.0.1:9/v1')" in printed


def _database_dump(prefect_home: Path) -> str:
    (database,) = prefect_home.glob("*.db")
    connection = sqlite3.connect(database)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


def test_no_canary_in_prefects_database_the_run_store_or_the_output(
    probed: tuple[Path, dict[str, Ran]],
) -> None:
    tmp_path, ran = probed
    dump = _database_dump(tmp_path / "prefect")
    assert "url-secrets-probe" in dump  # the probe's flow run is there ...
    assert "task scraping http://***@127.0.0.1:9/v1" in dump  # ... and its logs, redacted
    assert "gate failed at http://***@127.0.0.1:9/v1" in dump  # the gate's failure (state message or event)
    hits = [f"{name} in the database dump" for name, value in CANARIES.items() if value in dump]
    for path in sorted(tmp_path.rglob("*")):
        if path.is_symlink() or not path.is_file() or (tmp_path / "input") in path.parents:
            continue
        data = path.read_bytes()
        hits += [
            f"{name} in {path.relative_to(tmp_path)}"
            for name, value in CANARIES.items()
            if value.encode() in data
        ]
    for result in ran.values():
        printed = result.stdout + result.stderr
        hits += [
            f"{name} in what {result.name} printed" for name, value in CANARIES.items() if value in printed
        ]
    assert hits == []
