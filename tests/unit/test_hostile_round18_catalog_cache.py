"""Round 18 (#49) F1, F2 and M9: the catalogue's disk cache holds no secret, is the user's alone, and is never stale.

F1: a run's error and model id (with a Bearer token, ``user:password@`` in a URL, an ``hf_`` token) were stored in
``~/.cache/alflow/catalog/<sha>.json`` as read, 0644 in a 0755 folder. M9: those modes. F2: the entry's signature was
its manifest's and regression.json's stat only, so a changed summary.json or spec_stats.parquet kept the old verdict
in memory and, through the disk cache, after a restart.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from alflow.results import catalog_cache
from alflow.results.catalog import ENTRY_FILES, Catalog, read_entry
from tests.regression_reports import m2_report
from tests.unit.test_catalog import key, point, write_run

pytestmark = pytest.mark.unit

BEARER = "sk-proj-SECRETSECRET1234567890abcd"
PASSWORD = "hunter2pass"
HF = "hf_abcdefghijklmnopqrstuvwxyzABCDEF"
CANARIES = (BEARER, PASSWORD, HF, "abcdefghijklmnopqrstuvwxyz")
ERROR = (
    f"server died: curl -H 'Authorization: Bearer {BEARER}' http://admin:{PASSWORD}@db.internal:5432/x "
    f"HF_TOKEN={HF}"
)


def _hostile_run(root: Path) -> Path:
    run = write_run(
        root,
        "2026-01-01T00:00:00+00:00",
        model=f"mdl-{HF}",
        points=[point(4, audit=f"audit against http://admin:{PASSWORD}@db.internal/x")],
        regression=m2_report([(key(model=f"mdl-{HF}"), "regressed")]),
    )
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "failed"
    manifest["error"] = ERROR
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_the_cache_stores_no_canary_of_a_runs_error_model_or_points(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "xdg" / "alflow" / "catalog"
    _hostile_run(root)
    write_run(root, "2026-01-02T00:00:00+00:00", model=f"http://admin:{PASSWORD}@hub.internal/m")
    first = Catalog(str(root), cache_dir=cache)
    assert first.reads == 2
    stored = _all_bytes(cache)
    assert stored  # the cache was written
    for canary in CANARIES:
        assert canary.encode() not in stored, canary
    # memory holds what the disk holds: a cold start from the cache gives the very same entries
    second = Catalog(str(root), cache_dir=cache)
    assert second.reads == 0
    assert second.entries() == first.entries()
    hostile = next(e for e in second.entries() if e.status == "failed")
    assert hostile.model == "mdl-***"
    assert hostile.error is not None
    assert "Bearer ***" in hostile.error
    assert "db.internal" in hostile.error
    # series keys and regression.json's verdicts are redacted alike: the verdict still finds its series
    assert hostile.verdict_of(key(model="mdl-***")) == "regressed"
    for entry in second.entries():
        text = json.dumps(entry.to_dict())
        assert not any(c in text for c in CANARIES), text


def test_read_entry_is_redacted_as_the_catalogue_holds_it(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path / "root")
    rel = f"m2/{run.name}"
    entry = read_entry(
        rel, str(run)
    )  # what the regression check judges: the same series keys as the catalogue
    assert entry.model == "mdl-***"
    assert [k.model for k, _ in entry.series()] == ["mdl-***"]
    assert entry.run_dir == str(run)  # where the run is stays as it is (it opens the run)
    assert entry == Catalog(str(tmp_path / "root")).get(rel)


def test_an_unreadable_runs_problem_is_redacted_too(tmp_path: Path) -> None:
    run = write_run(tmp_path / "root", "2026-01-01T00:00:00+00:00")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["started"] = f"http://admin:{PASSWORD}@x/{HF}"
    (run / "manifest.json").write_text(json.dumps(manifest))
    entry = Catalog(str(tmp_path / "root"), cache_dir=tmp_path / "cache").entries()[0]
    assert entry.status == "unreadable"
    assert entry.problem is not None
    assert PASSWORD not in entry.problem
    assert HF not in entry.problem
    assert PASSWORD.encode() not in _all_bytes(tmp_path / "cache")


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_cache_file_is_0600_in_a_0700_folder(tmp_path: Path, umask: int) -> None:
    root, xdg = tmp_path / "root", tmp_path / "xdg"
    xdg.mkdir(mode=0o755)
    cache = xdg / "alflow" / "catalog"
    write_run(root, "2026-01-01T00:00:00+00:00")
    old = os.umask(umask)
    try:
        Catalog(str(root), cache_dir=cache)
    finally:
        os.umask(old)
    (file,) = cache.iterdir()
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE((xdg / "alflow").stat().st_mode) == 0o700  # a folder it created
    assert stat.S_IMODE(xdg.stat().st_mode) == 0o755  # one that was there: left alone


def test_a_loose_cache_folder_of_the_user_is_tightened(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o755)
    (cache / "unrelated").write_text("x")
    write_run(root, "2026-01-01T00:00:00+00:00")
    Catalog(str(root), cache_dir=cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.glob("*.json"))


def test_the_cache_names_its_root_by_digest_only(tmp_path: Path) -> None:
    root = tmp_path / f"root-{PASSWORD}"
    write_run(root, "2026-01-01T00:00:00+00:00")
    Catalog(str(root), cache_dir=tmp_path / "cache")
    assert PASSWORD.encode() not in _all_bytes(tmp_path / "cache")  # a URL's credentials would be in its root
    assert Catalog(str(root), cache_dir=tmp_path / "cache").reads == 0  # and the cache is still its root's


def test_redacted_texts_leaves_kept_keys_and_says_none_without_a_hint() -> None:
    assert catalog_cache.redacted_texts({"a": "plain", "b": [1, {"c": "x"}]}) is None
    out = catalog_cache.redacted_texts({"a": [f"t {HF}"], "where": f"/r/{HF}"}, keep={"where"})
    assert out == {"a": ["t ***"], "where": f"/r/{HF}"}


# --------------------------------------------------------------------------------------------
# F2: freshness covers every file an entry is built from


def _bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_changed_summary_shows_its_new_verdict_in_memory_and_after_a_restart(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    run = write_run(root, "2026-01-01T00:00:00+00:00")
    catalog = Catalog(str(root), cache_dir=cache, min_refresh_s=0.0)
    assert catalog.entries()[0].outcome == "passed"
    summary = json.loads((run / "summary.json").read_text())
    summary["points"] = [point(4, valid=False, achieved_al=1.0, audit="edited: FAILED")]
    (run / "summary.json").write_text(json.dumps(summary))
    _bump(run / "summary.json")  # a later mtime even on a coarse clock; the manifest untouched
    catalog.refresh()
    assert catalog.entries()[0].outcome == "failed"
    assert [p.valid for p in catalog.entries()[0].points] == [False]
    restarted = Catalog(str(root), cache_dir=cache)
    assert restarted.reads == 0  # the cache was written with the new entry and its new signature
    assert restarted.entries()[0].outcome == "failed"


def test_a_summary_changed_behind_a_cache_is_read_again_on_a_cold_start(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    run = write_run(root, "2026-01-01T00:00:00+00:00")
    assert Catalog(str(root), cache_dir=cache).entries()[0].outcome == "passed"
    (run / "summary.json").write_text(json.dumps({"schema_version": 1, "flow": "m2", "passed": False}))
    _bump(run / "summary.json")
    cold = Catalog(str(root), cache_dir=cache)
    assert cold.reads == 1
    assert cold.entries()[0].outcome == "failed"


@pytest.mark.parametrize("name", ENTRY_FILES)
def test_every_file_an_entry_is_built_from_is_in_its_signature(tmp_path: Path, name: str) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    run = write_run(root, "2026-01-01T00:00:00+00:00", regression=m2_report([(key(), "unchanged")]))
    catalog = Catalog(str(root), cache_dir=cache, min_refresh_s=0.0)
    assert catalog.reads == 1
    catalog.refresh()
    assert catalog.reads == 1  # nothing changed: nothing read
    path = run / name
    if path.exists():
        _bump(path)
    else:
        path.write_bytes(b"appeared later")  # a table restored beside the same manifest
    catalog.refresh()
    assert catalog.reads == 2
    assert Catalog(str(root), cache_dir=cache).reads == 0  # the disk cache holds the new signature


def test_a_removed_table_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = write_run(root, "2026-01-01T00:00:00+00:00")
    (run / "spec_stats.parquet").write_bytes(b"x")
    catalog = Catalog(str(root), min_refresh_s=0.0)
    (run / "spec_stats.parquet").unlink()
    catalog.refresh()
    assert catalog.reads == 2


def test_a_secret_only_in_a_point_or_a_series_is_found_and_redacted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_run(root, "2026-01-01T00:00:00+00:00", points=[point(4, audit=f"ok, token={HF}")])
    write_run(
        root,
        "2026-01-02T00:00:00+00:00",
        regression=m2_report([(key(thinking=f"on {HF}"), "regressed")]),
    )
    Catalog(str(root), cache_dir=tmp_path / "cache")
    assert HF.encode() not in _all_bytes(tmp_path / "cache")
    assert catalog_cache.hinted({"a": (1, 2.0, None, [f"x {HF}"])})
    assert not catalog_cache.hinted({"a": (1, 2.0, None, ["plain"])})
