"""The reference-AL workflow's M0 command lines, run locally against the sim recipe (K = 1..2).

Same inputs as the dispatch defaults (first catalogue model, thinking on and off), with the sim in
place of vLLM; the new table must agree with the audit of its stored scrapes, and a tampered value
must make the audit fail, naming the entry. Two M0 runs started together on one table must both
land in it (the table is merged under its lock file, not overwritten by the last writer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
ALFLOW = str(Path(sys.executable).parent / "alflow")
DEFAULT_MODEL = "Qwen/Qwen3-Next-80B-A3B-Thinking"


def _alflow(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ALFLOW, *args], capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=ROOT
    )


def _env(prefect_home: Path) -> dict[str, str]:
    """A local run: Prefect's own temporary server with its database under ``prefect_home``."""
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return env


def _m0_config(
    tmp_path: Path, reference: Path, *, ks: str, thinking: str, tag: str, env: dict[str, str]
) -> Path:
    config = tmp_path / f"m0-config{tag}.yaml"
    made = _alflow(
        "reference", "m0-config", "--models", DEFAULT_MODEL, "--ks", ks, "--thinking", thinking,
        "--framework", "sim", "--runner", "process", "--reference", str(reference),
        "--results-root", str(tmp_path / f"results{tag}"), "--extra-arg=--time-scale", "--extra-arg=0",
        "--out", str(config),
        env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return config


def test_m0_command_line_table_and_audit_agree(tmp_path: Path) -> None:
    env = _env(tmp_path / "prefect")
    reference = tmp_path / "speed-bench-coding.yaml"
    config = _m0_config(tmp_path, reference, ks="1,2", thinking="on,off", tag="", env=env)
    ran = _alflow("run", "m0", "--config", str(config), env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    table = yaml.safe_load(reference.read_text())
    assert table["kind"] == "simulated"
    assert {(e["thinking"], e["k"]) for e in table["entries"]} == {
        ("on", 1),
        ("on", 2),
        ("off", 1),
        ("off", 2),
    }

    run_dirs = [str(d) for d in sorted((tmp_path / "results" / "m0").iterdir())]
    audit = _alflow("reference", "audit", str(reference), *run_dirs, "--json", env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["ok"]
    assert [r["status"] for r in report["rows"]] == ["ok"] * 4

    entry = table["entries"][2]
    name = f"{entry['model']} {entry['method']} thinking={entry['thinking']} K={entry['k']}"

    # one value edited: the table no longer loads, and the error names the entry
    edited = yaml.safe_load(reference.read_text())
    edited["entries"][2]["al"] = round(edited["entries"][2]["al"] + 0.01, 6)
    one = tmp_path / "one-value.yaml"
    one.write_text(yaml.safe_dump(edited, sort_keys=False))
    bad = _alflow("reference", "audit", str(one), *run_dirs, env=env)
    assert bad.returncode == 2
    assert "entries[2]" in bad.stderr
    assert f"({entry['model']} {entry['method']} thinking={entry['thinking']} K={entry['k']})" in bad.stderr

    # a consistent forgery (AL, counts and rates moved together): only the raw scrapes expose it
    forged = yaml.safe_load(reference.read_text())
    e = forged["entries"][2]
    e["accepted_tokens"] += 7
    e["al"] = 1 + e["accepted_tokens"] / e["num_drafts"]
    e["per_position_rates"][0] += 7 / e["num_drafts"]
    e.pop("ci_low")
    e.pop("ci_high")
    forged_path = tmp_path / "forged.yaml"
    forged_path.write_text(yaml.safe_dump(forged, sort_keys=False))
    audited = _alflow("reference", "audit", str(forged_path), *run_dirs, "--json", env=env)
    assert audited.returncode == 1, audited.stdout + audited.stderr
    rows = json.loads(audited.stdout)["rows"]
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(failed) == 1
    # the entry is named with its drafter variant (reference schema 2)
    assert failed[0]["entry"] == (
        f"{name} [draft=self draft_sample={e['draft_sample_method']} rejection_sample={e['rejection_sample_method']} "
        f"concurrency={e['concurrency']} prefix_caching={'on' if e['prefix_caching'] else 'off'}]"
    )
    problems = " ".join(failed[0]["problems"])
    assert "accepted_tokens" in problems
    assert "al " in problems


def test_two_m0_runs_started_together_keep_both_entry_sets(tmp_path: Path) -> None:
    """Two `alflow run m0` processes (K=1 and K=2) writing one table at the same time: both land."""
    reference = tmp_path / "speed-bench-coding.yaml"
    runs = []
    for k in (1, 2):
        env = _env(tmp_path / f"prefect-{k}")  # one temporary Prefect server (and database) each
        config = _m0_config(tmp_path, reference, ks=str(k), thinking="off", tag=f"-{k}", env=env)
        runs.append((config, env))
    procs = [
        subprocess.Popen(
            [ALFLOW, "run", "m0", "--config", str(config), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for config, env in runs
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:] + err[-3000:]
    table = yaml.safe_load(reference.read_text())
    assert {(e["thinking"], e["k"]) for e in table["entries"]} == {("off", 1), ("off", 2)}
    # each run reported exactly its own entries; the table holds both, as measured
    by_k = {e["k"]: e["al"] for e in table["entries"]}
    for k, (out, _) in zip((1, 2), outputs, strict=True):
        rows = json.loads(out)["entries"]
        assert [(r["k"], r["al"]) for r in rows] == [(k, round(by_k[k], 4))]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("speed-bench")) == [
        "speed-bench-coding.yaml",
        "speed-bench-coding.yaml.lock",
    ]
