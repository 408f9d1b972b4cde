"""The reference table with processes: writers in four processes lose no entry; a remote path refused by ``alflow run m0``."""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.reference import table as ref
from tests.unit.test_reference import _empty, _entry, _write_one

pytestmark = pytest.mark.integration


def test_remote_reference_paths_are_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    from alflow.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"reference table 's3://b/coding\.yaml' is a s3:// URL"):
        ref.update_reference("s3://b/coding.yaml", [_entry(1, 1.5)], new=_empty())
    # the command line refuses it before any work: exit 2, one line naming the file and the field
    config = tmp_path / "m0.yaml"
    config.write_text(
        "models: [{id: m}]\nserver: {framework: sim, model: m}\nreference_path: gs://b/c.yaml\n"
    )
    alflow = str(Path(sys.executable).parent / "alflow")
    out = subprocess.run(
        [alflow, "run", "m0", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {config}: reference_path: ")
    assert "'gs://b/c.yaml' is a gs:// URL: reference tables are local files" in out.stderr
    assert out.stderr.count("\n") == 1


def test_concurrent_writer_processes_lose_no_entry(tmp_path: Path) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    path = str(tmp_path / "coding.yaml")
    jobs = [(k, model) for model in ("a", "b") for k in range(1, 7)]
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        for future in [pool.submit(_write_one, path, k, model) for k, model in jobs]:
            future.result()
    table = ref.load_reference(path)
    assert sorted((e.model, e.k) for e in table.entries) == sorted((m, k) for k, m in jobs)
