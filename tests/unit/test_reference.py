"""The reference AL table: validation, lookup, atomic save, diff."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from alflow.config import SamplingParams, ThinkingMode
from alflow.reference import table as ref

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "references" / "examples.yaml"


def _provenance() -> ref.Provenance:
    return ref.Provenance(
        framework="vllm",
        image="vllm/vllm-openai:v0.11.0",
        image_digest="sha256:" + "a" * 64,
        model_revision="abc123",
        dataset="nvidia/SPEED-Bench",
        dataset_hash="sha256:" + "b" * 64,
        sampling=SamplingParams(temperature=0.6, top_p=0.95),
        prompt_count=80,
        date=datetime(2026, 11, 1, tzinfo=UTC),
        code_version="alflow 0.1.0 (deadbeef)",
    )


def _measured(al: float = 2.5, k: int = 3) -> ref.ReferenceTable:
    entry = ref.ReferenceEntry(
        model="m",
        method="mtp",
        thinking="off",
        k=k,
        draft_sample_method="greedy",
        rejection_sample_method="standard",
        concurrency=1,
        prefix_caching=False,
        al=al,
        per_position_rates=(0.8, 0.5, al - 2.3),
        num_drafts=1000,
        accepted_tokens=round((al - 1) * 1000),
        provenance=_provenance(),
    )
    return ref.ReferenceTable(kind="measured", dataset="speed-bench", category="coding", entries=(entry,))


def test_examples_load_and_are_marked() -> None:
    table = ref.load_reference(EXAMPLES)
    assert table.kind == "example"
    assert "EXAMPLE" in table.description
    assert table.lookup("Qwen3.5", "mtp", "on", 3).al == pytest.approx(3.39)
    assert table.lookup("DeepSeek-V4", "mtp", "on", 1).al == pytest.approx(1.79)
    assert table.lookup("Kimi-K2.5", "eagle3", "on", 8).al == pytest.approx(3.77)
    assert len(table.entries) == 32


def test_lookup_error_says_what_exists() -> None:
    table = ref.load_reference(EXAMPLES)
    with pytest.raises(ref.ReferenceNotFoundError, match="it has K=1, 2, 3, 4, 5, 6, 7, 8"):
        table.lookup("Qwen3.5", "mtp", "on", 9)
    with pytest.raises(
        ref.ReferenceNotFoundError, match=r"no reference AL for Qwen3\.5 mtp thinking=off K=3"
    ):
        table.lookup("Qwen3.5", "mtp", "off", 3)


def test_round_trip_and_atomic_save(tmp_path: Path) -> None:
    table = _measured()
    path = ref.save_reference(table, tmp_path / "refs" / "coding.yaml")
    assert ref.load_reference(path) == table
    assert [p.name for p in path.parent.iterdir()] == ["coding.yaml"]


def test_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ref.save_reference(_measured(), tmp_path / "coding.yaml")
    before = path.read_bytes()

    def boom(_table: ref.ReferenceTable) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(ref, "dump_reference", boom)
    with pytest.raises(RuntimeError):
        ref.save_reference(_measured(2.6), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["coding.yaml"]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d["entries"][0].update(al=5.0), "entries[0] (m mtp thinking=off K=3): al=5.0 for m mtp"),
        (lambda d: d["entries"][0].update(per_position_rates=[0.5, 0.8, 0.2]), "increase at p_2"),
        (lambda d: d["entries"][0].update(per_position_rates=[0.5, 0.2]), "has 2 values; K=3 needs 3"),
        (lambda d: d["entries"][0].update(accepted_tokens=1700), "disagrees with 1 + accepted/num_drafts"),
        (lambda d: d["entries"][0].pop("provenance"), "a measured table needs provenance"),
        (lambda d: d["entries"].append(dict(d["entries"][0])), "duplicate entry for m mtp thinking=off K=3"),
        (lambda d: d["entries"][0].update(method="medusa"), "entries[0].method"),
        (lambda d: d.update(colour="red"), "colour: Extra inputs are not permitted"),
    ],
)
def test_invalid_tables_name_file_entry_and_field(tmp_path: Path, mutate, fragment: str) -> None:  # type: ignore[no-untyped-def]
    import yaml

    data = yaml.safe_load(ref.dump_reference(_measured()))
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ref.ReferenceTableError) as info:
        ref.load_reference(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ref.ReferenceTableError, match="cannot read"):
        ref.load_reference(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("entries: [\n")
    with pytest.raises(ref.ReferenceTableError, match="not valid YAML"):
        ref.load_reference(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ref.ReferenceTableError, match="a YAML mapping, got list"):
        ref.load_reference(bad)


def test_diff_reports_changes_and_provenance() -> None:
    old = _measured(2.5)
    new_entry = (
        _measured(2.6)
        .entries[0]
        .model_copy(
            update={"provenance": _provenance().model_copy(update={"image_digest": "sha256:" + "c" * 64})}
        )
    )
    extra = new_entry.model_copy(update={"thinking": ThinkingMode.ON})
    new = old.with_entries([new_entry, extra])
    diff = ref.diff_tables(old, new)
    assert diff.changed
    rows = {(r.thinking, r.status): r for r in diff.rows}
    changed = rows[("off", "changed")]
    assert changed.delta == pytest.approx(0.1)
    assert changed.rel_delta == pytest.approx(0.04)
    assert any("image_digest" in c for c in changed.provenance_changes)
    assert ("on", "added") in rows
    assert not ref.diff_tables(old, old).changed
    within = ref.diff_tables(old, _measured(2.6), tolerance=0.2)
    assert [r.status for r in within.rows] == ["unchanged"]
    assert [r.status for r in ref.diff_tables(old, _measured(2.6)).rows] == ["changed"]


# --------------------------------------------------------------------------------------------
# update_reference: lock file, re-read, merge, atomic replace


def _entry(k: int, al: float, model: str = "m") -> ref.ReferenceEntry:
    return ref.ReferenceEntry(
        model=model,
        method="mtp",
        thinking="off",
        k=k,
        draft_sample_method="greedy",
        rejection_sample_method="standard",
        concurrency=1,
        prefix_caching=False,
        al=al,
        per_position_rates=(al - 1,) + (0.0,) * (k - 1),
        num_drafts=1000,
        accepted_tokens=round((al - 1) * 1000),
        provenance=_provenance(),
    )


def _empty(kind: str = "measured") -> ref.ReferenceTable:
    return ref.ReferenceTable(kind=kind, dataset="speed-bench", category="coding", entries=())  # type: ignore[arg-type]


def test_update_merges_into_what_is_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "refs" / "coding.yaml"
    before, first = ref.update_reference(path, [_entry(1, 1.5), _entry(2, 1.7)], new=_empty())
    assert before is None
    assert [e.k for e in first.entries] == [1, 2]
    # another writer's entries (K=1, K=2) are kept; the same key (K=2) takes the new value
    before, second = ref.update_reference(path, [_entry(2, 1.8), _entry(3, 1.9)], new=_empty())
    assert before == first
    assert [(e.k, e.al) for e in second.entries] == [(1, 1.5), (2, 1.8), (3, 1.9)]
    assert ref.load_reference(path) == second
    assert sorted(p.name for p in path.parent.iterdir()) == ["coding.yaml", "coding.yaml.lock"]


def test_update_refuses_a_damaged_table_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "coding.yaml"
    ref.update_reference(path, [_entry(1, 1.5)], new=_empty())
    damaged = path.read_text().replace("al: 1.5", "al: 9.5")
    path.write_text(damaged)
    with pytest.raises(ref.ReferenceTableError, match=rf"^{path}: entries\[0\]"):
        ref.update_reference(path, [_entry(2, 1.7)], new=_empty())
    assert path.read_text() == damaged
    path.write_text("entries: [\n")
    with pytest.raises(ref.ReferenceTableError, match=rf"^{path}: not valid YAML"):
        ref.update_reference(path, [_entry(2, 1.7)], new=_empty())
    assert path.read_text() == "entries: [\n"


def test_update_refuses_another_kind(tmp_path: Path) -> None:
    path = tmp_path / "coding.yaml"
    ref.update_reference(path, [_entry(1, 1.5)], new=_empty("simulated"))
    before = path.read_bytes()
    with pytest.raises(ref.ReferenceTableError, match="is a simulated table; refusing to add measured"):
        ref.update_reference(path, [_entry(2, 1.7)], new=_empty())
    assert path.read_bytes() == before


def test_update_waits_for_the_lock_then_names_it(tmp_path: Path) -> None:
    from alflow.util.fsutil import LockTimeoutError, file_lock

    path = tmp_path / "coding.yaml"
    with file_lock(path, timeout_s=1, what="the reference table"), pytest.raises(LockTimeoutError) as info:
        ref.update_reference(path, [_entry(1, 1.5)], new=_empty(), timeout_s=0.3)
    assert str(info.value).startswith(f"{path}.lock: timed out after 0.3 s waiting for the lock")
    assert not path.exists()
    ref.update_reference(path, [_entry(1, 1.5)], new=_empty(), timeout_s=0.3)  # released: goes through
    assert [e.k for e in ref.load_reference(path).entries] == [1]


def _write_one(path: str, k: int, model: str) -> None:
    ref.update_reference(path, [_entry(k, 1.0 + k / 10, model)], new=_empty())
