"""alflow's regression notification on a real ``prefect server`` (PostgreSQL): ``deployments/automations.yaml``.

A webhook receiver runs in this process (``http.server`` on 127.0.0.1, port 0). The team setup lines of docs/running/regression.md
(:data:`tests.e2e.automation_support.README_AUTOMATION_LINES`) run through bash as written, from a scratch directory, with
``ALFLOW_WEBHOOK_URL`` pointing at the receiver: ``python -m alflow_deployments.webhook`` saves the Custom Webhook block
and fills its id into the automations file, and ``prefect automation create --from-file`` (Prefect's own CLI)
creates the automation. Then a real flow run (:func:`probe_regression`, in a subprocess against the server) emits
first ``alflow.regression.checked`` (another event, same resource, labels and payload: it must not notify), then
``alflow.regression.detected`` as ``tasks/regression.py`` emits it for each of two regressed M2 points (concurrency
16 and 4). The receiver must get one POST per regressed point, within :data:`NOTIFIED_WITHIN_S`, whose text names
the framework, image, model, K, the point's concurrency, each metric's change and its interval, and the flow run
(its name and UI link, read from the API by the server); nothing more arrives in the :data:`QUIET_S` after them.
The automation and the block are deleted at the end with Prefect's CLI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.events import emit_event
from prefect.runtime import flow_run

from alflow.results.regression import MetricChange, PointVerdict
from alflow_tasks.regression import REGRESSION_EVENT, alert_event
from tests.e2e.automation_support import (
    AUTOMATION_PAGE,
    README_AUTOMATION_LINES,
    automations,
    readme_automation,
)
from tests.e2e.prefect_support import ROOT, api

pytestmark = pytest.mark.services

NOTIFIED_WITHIN_S = 60.0
"""The POST arrives within this of the flow run's end (a second or two when the server is not busy)."""
QUIET_S = 5.0
"""How long after the POST nothing more may arrive (the unrelated event was emitted before the regression)."""

SERIES: dict[str, str | int] = {
    "framework": "vllm",
    "image": "vllm/vllm-openai",
    "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "k": 3,
    "concurrency": 16,
    "thinking": "off",
}
POINT = PointVerdict(
    series=SERIES,
    concurrency=16,
    k=3,
    outcome="regressed",
    metrics=[
        MetricChange(
            metric="tpot_ms",
            current=11.2,
            baseline=10.0,
            change=0.12,
            low=0.08,
            high=0.16,
            outcome="regressed",
        ),
        MetricChange(metric="achieved_al", current=2.7, baseline=2.71, change=None, outcome="unchanged"),
    ],
    history=["m2/20260101-000000-a", "m2/20260102-000000-b"],
    message="regressed against 2 run(s): tpot_ms +12.0% [+8.0%, +16.0%]",
)
"""A regressed M2 point, as alflow's regression check judges one (alflow.results.regression)."""
POINTS = (POINT, POINT.model_copy(update={"concurrency": 4, "series": {**SERIES, "concurrency": 4}}))
"""Two regressed points of one run: one notification each."""
RUN_DIR = "results/m2/20260103-000000-probe"


@flow(name="alflow-regression-probe")
def probe_regression() -> str:
    """Emit an unrelated alflow event, then alflow's event for each of :data:`POINTS`, on this flow run; its id.

    The event is the one ``alflow_tasks.regression`` emits for a regressed point (its resource and payload from
    :func:`alflow_tasks.regression.alert_event`), so the test follows the real event's shape.
    """
    run_id = flow_run.get_id()
    assert run_id is not None
    events = [
        alert_event(p, flow_run_id=str(run_id), flow="m2", run_dir=RUN_DIR, image_tag="v0.20.0")
        for p in POINTS
    ]
    resource, payload = events[0]
    emit_event(event="alflow.regression.checked", resource=resource, payload=payload)
    for resource, payload in events:
        emit_event(event=REGRESSION_EVENT, resource=resource, payload=payload)
    return str(run_id)


def _action_events(env: dict[str, str]) -> list[dict[str, Any]]:
    """The server's ``prefect.automation.*`` events (what the automation did), for failure messages."""
    body = {"filter": {"event": {"prefix": ["prefect.automation."]}}, "limit": 50}
    page = asyncio.run(api(env, "POST", "/events/filter", body))
    return [{"event": e["event"], "payload": e.get("payload")} for e in page["events"]]


def test_a_regression_event_notifies_through_the_webhook_block(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    with readme_automation(prefect_server, tmp_path) as (receiver, env):
        applied = time.monotonic()

        [automation] = automations(env)
        block = asyncio.run(
            api(env, "GET", "/block_types/slug/custom-webhook/block_documents/name/alflow-regression")
        )
        assert block["data"]["url"] == "{{webhook_url}}", block["data"]  # the URL is among its secrets,
        assert receiver.url not in json.dumps(block), block  # which the API shows obfuscated
        assert automation["enabled"], automation
        assert automation["trigger"]["expect"] == ["alflow.regression.detected"], automation["trigger"]
        assert automation["trigger"]["posture"] == "Reactive", automation["trigger"]
        [action] = automation["actions"]
        assert (action["type"], action["block_document_id"]) == ("send-notification", block["id"]), action

        probe = subprocess.run(
            [sys.executable, "-c", "from tests.e2e.test_regression_automation import probe_regression as p; print(p())"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-3000:]
        run_id = probe.stdout.strip().splitlines()[-1]
        emitted = time.monotonic()
        run = asyncio.run(api(env, "GET", f"/flow_runs/{run_id}"))
        assert run["state_type"] == "COMPLETED", run["state"]

        assert receiver.wait(len(POINTS), NOTIFIED_WITHIN_S), (
            f"{len(receiver.requests)} POST(s) within {NOTIFIED_WITHIN_S:.0f} s; the server's automation "
            f"events: {json.dumps(_action_events(env))[:3000]}"
        )
        notified = time.monotonic()
        time.sleep(QUIET_S)
        assert len(receiver.requests) == len(POINTS), [r[3][:500] for r in receiver.requests]
        texts = {}
        for method, path, headers, body in receiver.requests:
            assert (method, path) == ("POST", "/alflow-hook")
            assert headers.get("Content-Type") == "application/json", headers
            text = json.loads(body)["text"]
            texts[text.partition("\n\n")[0]] = text
        head = "alflow regressed: `vllm` `Qwen/Qwen3-Next-80B-A3B-Instruct` K=3 concurrency="
        assert sorted(texts) == [f"{head}16", f"{head}4"], texts
        for concurrency in (16, 4):
            text = texts[f"{head}{concurrency}"]
            lines = text.partition("\n\n")[2].splitlines()
            assert lines[:8] == [
                "tpot_ms regressed: change +12.0% (interval +8.0% to +16.0%), median 10.0 -> 11.2",
                "achieved_al unchanged: change n/a (interval n/a), median 2.71 -> 2.7",
                "framework: `vllm`",
                "image: `vllm/vllm-openai:v0.20.0`",
                "model: `Qwen/Qwen3-Next-80B-A3B-Instruct`",
                "thinking: `off`",
                "K: 3",
                f"concurrency: {concurrency}",
            ], text
            assert lines[8].startswith(f"flow run: `{run['name']}` "), text  # read from the API by the server
            assert run_id in lines[8], text  # its UI link
            assert lines[9:] == [f"run directory: `{RUN_DIR}`", f"`{POINT.message}`"], text
    assert automations(prefect_server) == []
    print(
        f"setup {applied - started:.1f} s, flow run {emitted - applied:.1f} s, POSTs {notified - emitted:.1f} s after "
        f"the run ended; {time.monotonic() - started:.0f} s in all; {lines[8]}"
    )


def test_the_readme_team_setup_has_these_lines() -> None:
    """The docs' team setup holds :data:`README_AUTOMATION_LINES` exactly (the test above runs them as written)."""
    page = AUTOMATION_PAGE.read_text(encoding="utf-8")
    missing = [line for line in README_AUTOMATION_LINES if line not in page]
    assert not missing, f"{AUTOMATION_PAGE.relative_to(ROOT)} lacks the team setup lines {missing}"
