"""The reference page's data: tables found in the root, M0 history per key, an AL that moved beyond its CI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

from alflow.reference.table import ReferenceTable, dump_reference
from alflow.results.catalog import Catalog
from alflow.site.reference import reference_page

pytestmark = pytest.mark.unit


def entry(k: int, al: float, low: float, high: float, **changes: Any) -> dict[str, Any]:
    return {
        "model": "llama",
        "method": "mtp",
        "thinking": "off",
        "k": k,
        "draft_sample_method": "greedy",
        "rejection_sample_method": "standard",
        "concurrency": 1,
        "prefix_caching": False,
        "al": al,
        "ci_low": low,
        "ci_high": high,
        **changes,
    }


def write_m0(root: Path, day: int, entries: list[dict[str, Any]]) -> str:
    name = f"202601{day:02d}T000000Z-m0run{day:07d}"
    run = root / "m0" / name
    run.mkdir(parents=True)
    started = f"2026-01-{day:02d}T00:00:00+00:00"
    summary = {"schema_version": 1, "flow": "m0", "reference_path": "ref.yaml", "entries": entries}
    (run / "summary.json").write_text(json.dumps(summary))
    manifest = {
        "schema_version": 1,
        "flow": "m0",
        "run_id": f"m0run{day:07d}",
        "status": "complete",
        "started": started,
        "config": {"ks": [1, 2]},
        "files": {"summary.json": {"written": started}},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return f"m0/{name}"


def write_tables(root: Path) -> None:
    """A reference table at the root's top, a YAML file that is none and a broken table one folder down."""
    table = ReferenceTable.model_validate(
        {
            "kind": "example",
            "dataset": "speed-bench",
            "category": "coding",
            "description": "<b>quoted</b>",
            "entries": [entry(1, 1.8, 1.7, 1.9)],
        }
    )
    (root / "reference-example.yaml").write_text(dump_reference(table))
    (root / "presets").mkdir()
    (root / "presets" / "preset.yaml").write_text("server: {framework: x}\n")  # YAML, not a reference table
    (root / "presets" / "broken-reference.yaml").write_text("kind: example\nentries: [{model: 1}]\n")


def test_tables_and_the_history_with_moves_beyond_the_interval(tmp_path: Path) -> None:
    write_tables(tmp_path)
    first = write_m0(tmp_path, 1, [entry(1, 1.80, 1.75, 1.85), entry(2, 2.50, 2.45, 2.55)])
    second = write_m0(tmp_path, 2, [entry(1, 1.82, 1.78, 1.86), entry(2, 2.70, 2.66, 2.74)])  # K=2 moved
    third = write_m0(tmp_path, 3, [entry(1, 1.80, 1.70, 1.90), entry(2, "bad", 1, 2)])
    page = reference_page(Catalog(str(tmp_path)))
    assert [t.source for t in page.tables] == ["reference-example.yaml", "presets/broken-reference.yaml"]
    good, broken = page.tables
    assert (good.kind, good.dataset, good.category, len(good.entries)) == (
        "example",
        "speed-bench",
        "coding",
        1,
    )
    assert good.entries[0].al == 1.8
    assert broken.entries == ()
    assert broken.problem
    k1, k2 = page.histories
    assert k1.key.startswith("llama mtp thinking=off K=1")
    assert [c.rel for c in k1.calibrations] == [first, second, third]
    assert [c.moved for c in k1.calibrations] == [False, False, False]  # every AL inside the other's interval
    assert [c.rel for c in k2.calibrations] == [first, second]
    assert [c.moved for c in k2.calibrations] == [False, True]
    assert k2.moved == 1
    assert len(page.problems) == 1
    assert page.problems[0].startswith(f"{third}: entry 2: al")
    data = page.to_dict()
    assert data["histories"][1]["calibrations"][1]["moved"] is True


def test_a_calibration_without_an_interval_is_never_marked(tmp_path: Path) -> None:
    write_m0(tmp_path, 1, [entry(1, 1.5, None, None)])  # type: ignore[arg-type]
    write_m0(tmp_path, 2, [entry(1, 1.9, None, None)])  # type: ignore[arg-type]
    (history,) = reference_page(Catalog(str(tmp_path))).histories
    assert [c.moved for c in history.calibrations] == [False, False]


def test_a_url_root_lists_the_same_tables_and_history_as_a_folder(tmp_path: Path) -> None:
    write_tables(tmp_path)
    (tmp_path / "presets" / "huge-reference.yaml").write_text("entries: []\n" + "#" * (1 << 20))
    write_m0(tmp_path, 1, [entry(2, 2.50, 2.45, 2.55)])
    write_m0(tmp_path, 2, [entry(2, 2.70, 2.66, 2.74)])  # moved beyond the interval
    local = reference_page(Catalog(str(tmp_path), cache_dir=None)).to_dict()
    root = f"memory://reference-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    try:
        fs.put(f"{tmp_path}/", root.removeprefix("memory://"), recursive=True)
        remote = reference_page(Catalog(root, cache_dir=None)).to_dict()
    finally:
        fs.rm(root.removeprefix("memory://"), recursive=True)
    assert [t["source"] for t in remote["tables"]] == [
        "reference-example.yaml",
        "presets/broken-reference.yaml",
        "presets/huge-reference.yaml",
    ]
    assert remote["tables"][0] == local["tables"][0]
    assert remote["tables"][1]["problem"].startswith("presets/broken-reference.yaml: ")
    assert "more than the 1,048,576 allowed" in remote["tables"][2]["problem"]
    assert [t["source"] for t in local["tables"]] == [t["source"] for t in remote["tables"]]
    assert remote["histories"] == local["histories"]
    assert [c["moved"] for c in remote["histories"][0]["calibrations"]] == [False, True]
