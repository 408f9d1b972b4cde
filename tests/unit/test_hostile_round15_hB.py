"""Hostile round 15 of issue #49 (R15-5, R15-6, R15-7): sizes of dataset files and of HTTP answers, eval's bounds.

R15-5: ``bench --dataset custom`` and ``--dataset speed-bench`` read a 3 GB sparse file whole (6.5 GB of memory); only
GSM8K files were refused by their size. Every dataset loader now refuses by ``stat`` before reading, one line.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from alflow.datasets.custom import load_custom
from alflow.datasets.gsm8k import load_gsm8k
from alflow.datasets.literature import load_literature
from alflow.datasets.speed_bench import load_speed_bench
from alflow.datasets.types import MAX_DATASET_BYTES, MAX_SPEED_BENCH_BYTES
from alflow.errors import InvalidInputError

pytestmark = pytest.mark.unit


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (a hole): reading it whole is what must not happen."""
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


LOADERS: list[tuple[str, str, int, Callable[[Path], object]]] = [
    ("custom", "custom prompt", MAX_DATASET_BYTES, load_custom),
    ("speed-bench", "SPEED-Bench", MAX_SPEED_BENCH_BYTES, load_speed_bench),
    ("gsm8k", "GSM8K", MAX_DATASET_BYTES, load_gsm8k),
    ("literature", "dataset", MAX_DATASET_BYTES, lambda p: load_literature("gsm8k", p)),
]


@pytest.mark.parametrize(("name", "what", "limit", "load"), LOADERS, ids=[row[0] for row in LOADERS])
def test_r15_5_every_dataset_file_is_refused_by_its_size(
    tmp_path: Path, name: str, what: str, limit: int, load: Callable[[Path], object]
) -> None:
    """One byte over the bound is one line naming the file, its size and the bound, before a byte is read."""
    path = _sparse(tmp_path / f"{name}.jsonl", limit + 1)
    with pytest.raises(InvalidInputError) as err:
        load(path)
    assert str(err.value) == (
        f"{what} file {path}: {limit + 1:,} bytes, larger than the {limit:,} bytes a {what} file may be"
    )


def test_r15_5_a_gzip_that_inflates_past_the_bound_is_refused(tmp_path: Path) -> None:
    """A small ``.jsonl.gz`` of one endless line is refused once its uncompressed bytes pass the bound."""
    path = tmp_path / "gsm8k.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as gz:
        block = b" " * (1 << 20)
        for _ in range(MAX_DATASET_BYTES // len(block) + 1):
            gz.write(block)
    assert path.stat().st_size < MAX_DATASET_BYTES
    with pytest.raises(InvalidInputError, match="bytes a dataset file may be, uncompressed"):
        load_literature("gsm8k", path)
