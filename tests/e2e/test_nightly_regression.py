"""Issue #33's acceptance: a nightly K sweep on the sim whose image got slower is marked regressed at every point,
and a real ``prefect server``'s automation notifies once per regressed point.

On the session's ``prefect server`` (PostgreSQL, tests/e2e/conftest.py) the README's team setup applies the
shipped automation (``deployments/automations.yaml``) with a webhook receiver of this process as its URL
(:func:`tests.e2e.automation_support.readme_automation`, which deletes the automation and its block before and
after).
``alflow results serve`` watches the results root meanwhile.

Then four or more nightlies run, one after another, as ``alflow run sweep --config`` against the server (the
``sweep-nightly`` deployment's short form, preset ``sim``, made small: K = 1, 2, concurrencies 2 and 4, M1 on 16
coding prompts, M2 on 8 prompts per concurrency of 32 in / 48 out tokens, the load in 2 client processes), all in
one results root: three of ``alflow-sim:nightly-1`` (the history; the first two have too little of it, the
third is a control that must come out ``unchanged``; up to two more when the loaded machine made a point
client-bound, which is ``not compared`` and no history), then one of ``alflow-sim:nightly-2``: the same image
repository, so the same series, whose engine steps take 50% longer (``--time-scale`` 0.375 instead of 0.25).

Checked: every M2 child of the slow nightly stores ``regression.json`` with every point ``regressed`` on TPOT
(about +50%), the nightly-1 runs never ``regressed``; the sweep's own run gathers its children's verdicts, each
naming its child; the receiver gets exactly one POST per regressed (K, concurrency), naming the framework, the
image, the model, K, the concurrency, the child's flow run and run directory, and nothing more; the site's
``/api/trends`` shows those points ``regressed`` (the nightly-1 points not) and its index lists every run. No
process a nightly started outlives it, the site stops cleanly, and the automation and its block are deleted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from alflow.config.presets import load_preset, sweep_params
from tests.e2e.automation_support import automations, readme_automation
from tests.e2e.prefect_support import ROOT
from tests.e2e.site_support import ALFLOW, serve_results

pytestmark = [pytest.mark.services, pytest.mark.timing, pytest.mark.alone]

KS = (1, 2)
CONCURRENCIES = (2, 4)
POINTS = {(k, c) for k in KS for c in CONCURRENCIES}
MODEL = "demo-llama-70b"
"""The sim preset's model."""
BASE = ("nightly-1", "0.25")
SLOW = ("nightly-2", "0.375")  # every engine step 50% longer: TPOT up ~50%, tokens/s per request down ~33%
BASELINES = 3
"""nightly-1 runs before the slow one: 2 make the history (min_history), the third is a control."""
MAX_BASELINES = 5
"""A point the loaded CI machine made client-bound is ``not compared`` and no history (the product's rule): up to
this many nightly-1 runs, until every point has had its control (``unchanged``)."""
NOTIFIED_WITHIN_S = 180.0
"""The POSTs arrive within this of the slow nightly's end (a second or two when the machine is not busy; a CI run with
every tier at once once took over 60 s for one of four)."""
QUIET_S = 5.0
"""How long after the last expected POST nothing more may arrive."""
SWEEP_TIMEOUT_S = 300.0
"""One nightly takes about 16 s on 2 cores (the whole test about 80 s, alone)."""
MARK = "ALFLOW_E2E_NIGHTLY_MARK"
"""A variable every process a nightly starts inherits (servers, guards, load clients): none may outlive it."""


def _nightly_config(tmp_path: Path, root: Path, tag: str, scale: str, n: int) -> Path:
    """The ``sweep-nightly`` deployment's short form (preset sim), made small, for image ``alflow-sim:<tag>``."""
    params: dict[str, Any] = sweep_params(
        preset=load_preset("sim", ROOT), ks=KS, concurrencies=CONCURRENCIES
    ).model_dump(mode="json")
    for part in ("gate", "benchmark"):
        params[part]["placement"]["results_root"] = str(root)
        # the nightly image, M1's server and M2's alike: its timing is what changed between the nightlies
        params[part]["server"]["image"] = f"alflow-sim:{tag}"
        params[part]["server"]["extra_args"] = ["--seed", "3"]  # the arguments are part of the series
        params[part]["server"]["extra_env"] = {"ALFLOW_SIM_TIME_SCALE": scale}  # a slower image: its speed
    params["gate"]["workload"].update(limit=16, max_tokens=128)
    params["benchmark"].update(
        prompts_per_concurrency=8,
        warmup_per_concurrency=1,
        preflight=False,
        # the load in its own processes: on 2 cores a point driven from the flow's process is often client-bound,
        # and a client-bound point is "not compared"
        client_processes=2,
    )
    params["benchmark"]["workload"].update(isl=32, osl=48)
    # machine noise on 2 shared cores stays well under 10%; the slow tag is 50% slower
    params["benchmark"]["regression"].update(history_runs=3, min_history=2, threshold=0.10, resamples=500)
    path = tmp_path / f"nightly-{n}-{tag}.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


def _marked() -> list[tuple[int, str]]:
    """(pid, command) of every live process whose environment holds :data:`MARK`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[:1]
        except OSError:
            continue
        if f"{MARK}=".encode() in environ and state != ["Z"]:
            found.append((int(proc.name), cmd[:200]))
    return found


def _run_nightly(env: dict[str, str], config: Path, log: Path) -> dict[str, Any]:
    """``alflow run sweep --config CONFIG --json`` against the server; its result (the run must complete)."""
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [ALFLOW, "run", "sweep", "--config", str(config), "--json"],
            env={**env, MARK: config.stem},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=SWEEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
            pytest.fail(f"{config.stem} hung for {SWEEP_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")
    assert proc.returncode == 0, f"{config.stem} failed:\n{log.read_text()[-4000:]}"
    result: dict[str, Any] = json.loads(out)
    assert {k: (o["gate"], o["benchmark"]) for k, o in result["per_k"].items()} == {
        str(k): ("passed", "passed") for k in KS
    }, result["per_k"]
    return result


def _regression(run_dir: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(run_dir) / "regression.json").read_text())
    return data


def _children(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """K -> the nightly's M2 child (its ``run_dir`` and ``flow_run_id``)."""
    return {int(k): o["benchmark_run"] for k, o in result["per_k"].items()}


def _trend_verdicts(site: str) -> dict[tuple[int, int], dict[str, str | None]]:
    """(K, concurrency) -> {run rel: verdict} of the site's trend lines (``/api/trends``)."""
    data = httpx.get(f"{site}/api/trends", params={"model": MODEL}, timeout=30).raise_for_status().json()
    out: dict[tuple[int, int], dict[str, str | None]] = {}
    for line in data["series"]:
        key = line["key"]
        assert (key["framework"], key["image"], key["model"]) == ("sim", "alflow-sim", MODEL), key
        out[(key["k"], key["concurrency"])] = {p["rel"]: p["verdict"] for p in line["points"]}
    return out


def _every_point_controlled(nightlies: list[dict[str, Any]]) -> bool:
    """Whether every (K, concurrency) came out ``unchanged`` in one of ``nightlies`` (a control after its history)."""
    seen = {
        (k, p["concurrency"])
        for nightly in nightlies
        for k, child in _children(nightly).items()
        for p in _regression(child["run_dir"])["points"]
        if p["outcome"] == "unchanged"
    }
    return seen == POINTS


def _rel(run_dir: str) -> str:
    return "/".join(Path(run_dir).parts[-2:])


def test_a_slower_nightly_image_regresses_at_every_point_and_the_automation_notifies_once_each(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    root = tmp_path / "results"
    root.mkdir()
    with serve_results(root, prefect_server, tmp_path / "site.log") as site:
        with readme_automation(prefect_server, tmp_path) as (receiver, env):
            assert len(automations(env)) == 1
            applied = time.monotonic()

            nightlies = []
            while len(nightlies) < BASELINES or (
                len(nightlies) < MAX_BASELINES and not _every_point_controlled(nightlies)
            ):
                n = len(nightlies)
                nightlies.append(
                    _run_nightly(env, _nightly_config(tmp_path, root, *BASE, n), tmp_path / f"n{n}.log")
                )
            n = len(nightlies)
            nightlies.append(
                _run_nightly(env, _nightly_config(tmp_path, root, *SLOW, n), tmp_path / f"n{n}.log")
            )
            ran = time.monotonic()
            assert receiver.wait(len(POINTS), NOTIFIED_WITHIN_S), (
                f"{len(receiver.requests)} POST(s) within {NOTIFIED_WITHIN_S:.0f} s of the slow nightly's end"
            )
            notified = time.monotonic()
            time.sleep(QUIET_S)
            posts = list(receiver.requests)
        assert automations(prefect_server) == []

        # no process of a nightly outlives it (a server's guard may take a moment to exit)
        deadline = time.monotonic() + 15
        while _marked() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _marked(), f"processes left behind by the nightlies: {_marked()}"

        # the verdicts each run stored: nightly-1 never regressed; each point is "not enough history" until two good
        # runs precede it, then "unchanged" (a control); a point the machine made client-bound is "not compared"
        *baselines, slow = nightlies
        good = dict.fromkeys(POINTS, 0)
        for n, nightly in enumerate(baselines):
            for k, child in _children(nightly).items():
                points = _regression(child["run_dir"])["points"]
                assert sorted(p["concurrency"] for p in points) == list(CONCURRENCIES), points
                for p in points:
                    point, what = (k, p["concurrency"]), (n, k, p["concurrency"], p["message"])
                    if p["outcome"] == "not compared":
                        assert "the load generator was the bottleneck" in p["message"], what
                        continue
                    assert p["outcome"] == ("not enough history" if good[point] < 2 else "unchanged"), what
                    good[point] += 1
        assert _every_point_controlled(baselines), good
        slow_children = _children(slow)
        for k, child in slow_children.items():
            report = _regression(child["run_dir"])
            assert report["kind"] == "m2"
            assert sorted(p["concurrency"] for p in report["points"]) == list(CONCURRENCIES)
            for p in report["points"]:
                assert (p["outcome"], p["k"]) == ("regressed", k), p["message"]
                assert p["series"]["image"] == "alflow-sim"  # the new tag continues the series
                assert len(p["history"]) == min(BASELINES, good[(k, p["concurrency"])])  # history_runs=3
                [tpot] = [m for m in p["metrics"] if m["metric"] == "tpot_ms"]
                assert tpot["outcome"] == "regressed", tpot
                assert 0.10 < tpot["low"] <= tpot["change"] < 0.8, tpot  # about +50%
        gathered = _regression(slow["run_dir"])
        assert gathered["kind"] == "sweep"
        assert sorted(
            (p["k"], p["concurrency"], p["outcome"], p["run"]) for p in gathered["points"]
        ) == sorted((k, c, "regressed", _rel(slow_children[k]["run_dir"])) for k, c in POINTS)

        # one notification per regressed point, each naming the point and the run that measured it
        assert len(posts) == len(POINTS), [r[3][:300] for r in posts]
        seen: dict[tuple[int, int], list[str]] = {}
        for method, path, headers, body in posts:
            assert (method, path, headers.get("Content-Type")) == ("POST", "/alflow-hook", "application/json")
            subject, _, text = json.loads(body)["text"].partition("\n\n")
            lines = text.splitlines()
            fields = dict(line.split(": ", 1) for line in lines if ": " in line)
            point = (int(fields["K"]), int(fields["concurrency"]))
            assert subject == f"alflow regressed: `sim` `{MODEL}` K={point[0]} concurrency={point[1]}", (
                subject
            )
            assert lines[0].startswith("tpot_ms regressed: change +"), text
            assert (fields["framework"], fields["image"], fields["model"], fields["thinking"]) == (
                "`sim`",  # each string from the run as a chat's inline code (alflow/util/chat.py)
                f"`alflow-sim:{SLOW[0]}`",  # the series' repository and the tag that regressed
                f"`{MODEL}`",
                "`on`",
            ), text
            child = slow_children[point[0]]
            assert fields["run directory"] == f"`{child['run_dir']}`", text
            assert child["flow_run_id"] in fields["flow run"], text  # the M2 child's run, its UI link
            seen.setdefault(point, []).append(text)
        assert sorted(seen) == sorted(POINTS), seen
        assert all(len(texts) == 1 for texts in seen.values()), seen

        # the results site: the trend lines mark the slow nightly's points, its index lists every run
        deadline = time.monotonic() + 30
        while True:
            trends = _trend_verdicts(site)
            if (
                all(
                    trends.get(point, {}).get(_rel(slow_children[point[0]]["run_dir"])) == "regressed"
                    for point in POINTS
                )
                or time.monotonic() > deadline
            ):
                break
            time.sleep(0.5)
        assert sorted(trends) == sorted(POINTS), trends
        for (k, c), verdicts in trends.items():
            assert len(verdicts) == len(nightlies), verdicts
            slow_rel = _rel(slow_children[k]["run_dir"])
            assert verdicts.pop(slow_rel) == "regressed", ((k, c), slow_rel, trends)
            assert "regressed" not in verdicts.values(), ((k, c), verdicts)
        runs = {
            f"{flow.name}/{run.name}" for flow in root.iterdir() if flow.is_dir() for run in flow.iterdir()
        }
        assert len(runs) == len(nightlies) * (2 * len(KS) + 1)  # M1 and M2 per K, the sweep's own run
        index = httpx.get(f"{site}/api/runs", timeout=30).raise_for_status().json()
        rows = {r["rel"]: r for r in index["rows"]}
        assert set(rows) == runs, (sorted(rows), sorted(runs))
        assert rows[_rel(slow["run_dir"])]["verdict"] == "regressed"
        assert {rows[_rel(c["run_dir"])]["image_tag"] for c in slow_children.values()} == {SLOW[0]}
        page = httpx.get(f"{site}/", timeout=30).raise_for_status().text
        for rel in (_rel(slow["run_dir"]), *(_rel(c["run_dir"]) for c in slow_children.values())):
            assert f"/runs/{rel}/" in page, rel
    print(
        f"setup {applied - started:.1f} s, {len(nightlies)} nightlies {ran - applied:.1f} s, POSTs "
        f"{notified - ran:.1f} s after the last ended; {time.monotonic() - started:.0f} s in all"
    )
