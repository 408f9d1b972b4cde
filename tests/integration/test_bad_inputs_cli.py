"""The ``alflow`` command refuses every bad input of tests/bad_inputs.py: exit 2, one line, no traceback.

Each row runs the real command in a process of its own, with no Prefect server and a dead server URL: a row
that got past its check would fail differently (a connection error, a timeout, a different message). A sample of
the config rows runs through ``alflow run FLOW --config FILE``. Most rows run in a child forked from one process
that imported ``alflow.cli.root`` once (:mod:`tests.forked_cli`: the console script's ``main`` after its imports,
without an interpreter start of 1-2 s per row); rows that set environment variables, and a sample of the others,
run as ``python -m alflow.cli`` in a plain subprocess, as the console script does. The rows run a few at a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bad_inputs import CLI_CASES, CONFIG_CASES, CliCase, ConfigCase, expected_name, materialize
from tests.forked_cli import ForkedCli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 90.0

CONFIG_SAMPLE = (
    "m2 target_al above K+1",
    "m2 target_al NaN",
    "m2 k boolean",
    "m2 k fractional",
    "server synthetic target above K+1",
    "m1 gsm8k enabled 'false'",
    "m0 K zero in ks",
    "sweep explicit target above K+1 for the smallest K",
    "duplicate nested key",
    "binary file",
    "UTF-16 file",
    "Latin-1 file",
    "YAML syntax error",
    "a list, not a mapping",
    "empty file",
)
"""Config rows also run through the command (every row is loaded in tests/unit/test_bad_inputs.py
by the same ``load_params`` the command calls; these check the path to one line and exit 2)."""
CONFIG_ROWS = [c for c in CONFIG_CASES if c.name in CONFIG_SAMPLE]
PLAIN_EVERY = 12
"""Every 12th command-line row (and every row with an environment of its own) runs as a plain subprocess."""


@dataclass(frozen=True)
class Outcome:
    """What one row's command did."""

    returncode: int
    stdout: str
    stderr: str
    names: str


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "80"  # a narrow terminal must not wrap the one line
    env.update(extra)
    return env


def _run(
    argv: list[str], env: dict[str, str], cwd: Path, forked: ForkedCli | None
) -> subprocess.CompletedProcess[str]:
    if forked is not None:
        return forked.run(argv, _env(env), cwd, TIMEOUT_S)
    return subprocess.run(
        [sys.executable, "-m", "alflow.cli", *argv],
        capture_output=True,
        text=True,
        env=_env(env),
        cwd=cwd,
        timeout=TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _cli_row(case: CliCase, tmp: Path, forked: ForkedCli | None) -> Outcome:
    argv, env = materialize(case, tmp)
    done = _run(argv, env, ROOT, None if env else forked)  # Prefect reads its settings at import: own process
    return Outcome(done.returncode, done.stdout, done.stderr, expected_name(case, tmp))


def _config_row(case: ConfigCase, tmp: Path, forked: ForkedCli | None) -> Outcome:
    path = tmp / "config.yaml"
    path.write_bytes(case.content)
    done = _run(["run", case.flow, "--config", str(path)], {}, ROOT, forked)
    return Outcome(done.returncode, done.stdout, done.stderr, str(path))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every row's outcome, run four at a time."""
    jobs = {}
    with ForkedCli(_env({})) as forked, ThreadPoolExecutor(max_workers=4) as pool:
        for i, cli_case in enumerate(CLI_CASES):
            way = None if i % PLAIN_EVERY == 0 else forked
            jobs["cli:" + cli_case.name] = pool.submit(
                _cli_row, cli_case, tmp_path_factory.mktemp(f"cli{i}"), way
            )
        for i, config_case in enumerate(CONFIG_ROWS):
            way = None if i % PLAIN_EVERY == 0 else forked
            jobs["config:" + config_case.name] = pool.submit(
                _config_row, config_case, tmp_path_factory.mktemp(f"config{i}"), way
            )
        yield {name: job.result() for name, job in jobs.items()}


def _check(outcome: Outcome, fragment: str) -> None:
    lines = outcome.stderr.splitlines()
    shown = f"exit {outcome.returncode}\nstderr:\n{outcome.stderr}\nstdout:\n{outcome.stdout[-2000:]}"
    assert "Traceback" not in outcome.stderr + outcome.stdout, shown
    assert outcome.returncode == 2, shown
    assert len(lines) == 1, shown
    assert lines[0].startswith("error: "), shown
    assert outcome.names in lines[0], f"the line does not name {outcome.names!r}\n{shown}"
    assert fragment in lines[0], f"{fragment!r} missing\n{shown}"


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.name)
def test_bad_command_line_is_one_line_and_exit_2(case: CliCase, outcomes: dict[str, Outcome]) -> None:
    _check(outcomes["cli:" + case.name], case.fragment)


def test_the_config_sample_names_real_rows() -> None:
    assert len(CONFIG_ROWS) == len(CONFIG_SAMPLE)


@pytest.mark.parametrize("case", CONFIG_ROWS, ids=lambda c: c.name)
def test_bad_config_file_is_one_line_and_exit_2(case: ConfigCase, outcomes: dict[str, Outcome]) -> None:
    _check(outcomes["config:" + case.name], case.fragment)
