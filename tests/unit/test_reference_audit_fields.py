"""`alflow reference audit` checks every field of an entry against the run that wrote it (issue #35 item 6).

A real M0 run store is built here as the calibration flow writes it (``alflow.methods.calibration`` turns measured
points into entries; ``scrapes.json``, ``summary.json`` and the manifest's configuration and dataset), without
Prefect; the table is written from those entries. Each test edits one field of the committed table by hand and
expects the audit to name that field with the table's value and the expected one, and to exit non-zero.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alflow.acceptance.stats import from_histogram
from alflow.cli import app
from alflow.config import CalibrateParams, ModelSpec, SamplingParams, server_config
from alflow.measure import RequestAcceptance, window_stats
from alflow.methods.calibration import CalibrationPoint, EntryContext, ModePoint, reference_entry
from alflow.metrics.prometheus import Snapshot, parse_exposition
from alflow.reference.table import ReferenceEntry, ReferenceTable, m0_variant, save_reference
from alflow.results.audit import SCRAPES, AuditReport, audit_reference, scrape_key
from alflow.results.manifest import ServerRecord
from alflow.results.store import RunWriter
from alflow.util.rows import dump_row
from alflow.workloads import al_workload_sessions, dataset_description, demo_prompts_path

pytestmark = pytest.mark.unit

FLOW_RUN = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
MODEL = ModelSpec(
    id="org/model",
    revision="r1",
    reasoning=True,
    sampling_thinking_on=SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_tokens=512),
    sampling_thinking_off=SamplingParams(temperature=0.7, top_p=0.8, top_k=20, max_tokens=512),
)
SERVER = ServerRecord.model_validate(
    {
        "runner": "docker",
        "image": "vllm/vllm-openai:v0.21.0",
        "image_digest": "sha256:abc",
        "provenance": {
            "framework": "vllm",
            "framework_version": "0.21.0",
            "argv": ["vllm", "serve", "org/model"],
        },
    }
)
# (K, thinking) -> (num_drafts, draft_tokens, accepted per position)
COUNTS = {
    (1, "on"): (900, 900, (610,)),
    (1, "off"): (800, 800, (500,)),
    (2, "on"): (700, 1400, (480, 300)),
    (2, "off"): (650, 1300, (420, 250)),
}


def _scrape(k: int, drafts: int, draft_tokens: int, per_pos: tuple[int, ...], t: float) -> Snapshot:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{model_name="org/model"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{model_name="org/model"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="org/model"}} {sum(per_pos)}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="org/model",position="{i}"}} {c}'
            for i, c in enumerate(per_pos)
        ),
    ]
    del k
    return parse_exposition(
        "\n".join(lines) + "\n", url="http://h/metrics", wall_time_s=t, mono_ns=int(t * 1e9)
    )


def _mode_point(k: int, thinking: str, prompts: int) -> ModePoint:
    drafts, draft_tokens, per_pos = COUNTS[(k, thinking)]
    base = _scrape(k, 100, 100 * k, tuple(10 for _ in per_pos), 1.0)
    final = _scrape(k, 100 + drafts, 100 * k + draft_tokens, tuple(10 + c for c in per_pos), 2.0)
    stats, error = window_stats("vllm", base, final, k=k)  # as the flow's spec_stats task computes them
    assert stats is not None, error
    return ModePoint(stats, "vllm", base, final, prompts, 0)


def _params(workload: dict[str, Any] | None = None) -> CalibrateParams:
    return CalibrateParams.model_validate(
        {
            "models": [MODEL.model_dump(mode="json")],
            "method": "mtp",
            "ks": [1, 2],
            "thinking": ["on", "off"],
            "server": server_config(framework="vllm", model="org/model").model_dump(mode="json"),
            "load": {"concurrency": 1},
            **({"workload": workload} if workload is not None else {}),
        }
    )


def write_m0_run(
    root: Path,
    *,
    workload: dict[str, Any] | None = None,
    per_request: bool = False,
    simulated: bool = False,
) -> tuple[str, list[ReferenceEntry]]:
    """An M0 run directory as the calibration flow writes it, and the entries it put in the table."""
    params = _params(workload)
    dataset = dataset_description(params.workload)
    prompts = len(al_workload_sessions(params.workload))
    ctx = EntryContext(
        method=params.method,
        framework=params.server.framework,
        dataset=dataset["dataset"],
        dataset_hash=dataset["dataset_hash"],
        code_version="alflow 0.1.0 (abc123)",
        flow_run_id=FLOW_RUN,
        host="gpu-node-1",
        variant=m0_variant(params),
    )
    entries: list[ReferenceEntry] = []
    scrapes: dict[str, Any] = {}
    with RunWriter(
        root,
        "m0",
        run_id=FLOW_RUN.replace("-", "")[:12],
        config=params.model_dump(mode="json"),
        provenance={
            "code_version": ctx.code_version,
            "host": {"host": "gpu-node-1"},
            "flow_run_id": FLOW_RUN,
        },
        simulated=simulated,
    ) as writer:
        writer.update_provenance(dataset=dataset)
        for k in params.ks:
            modes = {t.value: _mode_point(k, t.value, prompts) for t in params.thinking}
            if per_request:  # the responses' own counts: a pooled histogram that differs from the counters
                hist = (300, 250, 150) if k == 2 else (290, 610)
                stats = replace(from_histogram(hist, k=k), source="per-request")
                modes["on"] = replace(
                    modes["on"], stats=stats, requests=RequestAcceptance(40, 1.5, 1.9, 2.4, 1.9, hist)
                )
            point = CalibrationPoint(measured_at=WHEN, server=SERVER, modes=modes)
            for mode in params.thinking:
                entries.append(reference_entry(point, MODEL, k, mode, ctx))
                scrapes[scrape_key(MODEL.id, params.method.value, mode.value, k)] = {
                    "k": k,
                    **point.mode(mode).scrapes(),
                }
        writer.write_json(SCRAPES, {"points": scrapes})
        writer.write_summary(
            {
                "flow": "m0",
                "entries": [e.model_dump(mode="json", exclude_none=True) for e in entries],
                "reference_updated": True,
            }
        )
    return writer.dir, entries


def write_table(path: Path, entries: list[ReferenceEntry], kind: str = "measured") -> Path:
    table = ReferenceTable.model_validate(
        {
            "kind": kind,
            "dataset": "speed-bench",
            "category": "coding",
            "entries": [e.model_dump() for e in entries],
        }
    )
    save_reference(table, path)
    return path


@pytest.fixture
def run(tmp_path: Path) -> tuple[str, Path]:
    run_dir, entries = write_m0_run(tmp_path / "results")
    return run_dir, write_table(tmp_path / "speed-bench-coding.yaml", entries)


def _edited(table: Path, edit: Any, index: int = 0) -> Path:
    data = yaml.safe_load(table.read_text())
    edit(data["entries"][index])
    out = table.with_name("edited.yaml")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _mismatches(report: AuditReport, index: int = 0) -> dict[str, dict[str, object]]:
    row = dump_row(report)["rows"][index]  # type: ignore[index]
    return {m["field"]: m for m in row["mismatches"]}


def test_the_untouched_table_audits_ok_with_every_field_checked(run: tuple[str, Path]) -> None:
    run_dir, table = run
    report = audit_reference(table, [run_dir])
    assert report.ok, dump_row(report)
    assert [r.status for r in report.rows] == ["ok"] * 4
    assert all(not r.unchecked and not r.mismatches for r in report.rows)
    result = CliRunner().invoke(app, ["reference", "audit", str(table), run_dir], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "audit passed" in result.output


def _set(*path: str, value: object) -> Any:
    def edit(entry: dict[str, Any]) -> None:
        node = entry
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _shift(name: str, by: float) -> Any:
    def edit(entry: dict[str, Any]) -> None:
        entry[name] = entry[name] + by

    return edit


# (the field the audit must name, the edit of the table's entry 0)
EDITS = [
    ("ci_low", _shift("ci_low", -0.001)),
    ("ci_high", _shift("ci_high", 0.002)),
    ("provenance.dataset_hash", _set("provenance", "dataset_hash", value="sha256:" + "0" * 64)),
    ("provenance.dataset", _set("provenance", "dataset", value="nvidia/SPEED-Bench")),
    ("provenance.sampling.temperature", _set("provenance", "sampling", "temperature", value=0.65)),
    ("provenance.sampling.top_p", _set("provenance", "sampling", "top_p", value=0.9)),
    ("provenance.sampling.top_k", _set("provenance", "sampling", "top_k", value=40)),
    ("provenance.sampling.min_p", _set("provenance", "sampling", "min_p", value=0.05)),
    ("provenance.sampling.max_tokens", _set("provenance", "sampling", "max_tokens", value=4096)),
    ("provenance.sampling.seed", _set("provenance", "sampling", "seed", value=7)),
    ("draft_tokens", _shift("draft_tokens", 1)),
    ("concurrency", _set("concurrency", value=4)),
    ("prefix_caching", _set("prefix_caching", value=True)),
    ("draft_sample_method", _set("draft_sample_method", value="probabilistic")),
    ("provenance.model_revision", _set("provenance", "model_revision", value="r2")),
    ("provenance.framework", _set("provenance", "framework", value="sglang")),
    ("provenance.framework_version", _set("provenance", "framework_version", value="0.22.0")),
    ("provenance.image", _set("provenance", "image", value="vllm/vllm-openai:v0.22.0")),
    ("provenance.image_digest", _set("provenance", "image_digest", value="sha256:def")),
    ("provenance.command", _set("provenance", "command", value=["vllm", "serve", "other"])),
    ("provenance.prompt_count", _set("provenance", "prompt_count", value=3)),
    ("provenance.date", _set("provenance", "date", value="2026-11-29T05:00:00Z")),
    ("provenance.code_version", _set("provenance", "code_version", value="alflow 0.0.9")),
    ("provenance.host", _set("provenance", "host", value="elsewhere")),
    ("provenance.dataset_revision", _set("provenance", "dataset_revision", value="abc")),
    ("note", _set("note", value="hand-written")),
]


@pytest.mark.parametrize(("name", "edit"), EDITS, ids=[e[0] for e in EDITS])
def test_one_edited_field_is_named_with_both_values(run: tuple[str, Path], name: str, edit: Any) -> None:
    run_dir, table = run
    original = yaml.safe_load(table.read_text())["entries"][0]
    edited = _edited(table, edit)
    report = audit_reference(edited, [run_dir])
    assert not report.ok
    assert [r.status for r in report.rows] == ["mismatch", "ok", "ok", "ok"], dump_row(report)
    found = _mismatches(report)
    assert name in found, found
    node_new = yaml.safe_load(edited.read_text())["entries"][0]
    node_old: Any = original
    for key in name.split("."):
        node_new = node_new[key]
        node_old = node_old.get(key) if isinstance(node_old, dict) else None
    if isinstance(node_new, float):
        assert found[name]["table"] == pytest.approx(node_new)
    else:
        assert found[name]["table"] == node_new
    if name == "provenance.dataset_hash":
        assert found[name]["expected"] == original["provenance"]["dataset_hash"]
    elif name == "provenance.date":
        assert found[name]["expected"] == "2026-11-30T05:00:00Z"
    elif isinstance(node_old, float):
        assert found[name]["expected"] == pytest.approx(node_old)
    else:
        assert found[name]["expected"] == node_old
    # the text names the field and both values; the command line exits 1
    text = " ".join(report.rows[0].problems)
    assert f"{name} " in text
    result = CliRunner().invoke(app, ["reference", "audit", str(edited), run_dir, "--json"])
    assert result.exit_code == 1
    assert name in {m["field"] for m in json.loads(result.output)["rows"][0]["mismatches"]}


def test_the_ci_bounds_are_recomputed_from_the_scrapes_with_the_calibrations_statistics(
    run: tuple[str, Path],
) -> None:
    run_dir, table = run
    original = yaml.safe_load(table.read_text())["entries"][0]
    edited = _edited(table, _shift("ci_low", -0.001))
    found = _mismatches(audit_reference(edited, [run_dir]))
    assert found["ci_low"]["expected"] == pytest.approx(original["ci_low"], abs=1e-12)
    assert "histogram-iid 95% CI" in str(found["ci_low"]["source"])
    assert "scrapes" in str(found["ci_low"]["source"])


def test_a_consistent_count_forgery_names_n_and_the_accepted_tokens(run: tuple[str, Path]) -> None:
    """num_drafts and accepted_tokens doubled: AL and rates unchanged, the table still loads."""
    run_dir, table = run

    def double(entry: dict[str, Any]) -> None:
        entry["num_drafts"] *= 2
        entry["accepted_tokens"] *= 2
        entry["draft_tokens"] *= 2

    found = _mismatches(audit_reference(_edited(table, double), [run_dir]))
    assert found["num_drafts"]["table"] == 2 * found["num_drafts"]["expected"]  # type: ignore[operator]
    assert found["accepted_tokens"]["table"] == 2 * found["accepted_tokens"]["expected"]  # type: ignore[operator]
    assert "al" not in found


def test_a_consistent_al_forgery_names_al_counts_and_rates(run: tuple[str, Path]) -> None:
    run_dir, table = run
    original = yaml.safe_load(table.read_text())["entries"][0]

    def forge(entry: dict[str, Any]) -> None:
        entry["accepted_tokens"] += 7
        entry["al"] = 1 + entry["accepted_tokens"] / entry["num_drafts"]
        entry["per_position_rates"][0] += 7 / entry["num_drafts"]

    found = _mismatches(audit_reference(_edited(table, forge), [run_dir]))
    assert found["al"]["expected"] == pytest.approx(original["al"])
    assert found["al"]["table"] == pytest.approx(original["al"] + 7 / original["num_drafts"])
    assert found["accepted_tokens"]["expected"] == original["accepted_tokens"]
    assert "per_position_rates.p_1" in found


def test_an_entry_naming_a_model_the_run_did_not_measure_names_the_model(run: tuple[str, Path]) -> None:
    run_dir, table = run
    found = _mismatches(audit_reference(_edited(table, _set("model", value="org/other")), [run_dir]))
    assert found["model"]["table"] == "org/other"
    assert found["model"]["expected"] == "org/model"


def test_a_simulated_run_in_a_measured_table_names_the_kind(tmp_path: Path) -> None:
    run_dir, entries = write_m0_run(tmp_path / "results", simulated=True)
    table = write_table(tmp_path / "t.yaml", entries, kind="measured")
    report = audit_reference(table, [run_dir])
    assert not report.ok
    assert _mismatches(report)["kind"] == {
        "field": "kind",
        "table": "measured",
        "expected": "simulated",
        "source": "the run (simulated=True)",
    }


def test_an_entry_whose_run_is_not_given_says_no_field_was_checked(
    run: tuple[str, Path], tmp_path: Path
) -> None:
    _, table = run
    other_dir, _ = write_m0_run(tmp_path / "other")
    edited = _edited(table, _set("provenance", "flow_run_id", value="another-flow-run"))
    report = audit_reference(edited, [other_dir])
    row = report.rows[0]
    assert row.status == "missing"
    assert "no field checked" in row.problems[0]
    assert row.unchecked
    assert "another-flow-run" in row.unchecked[0]
    result = CliRunner().invoke(app, ["reference", "audit", str(edited), other_dir], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert "missing" in result.output
    assert "audit FAILED" in result.output


def test_fields_only_the_summary_records_are_named_unchecked_when_it_is_gone(run: tuple[str, Path]) -> None:
    run_dir, table = run
    (Path(run_dir) / "summary.json").unlink()
    report = audit_reference(table, [run_dir])
    assert not report.ok
    row = report.rows[0]
    assert row.status == "unverified"
    unchecked = {name for u in row.unchecked for name in u.split(": ")[0].split(", ")}
    assert {
        "provenance.framework_version",
        "provenance.image",
        "provenance.command",
        "provenance.date",
    } <= unchecked
    # what the raw data decides is still checked
    assert not unchecked & {"al", "ci_low", "ci_high", "provenance.dataset_hash", "provenance.sampling"}
    result = CliRunner().invoke(app, ["reference", "audit", str(table), run_dir], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert "unchecked: provenance.framework_version" in result.output


def test_the_dataset_hash_is_checked_against_the_local_dataset_file(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    shutil.copyfile(demo_prompts_path(), prompts)
    run_dir, entries = write_m0_run(
        tmp_path / "results", workload={"kind": "speed-bench", "path": str(prompts)}
    )
    table = write_table(tmp_path / "t.yaml", entries)
    assert audit_reference(table, [run_dir]).ok
    recorded = entries[0].provenance.dataset_hash if entries[0].provenance else ""
    # the file changed after the run: the table and the run's record agree, the file does not
    prompts.write_text(prompts.read_text() + "\n")
    report = audit_reference(table, [run_dir])
    assert not report.ok
    found = _mismatches(report)
    assert found["provenance.dataset_hash"]["table"] == recorded
    assert found["provenance.dataset_hash"]["expected"] != recorded
    assert "the dataset file" in str(found["provenance.dataset_hash"]["source"])
    # the file gone: the hash is still checked against the run's record, and the note says so
    prompts.unlink()
    report = audit_reference(table, [run_dir])
    assert report.ok
    assert any("not on this machine" in n for n in report.rows[0].notes)


def test_the_per_request_source_is_recomputed_from_its_stored_histogram(tmp_path: Path) -> None:
    run_dir, entries = write_m0_run(tmp_path / "results", per_request=True)
    table = write_table(tmp_path / "t.yaml", entries)
    report = audit_reference(table, [run_dir])
    assert report.ok, dump_row(report)
    edited = _edited(table, _shift("ci_high", 0.001))
    found = _mismatches(audit_reference(edited, [run_dir]))
    assert "per-request acceptance histogram" in str(found["ci_high"]["source"])
    assert found["ci_high"]["expected"] == pytest.approx(entries[0].ci_high)


def test_a_bad_table_or_run_directory_is_one_line_and_exit_2(run: tuple[str, Path], tmp_path: Path) -> None:
    run_dir, table = run
    missing = CliRunner().invoke(app, ["reference", "audit", str(tmp_path / "nope.yaml"), run_dir])
    assert missing.exit_code == 2
    assert "nope.yaml" in missing.output
    assert len(missing.output.strip().splitlines()) == 1
    not_a_run = tmp_path / "not-a-run"
    not_a_run.mkdir()
    bad = CliRunner().invoke(app, ["reference", "audit", str(table), str(not_a_run)])
    assert bad.exit_code == 2
    assert "not-a-run" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_user_data_in_the_output_is_escaped_for_the_terminal(run: tuple[str, Path], tmp_path: Path) -> None:
    run_dir, table = run
    evil = tmp_path / "evil\x1b]0;pwned\x07.yaml"
    shutil.copyfile(_edited(table, _set("note", value="\x1b[2J")), evil)
    result = CliRunner().invoke(app, ["reference", "audit", str(evil), run_dir], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert "note" in result.output
