"""Regression steps (tasks by ``flows/steps.py``): judge a stored run against its series' history, store ``regression.json``, emit events.

The rules are :mod:`alflow.methods.regression`'s; these tasks only read and write the run and tell Prefect.
Each regressed point (each moved reference entry) emits one ``alflow.regression.detected`` event whose
resource is the flow run (``prefect.flow-run.<id>``) labelled with the series (framework, image, model, K,
concurrency, thinking) as strings. A failure here never fails the run: the measurement is already stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from prefect import get_run_logger
from prefect.events import emit_event
from prefect.runtime import flow_run

from alflow.config.regression import RegressionSettings
from alflow.methods.regression import judge_reference, judge_run
from alflow.reference.table import Key, ReferenceTable
from alflow.results.regression import REGRESSION_FILE, PointVerdict, RegressionReport
from alflow.results.series import split_image
from alflow.results.store import RunWriter, StoredRun
from alflow.results.view import image
from alflow.util.chat import chat_code
from alflow.util.redact import redact_data, redact_url

REGRESSION_EVENT: Final = "alflow.regression.detected"
"""A regressed M2 point or a reference entry that moved: one event each."""
MAX_LABEL: Final = 1024
"""The longest resource label value an event carries (an identifier's bound, :data:`alflow.util.names.MAX_IDENTIFIER`)."""


def alert_event(
    point: PointVerdict, *, flow_run_id: str, flow: str, run_dir: str, image_tag: str = ""
) -> tuple[dict[str, str], dict[str, Any]]:
    """The resource (the flow run, with the series as string labels) and payload of one point's event.

    The series names the image by its repository (a new tag continues it); ``image_tag`` is the tag (or digest)
    this run served, the label ``alflow.image-tag``: which nightly regressed.
    """
    series = point.series
    resource = {
        "prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
        "prefect.resource.name": flow,
        "alflow.outcome": point.outcome,
        **{
            f"alflow.{name}": _label(series.get(name, ""))
            for name in ("framework", "image", "model", "thinking")
        },
        "alflow.image-tag": _label(image_tag),
        "alflow.target-al": _label(series.get("target_al", "")),  # a line is one target AL (SeriesKey)
        "alflow.k": str(point.k),
        "alflow.concurrency": str(point.concurrency),
        "alflow.repeat": str(point.repeat),
    }
    if point.reference is not None:
        resource["alflow.reference"] = _label(point.reference)
    served = str(series.get("image", "")) + (f":{image_tag}" if image_tag else "")
    payload: dict[str, Any] = {
        "outcome": point.outcome,
        "message": point.message,
        "series": dict(series),
        "metrics": [m.model_dump(mode="json") for m in point.metrics],
        "history": list(point.history),
        "run_dir": redact_url(run_dir),
        # what the notification shows (deployments/automations.yaml): each string a chat's inline code
        "shown": {
            **{name: chat_code(series.get(name, "?")) for name in ("framework", "model", "thinking")},
            "image": chat_code(served or "?"),
            "reference": None if point.reference is None else chat_code(point.reference),
            "flow": chat_code(flow),
            "run_dir": chat_code(redact_url(run_dir)),
            "message": chat_code(point.message, limit=1000),
        },
    }
    clean = redact_data(payload)
    assert isinstance(clean, dict)
    return resource, clean


def _label(value: object) -> str:
    """A resource label's value: the text, control characters removed, at most :data:`MAX_LABEL` characters."""
    return "".join(c for c in str(value) if c.isprintable())[:MAX_LABEL]


def _image_tag(writer: RunWriter) -> str:
    """The tag (or digest) of the image the run served, "" without one."""
    served, _ = image(StoredRun(writer.dir, writer.manifest, writer.storage))
    return split_image(served)[1]


def _flow_run_id(writer: RunWriter) -> str:
    stored = writer.manifest.provenance.flow_run_id
    current = flow_run.get_id()
    return stored or (str(current) if current else writer.run_id)


def _publish(writer: RunWriter, report: RegressionReport, *, emit: bool) -> None:
    """Store the report in the run and emit one event per alert (``emit``); log what it says."""
    writer.write_json(REGRESSION_FILE, report.model_dump(mode="json"))
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.counts().items())) or "no points"
    log = get_run_logger()
    log.info("regression check (%s): %s", report.kind, counts)
    for note in report.notes:
        log.warning("regression check: %s", note)
    for point in report.alerts():
        log.warning("regression: %s", point.message)
        if emit:
            resource, payload = alert_event(
                point,
                flow_run_id=_flow_run_id(writer),
                flow=writer.flow,
                run_dir=writer.dir,
                image_tag=_image_tag(writer),
            )
            emit_event(event=REGRESSION_EVENT, resource=resource, payload=payload)


def check_regression(writer: RunWriter, settings: RegressionSettings) -> str | None:
    """Judge the stored run (:func:`alflow.methods.regression.judge_run`), store ``regression.json``, emit events.

    A sweep's run gathers its children's verdicts and emits nothing (each child emitted its own). Any failure
    is a warning and None: the measured run is never failed or lost by its regression check.
    """
    try:
        run = StoredRun(writer.dir, writer.manifest.model_copy(deep=True), writer.storage)
        report = judge_run(run, settings)
        _publish(writer, report, emit=writer.flow != "sweep")
    except Exception as exc:  # the check is derived from the stored run: it must never fail the run
        get_run_logger().warning(
            "regression check not done for %s: %r", redact_url(writer.dir), exc, exc_info=True
        )
        return None
    return writer.dir


def check_reference(
    writer: RunWriter, previous: ReferenceTable | None, table: ReferenceTable, keys: Sequence[Key]
) -> str | None:
    """M0: the entries it wrote against the table before the merge; store ``regression.json``, emit per moved one."""
    try:
        if previous is None:
            return None
        _publish(writer, judge_reference(previous, table, keys), emit=True)
    except Exception as exc:  # never fails the calibration: the table is already written
        get_run_logger().warning(
            "reference check not done for %s: %r", redact_url(writer.dir), exc, exc_info=True
        )
        return None
    return writer.dir
