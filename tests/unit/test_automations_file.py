"""``deployments/automations.yaml`` and ``deployments/webhook.py`` without a server: schema, slugs, templates.

The templates are rendered by Prefect's own server-side renderer (``render_user_template`` with Prefect's filters,
what the server's actions use) on the event ``tasks/regression.py`` emits; the e2e test
(``tests/e2e/test_regression_automation.py``) runs the whole path on a real server.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.events.schemas.automations import AutomationCore
from prefect.server.events.jinja_filters import all_filters
from prefect.server.events.schemas.automations import AutomationCore as ServerAutomationCore
from prefect.server.events.schemas.events import ReceivedEvent
from prefect.server.utilities.user_templates import register_user_template_filters, render_user_template

from alflow.results.regression import MetricChange, PointVerdict
from alflow_deployments import webhook
from alflow_tasks.regression import REGRESSION_EVENT, alert_event

pytestmark = pytest.mark.unit

SLUG = "custom-webhook/alflow-regression"


def _resolved() -> list[dict[str, Any]]:
    automations = webhook.load_automations()
    return webhook.resolve(automations, {SLUG: uuid.uuid4()})


def _render(resource: dict[str, str], payload: dict[str, Any]) -> tuple[str, str]:
    register_user_template_filters(all_filters)
    [automation] = webhook.load_automations()
    [action] = automation["actions"]
    event = ReceivedEvent(
        event=REGRESSION_EVENT,
        resource=resource,
        payload=payload,
        occurred="2026-01-01T00:00:00Z",
        id=uuid.uuid4(),
    )
    context = {"event": event, "flow_run": None}
    subject = asyncio.run(render_user_template(action["subject"], context))
    body = asyncio.run(render_user_template(action["body"], context))
    return subject, body


def test_the_file_names_its_block_by_slug_and_validates_once_resolved() -> None:
    automations = webhook.load_automations()
    assert [a["name"] for a in automations] == ["alflow-regression-notify"]
    assert webhook.block_slugs(automations) == {SLUG}
    with pytest.raises(ValueError, match="UUID"):
        AutomationCore.model_validate(automations[0])  # the file itself is not applicable: the id is missing
    [resolved] = _resolved()
    client = AutomationCore.model_validate(resolved)
    ServerAutomationCore.model_validate(resolved)  # what the server checks, templates included
    assert client.trigger.model_dump(include={"expect", "posture", "threshold", "match"}) == {
        "expect": {"alflow.regression.detected"},
        "posture": "Reactive",
        "threshold": 1,
        "match": {},
    }
    assert automations[0]["actions"][0]["block_document_id"] == SLUG  # resolve copies, never edits


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_written_file_reads_back_as_prefect_automation_create_reads_it(
    tmp_path: Path, suffix: str
) -> None:
    out = tmp_path / f"automations{suffix}"
    webhook.write(_resolved(), out)
    text = out.read_text(encoding="utf-8")
    data = (
        json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    )  # prefect/cli/automation.py: create
    [automation] = data["automations"]
    assert AutomationCore.model_validate(automation).name == "alflow-regression-notify"
    with pytest.raises(ValueError, match=r"\.yaml, \.yml or \.json"):
        webhook.write(_resolved(), tmp_path / "automations.txt")


def test_a_block_reference_that_is_neither_an_id_nor_a_slug_is_refused() -> None:
    automation = {
        "name": "x",
        "actions": [{"type": "send-notification", "block_document_id": "alflow-regression"}],
    }
    with pytest.raises(ValueError, match="neither an id nor a block slug"):
        webhook.block_slugs([automation])
    ids = {"actions": [{"type": "send-notification", "block_document_id": str(uuid.uuid4())}], "name": "y"}
    assert webhook.block_slugs([ids]) == set()


def test_the_message_names_the_series_each_metric_and_the_run() -> None:
    point = PointVerdict(
        series={"framework": "sglang", "image": "lmsysorg/sglang", "model": "m", "thinking": "on"},
        concurrency=64,
        k=5,
        outcome="regressed",
        metrics=[
            MetricChange(metric="tpot_ms", current=9.0, baseline=10.0, change=-0.1, low=-0.2, high=-0.05),
            MetricChange(metric="tokens_per_s_per_request", current=None, baseline=None, change=None),
        ],
        message="regressed against 3 run(s)",
    )
    resource, payload = alert_event(
        point, flow_run_id="f00", flow="m2", run_dir="results/m2/x", image_tag="v0.5.16"
    )
    subject, body = _render(resource, payload)
    assert subject == "alflow regressed: `sglang` `m` K=5 concurrency=64"
    assert body.splitlines() == [
        "tpot_ms unchanged: change -10.0% (interval -20.0% to -5.0%), median 10.0 -> 9.0",
        "tokens_per_s_per_request unchanged: change n/a (interval n/a), median None -> None",
        "framework: `sglang`",
        "image: `lmsysorg/sglang:v0.5.16`",
        "model: `m`",
        "thinking: `on`",
        "K: 5",
        "concurrency: 64",
        "flow run: `m2` (prefect.flow-run.f00)",  # no flow run read from the API: the event's own resource
        "run directory: `results/m2/x`",
        "`regressed against 3 run(s)`",
    ]


def test_an_event_without_alflow_labels_or_payload_still_renders() -> None:
    subject, body = _render({"prefect.resource.id": "other.thing"}, {})
    assert subject == "alflow regression: ? ? K=? concurrency=?"
    assert "framework: ?" in body
    assert "flow run: ? (other.thing)" in body


def test_without_a_tag_the_message_names_the_image_repository_alone() -> None:
    point = PointVerdict(
        series={
            "framework": "sim",
            "image": "alflow-sim",
            "model": "m",
            "thinking": "off",
            "target_al": "1.9300",
        },
        concurrency=2,
        k=1,
        outcome="regressed",
        message="regressed",
    )
    resource, payload = alert_event(point, flow_run_id="f00", flow="m2", run_dir="results/m2/x")
    assert resource["alflow.image-tag"] == ""
    assert resource["alflow.target-al"] == "1.9300"
    _, body = _render(resource, payload)
    assert "image: `alflow-sim`" in body.splitlines()


@pytest.mark.parametrize(
    "hostile",
    [
        "<!channel> <https://evil.example|Click here>",
        "[Click](https://evil.example) @here @channel *bold* _it_",
        "m` <!here> `x",
        "evil\x1b[31m\nforged line\u202eevil\u200b\u2028forged too",
        "https://user:Pw-Canary-10-" + "p" * 300 + "@host/x",  # cut after redaction: no half password
        "m" * 100_000,
    ],
)
def test_a_hostile_id_reaches_the_chat_as_inline_code_and_nothing_else(hostile: str) -> None:
    """#49: model ids such as ``<!channel> <https://evil|Click>`` were posted as they are (a ping, a disguised link)."""
    point = PointVerdict(
        series={"framework": "sim", "image": hostile, "model": hostile, "thinking": "off"},
        concurrency=2,
        k=1,
        outcome="regressed",
        message=f"{hostile}: regressed",
        reference=hostile,
    )
    resource, payload = alert_event(point, flow_run_id="f00", flow="m2", run_dir=f"results/m2/{hostile}")
    subject, body = _render(resource, payload)
    for text in (subject, body):
        assert "<" not in text  # no Slack control sequence survives
        assert ">" not in text.replace(" -> ", "")
        assert not {"\x1b", "\u202e", "\u200b", "\u2028"} & set(text)
        assert "Canary-10" not in text
        for line in text.splitlines():
            assert line.count("`") % 2 == 0, line  # every span closed: nothing outside code but ours
    spans = [span for line in body.splitlines() for span in line.split("`")[1::2]]
    assert all("@" not in part for line in body.splitlines() for part in line.split("`")[0::2])
    assert len(body) < 3_000  # bounded, whatever the id's length
    assert spans  # the strings are there, as code
    assert all(len(value) <= 1024 for value in resource.values())
    assert all(value.isprintable() for value in resource.values())


def test_chat_code_of_a_lone_surrogate_is_encodable() -> None:
    """Hostile round 4: a lone surrogate survived, and a chat's JSON body cannot carry one."""
    from alflow.util.chat import chat_code

    text = chat_code("model\udc80id")
    assert text == "`model\ufffdid`"
    text.encode("utf-8")  # raises on a surrogate
