"""Each flow's summary.json against its model (alflow.results.summaries): written checked, read back, old forms read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alflow.results.store import RunWriter, open_run
from alflow.results.summaries import (
    SCHEMA_FILE,
    M1RunSummary,
    M2RunSummary,
    SummaryError,
    SweepRunSummary,
    read_summary,
    store_summary,
    summary_schema,
)

pytestmark = pytest.mark.unit

POINT = {"concurrency": 4, "k": 3, "target_al": 2.5, "framework": "sim", "valid": True}


def test_a_stored_summary_reads_back_as_its_flows_model_with_the_schema_beside_it(tmp_path: Path) -> None:
    writer = RunWriter(str(tmp_path), "m2", run_id="r1", config={})
    summary = M2RunSummary(flow="m2", target_al=2.5, scheme="vllm", num_gpus=8, points=[POINT], failures=[])
    with writer:
        store_summary(writer, summary)
    run = open_run(writer.dir)
    data = run.json("summary")
    assert data["schema_version"] >= 1  # the store's version, added on write
    again = read_summary(data, "summary.json")
    assert isinstance(again, M2RunSummary)
    assert (again.target_al, again.points[0].concurrency) == (2.5, 4)
    schema = json.loads((Path(writer.dir) / SCHEMA_FILE).read_text())
    assert set(schema["discriminator"]["mapping"]) == {"m0", "m1", "m2", "sweep"}
    assert schema == summary_schema()


@pytest.mark.parametrize(
    ("data", "what"),
    [
        # summaries of runs stored before the models: no schema_version, fields added since then missing
        ({"flow": "m2", "target_al": 2.5, "scheme": "vllm", "points": [POINT], "failures": []}, M2RunSummary),
        (
            {"flow": "m1", "subject": "sim x", "passed": True, "verdicts": [{"gate": "al", "passed": True}]},
            M1RunSummary,
        ),
        (
            {"flow": "sweep", "mode": "in-process", "ks": [1, 2], "best_k": [], "extra_key": 1},
            SweepRunSummary,
        ),
    ],
)
def test_older_summaries_read(data: dict[str, Any], what: type) -> None:
    assert isinstance(read_summary(data, "old/summary.json"), what)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flow": "m9"}, "flow 'm9' is not one of m0, m1, m2, sweep"),
        ({"target_al": 2.5}, "flow None is not one of"),
        ({"flow": "m2", "target_al": "high", "scheme": "vllm"}, "target_al: Input should be a valid number"),
        (
            {"flow": "m2", "target_al": 2.5, "scheme": "vllm", "points": [{"k": 3}]},
            "points.0: .*lacks concurrency",
        ),
        ({"flow": "m1", "subject": "s", "passed": True, "verdicts": [{"passed": True}]}, "needs a gate name"),
        (
            {"flow": "m0", "reference_path": "r.yaml", "entries": [{"model": "m"}]},
            "entries.0.method: Field required",
        ),
        ({"flow": "sweep", "mode": "in-process"}, "ks: Field required"),
    ],
)
def test_a_summary_that_is_not_its_flows_names_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SummaryError, match=message):
        read_summary(data, "run/summary.json")


def test_a_summary_its_readers_would_refuse_is_never_written(tmp_path: Path) -> None:
    writer = RunWriter(str(tmp_path), "m2", run_id="r2", config={})
    bad = M2RunSummary.model_construct(
        flow="m2", target_al=2.5, scheme="vllm", points=[{"k": 3}], failures=[]
    )
    with pytest.raises(SummaryError, match="lacks concurrency"):
        store_summary(writer, bad)
    assert not (Path(writer.dir) / "summary.json").exists()


def test_the_schema_beside_a_summary_describes_its_rows_as_stored_flat(tmp_path: Path) -> None:
    """Tools outside alflow read summary.schema.json: an M2 point's figures and a verdict's details are columns."""
    import jsonschema

    from alflow.gates import AlGateDetails, Verdict
    from alflow.metrics.point_metrics import POINT_METRICS
    from alflow.results.rows import M2Point
    from alflow.results.summaries import M1RunSummary

    point = M2Point(concurrency=4, k=3, target_al=2.5, metrics={m.name: 1.0 for m in POINT_METRICS})
    verdict = Verdict(
        gate="al",
        passed=True,
        message="ok",
        details=AlGateDetails(threshold=2.4, reference_al=2.5, rule="r", al=2.6, compared=2.6),
    )
    schema = summary_schema()
    columns = schema["$defs"]["M2Point"]["properties"]
    assert "metrics" not in columns
    assert {m.name for m in POINT_METRICS} <= set(columns)
    assert "details" not in schema["$defs"]["Verdict"]["properties"]
    for summary in (
        M2RunSummary(flow="m2", target_al=2.5, scheme="vllm", points=[point], failures=[]),
        M1RunSummary(flow="m1", subject="s", passed=True, verdicts=[verdict]),
    ):
        stored = json.loads(json.dumps(summary.stored()))
        jsonschema.validate(stored, schema)
        assert read_summary(stored, "summary.json") == summary
    row = M2RunSummary(flow="m2", target_al=2.5, scheme="vllm", points=[point]).stored()["points"][0]
    row["p99_ttft_ms"] = "slow"  # not a number: the schema says so
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"flow": "m2", "target_al": 2.5, "scheme": "vllm", "points": [row]}, schema)
