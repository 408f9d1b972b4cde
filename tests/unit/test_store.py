"""The run store: layout, atomic writes, incomplete runs, schema versions, URLs, load_runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from alflow.errors import InvalidInputError
from alflow.results import store

pytestmark = pytest.mark.unit


def _spec(al: float) -> pl.DataFrame:
    return pl.DataFrame({"k": [3], "al": [al], "num_drafts": [1000]})


def test_layout_manifest_and_round_trip(tmp_path: Path) -> None:
    started = datetime(2026, 11, 30, 5, 0, 0, tzinfo=UTC)
    with store.RunWriter(  # M1's spec_stats: its statistics (M2's is a table of points, checked as points)
        tmp_path,
        "m1",
        run_id="abc123",
        config={"k": 3},
        provenance={"image": "x"},
        simulated=True,
        started=started,
    ) as run:
        run.write_table("spec_stats", _spec(2.5))
        run.write_summary({"al": 2.5})
        run.update_provenance(image_digest="sha256:1")
    assert run.dir == str(tmp_path / "m1" / "20261130T050000Z-abc123")
    stored = store.open_run(run.dir)
    assert stored.status == "complete"
    assert stored.manifest.simulated is True
    assert stored.manifest.provenance.model_dump(exclude_none=True) == {
        "image": "x",
        "image_digest": "sha256:1",
    }
    assert stored.manifest.files["spec_stats.parquet"].rows == 1
    assert stored.table("spec_stats")["al"].to_list() == [2.5]
    assert stored.json("summary") == {"schema_version": 1, "al": 2.5}
    assert sorted(p.name for p in Path(run.dir).iterdir()) == [
        "manifest.json",
        "spec_stats.parquet",
        "summary.json",
    ]


def test_failure_marks_the_run_failed_and_keeps_files(tmp_path: Path) -> None:
    run = store.RunWriter(tmp_path, "m1")

    def crash() -> None:
        with run:
            run.write_table("requests", pl.DataFrame({"request_id": [1, 2]}))
            raise RuntimeError("server died")

    with pytest.raises(RuntimeError, match="server died"):
        crash()
    stored = store.open_run(run.dir)
    assert stored.status == "failed"
    assert "RuntimeError: server died" in str(stored.manifest.error)
    assert stored.table("requests").height == 2


def test_load_runs_across_runs(tmp_path: Path) -> None:
    for i, al in enumerate((2.4, 2.6)):
        with store.RunWriter(tmp_path, "m1", run_id=f"r{i}") as run:
            run.write_table(
                "spec_stats", _spec(al).with_columns(pl.lit("vllm" if i else "sglang").alias("framework"))
            )
    frame = store.load_runs(tmp_path)
    assert frame.height == 2
    assert sorted(frame["al"].to_list()) == [2.4, 2.6]
    assert set(frame.columns) >= {"flow", "run_id", "run_status", "run_started", "framework"}
    assert store.load_runs(tmp_path, flow="m2").is_empty()


def test_schema_version_is_checked(tmp_path: Path) -> None:
    with store.RunWriter(tmp_path, "m2") as run:
        run.write_table("spec_stats", _spec(2.0))
    manifest = Path(run.dir) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["schema_version"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.raises(store.StoreError, match="schema version 99"):
        store.open_run(run.dir)
    _spec(2.0).write_parquet(Path(run.dir) / "spec_stats.parquet")  # no version metadata
    data["schema_version"] = 1
    manifest.write_text(json.dumps(data))
    with pytest.raises(store.StoreError, match="schema version None"):
        store.open_run(run.dir).table("spec_stats")


def test_refuses_to_overwrite_and_bad_names(tmp_path: Path) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    store.RunWriter(tmp_path, "m0", run_id="same", started=started)
    with pytest.raises(store.StoreError, match="already holds a manifest"):
        store.RunWriter(tmp_path, "m0", run_id="same", started=started)
    with pytest.raises(InvalidInputError, match=r"flow '\.\./etc' is not a valid name"):
        store.RunWriter(tmp_path, "../etc")
    with pytest.raises(store.StoreError, match=r"has no requests\.parquet"):
        store.open_run(next(store.iter_runs(tmp_path)).dir).table("requests")


def test_url_root_through_fsspec() -> None:
    root = "memory://alflow-test-results"
    with store.RunWriter(root, "m1", run_id="mem1") as run:
        run.write_table("spec_stats", _spec(3.1))
        run.write_summary({"ok": True})
    assert run.dir.startswith("memory://")
    runs = list(store.iter_runs(root))
    assert [r.manifest.run_id for r in runs] == ["mem1"]
    assert store.load_runs(root)["al"].to_list() == [3.1]
    assert store.open_run(run.dir).json("summary")["ok"] is True


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_stored_files_honour_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    import os
    import stat

    old = os.umask(umask)
    try:
        with store.RunWriter(tmp_path, "m2", run_id="perm") as run:
            run.write_table("spec_stats", _spec(2.5))
            run.write_summary({"al": 2.5})
            run.write_text("report.md", "# report\n")
    finally:
        os.umask(old)
    files = sorted(Path(run.dir).iterdir())
    assert [p.name for p in files] == ["manifest.json", "report.md", "spec_stats.parquet", "summary.json"]
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: oct(mode) for p in files}


def test_stored_json_is_strict_with_notes(tmp_path: Path) -> None:
    with store.RunWriter(tmp_path, "m2", config={"target_al": float("nan")}) as run:
        run.write_summary({"speedup": float("inf"), "per_k": [1.5, float("-inf")]})

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a stored JSON file")

    summary = json.loads((Path(run.dir) / "summary.json").read_text(), parse_constant=refuse)
    assert summary["speedup"] is None
    assert summary["speedup_note"] == "not finite: inf"
    assert summary["per_k"] == [1.5, None]
    assert summary["per_k_note"] == "not finite at [1]: -inf"
    manifest = json.loads((Path(run.dir) / "manifest.json").read_text(), parse_constant=refuse)
    assert manifest["config"] == {"target_al": None, "target_al_note": "not finite: nan"}


def test_the_manifest_is_typed_and_a_bad_one_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    with store.RunWriter(tmp_path, "m2", run_id="typed1", config={"k": 2}) as run:
        run.update_provenance(
            server={"runner": "process", "dialect": "vllm", "provenance": {"framework": "sim"}}
        )
        run.update_provenance(target_al=2.5, scheme="vllm", topology={"nodes": 1})  # an unknown field is kept
    stored = store.open_run(run.dir)
    prov = stored.manifest.provenance
    assert prov.server is not None
    assert (prov.server.framework, prov.server.dialect, prov.target_al) == ("sim", "vllm", 2.5)
    assert prov.model_dump()["topology"] == {"nodes": 1}
    assert stored.manifest.files == {}
    with pytest.raises(store.StoreError, match=r"run provenance field target_al: .*'high'"):
        run.update_provenance(target_al="high")
    path = Path(run.dir) / "manifest.json"
    data = json.loads(path.read_text())
    data["status"] = "paused"
    path.write_text(json.dumps(data))
    with pytest.raises(store.StoreError, match=r"manifest.json: not a valid run manifest: status: "):
        store.open_run(run.dir)
    data["status"] = "complete"
    data["files"] = {"summary.json": {"rows": -1, "written": "2026-12-01"}}
    path.write_text(json.dumps(data))
    with pytest.raises(store.StoreError, match=r"files.summary.json.rows: "):
        store.open_run(run.dir)


def test_both_storages_list_files_and_open_them_for_reading_in_parts(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_bytes(b"a: 1\n")
    (tmp_path / "b.txt").write_bytes(b"0123456789")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "a.yaml")  # locally a symlink is not a file of the folder
    local = store.LocalStorage()
    assert local.list_files(str(tmp_path)) == [str(tmp_path / "a.yaml"), str(tmp_path / "b.txt")]
    assert local.list_files(str(tmp_path / "missing")) == []
    url = "memory://alflow-test-list-files"
    remote = store.FsspecStorage(url)
    remote.write_bytes(f"{url}/sub/x.json", b"{}")
    remote.write_bytes(f"{url}/b.txt", b"0123456789")
    try:
        assert [f.rsplit("/", 1)[1] for f in remote.list_files(url)] == ["b.txt"]
        assert [d.rsplit("/", 1)[1] for d in remote.list_dirs(url)] == ["sub"]
        assert remote.list_files(f"{url}/missing") == []
        for storage, path in ((local, str(tmp_path / "b.txt")), (remote, f"{url}/b.txt")):
            with storage.open_read(path) as f:
                assert (f.read(4), f.read()) == (b"0123", b"456789")
    finally:
        remote.fs.rm("/alflow-test-list-files", recursive=True)
