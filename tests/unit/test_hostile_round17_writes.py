"""Hostile round 17 of issue #49: ``alflow bench --out`` on a full disk.

The load ran, then ``records.parquet`` failed inside polars (a ``ComputeError`` traceback) or ``snapshots.json``
was cut short (an ``OSError`` traceback): no summary printed, an empty or truncated file left that looked like
output. Each file is now written whole or not at all, and the failure is one line after the printed summary.
A full disk is made real with ``RLIMIT_FSIZE`` (writes past the size fail with ``EFBIG``), in this process only.
"""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from alflow.bench import _write_out
from alflow.loadgen.frames import write_records
from alflow.loadgen.records import RequestRecord

pytestmark = pytest.mark.unit


@contextlib.contextmanager
def _disk_of(size: int) -> Iterator[None]:
    """Each regular file written in the block may grow to ``size`` bytes; a write past it fails (EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the signal's default ends the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def _records(n: int) -> list[RequestRecord]:
    return [
        RequestRecord(request_id=i, session_id=f"s{i}", start_ns=i, chunk_ns=list(range(i, i + 200)))
        for i in range(n)
    ]


def test_records_on_a_full_disk_are_an_oserror_and_no_file(tmp_path: Path) -> None:
    with _disk_of(4096), pytest.raises(OSError, match="too large"):  # EFBIG: File too large
        write_records(tmp_path / "records.parquet", _records(2000))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", [4096, 200_000])  # records fail / records fit and snapshots.json fails
def test_bench_out_on_a_full_disk_is_one_line_and_no_partial_file(tmp_path: Path, size: int) -> None:
    out = tmp_path / "b1"
    snapshots = {"scrapes": ["x" * 300_000]}  # past either size
    summary = {"completed": 2000}
    with _disk_of(size):
        why = _write_out(out, _records(2000), snapshots, summary)
    assert why is not None
    assert why.startswith(f"--out '{out}': cannot write the run's files ("), why
    assert "\n" not in why
    for path in out.iterdir():  # what is there is whole: never an empty or cut file
        assert path.name in ("records.parquet", "snapshots.json", "summary.json"), path
        assert path.stat().st_size > 0
        if path.suffix == ".json":
            assert path.read_bytes().endswith(b"}"), path
    assert not (out / "summary.json").exists()
