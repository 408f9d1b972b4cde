"""Hostile run folders (seeded, :mod:`tests.unit.hostile_runs`) against the catalogue, the results site and the
regression judge: no exception, no hang, no 500, every page within a second (issue #49 item 10)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from alflow.config.regression import RegressionSettings
from alflow.methods.regression import judge_run
from alflow.results.catalog import Catalog
from alflow.results.point_table import point_problem
from alflow.results.store import open_run
from tests.unit.hostile_runs import hostile_root, unblock_fifos
from tests.unit.test_site import M1, M2, serving

pytestmark = pytest.mark.unit

SEEDS = (0, 1, 2, 3, 4)
"""Five seeded roots a run (60 seeds, 0 to 59, passed when this was written: about 25 s on 2 cores)."""


@pytest.mark.parametrize("seed", SEEDS)
def test_the_catalogue_takes_every_hostile_folder_without_raising(tmp_path: Path, seed: int) -> None:
    root, rels = hostile_root(tmp_path, seed)
    try:
        started = time.monotonic()
        catalog = Catalog(str(root), min_refresh_s=0, cache_dir=tmp_path / "cache")
        catalog.refresh(force=True)
        again = Catalog(str(root), min_refresh_s=0, cache_dir=tmp_path / "cache")  # from the disk cache
        assert time.monotonic() - started < 10
        listed = {e.rel: e for e in catalog.entries()}
        assert set(rels) <= set(
            listed
        )  # every hostile folder is an entry: readable or unreadable, never missing
        assert {e.rel for e in again.entries()} == set(listed)
        for rel in rels:
            entry = listed[rel]
            assert entry.status != "unreadable" or entry.problem, rel  # an unreadable entry says why
            assert str(root) not in (entry.problem or ""), rel  # named by its rel, not the server's path
            assert all(point_problem(p) is None for p in entry.points), (
                rel
            )  # round 17: never an impossible point
        assert listed["m2/20261399T250000Z-baddate"].status == "unreadable"
        assert listed[M2].status == "complete"  # the good runs are still read
    finally:
        unblock_fifos(root)


@pytest.mark.parametrize("seed", SEEDS)
async def test_every_page_of_the_site_answers_fast_and_never_500_over_hostile_folders(
    tmp_path: Path, seed: int
) -> None:
    root, rels = hostile_root(tmp_path, seed)
    paths = ["/", "/api/runs", "/trends", "/api/trends", "/reference", "/api/reference"]
    for rel in rels:
        paths += [f"/runs/{rel}/", f"/api/runs/{rel}", f"/runs/{rel}/files/manifest.json"]
        paths += [f"/compare?run={rel}&run={M2}", f"/api/compare?run={M1}&run={rel}"]
    try:
        async with serving(root) as site:
            for path in paths:
                started = asyncio.get_running_loop().time()
                answer = await site.get(path)
                took = asyncio.get_running_loop().time() - started
                assert answer.status in (200, 400, 404, 413), (path, answer.status, answer.text[:300])
                assert took < 1.0, (path, took)
    finally:
        unblock_fifos(root)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_regression_judge_never_raises_and_says_what_it_skipped(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the judge's catalogue cache: not the user's
    root, _ = hostile_root(tmp_path, seed)
    try:
        report = judge_run(open_run(root / M2), RegressionSettings(resamples=200))
        assert report.points  # the good run's points were judged
        (note,) = report.notes
        assert "run folder(s) of the results root could not be read and are no history" in note
    finally:
        unblock_fifos(root)


def test_local_storage_reads_regular_files_and_links_to_them_never_a_fifo_or_device(tmp_path: Path) -> None:
    """Results deduplicated by symlinks still read; a FIFO or /dev/zero where a file should be is refused at once."""
    from alflow.results.store import LocalStorage

    blob = tmp_path / "objects" / "blob"
    blob.parent.mkdir()
    blob.write_bytes(b'{"a": 1}')
    (tmp_path / "linked.json").symlink_to(blob)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    storage = LocalStorage()
    assert storage.read_bytes(str(tmp_path / "linked.json")) == b'{"a": 1}'
    for name in ("fifo.json", "zero.json"):
        started = time.monotonic()
        with pytest.raises(OSError, match="not a regular file"):
            storage.read_bytes(str(tmp_path / name))
        assert time.monotonic() - started < 1.0
