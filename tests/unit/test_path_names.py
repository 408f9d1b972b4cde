"""Issue #49: a path no system call can take is one line naming the option, never an ``OSError`` traceback.

A final name (or any folder's) longer than the file system allows (``ENAMETOOLONG``: 255 bytes on ext4 and tmpfs)
gave a traceback in ``bench --out``, ``eval gsm8k --out`` and ``--test-file``, ``reference m0-config --out``,
``reference import-inferencex --into``, ``reference export-inferencex --out``, ``sim serve --step-log`` and
``--answer-key``, ``demo --results-root`` and the webhook's ``--out``. One check
(:func:`alflow.util.pathnames.path_name_problem`, :func:`alflow.util.names.check_path_name`) now answers every path a
user names, before any work; a write that fails after the work (a full disk) is one line too.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from alflow import bench as bench_core
from alflow.bench import check_out_dir
from alflow.cli import app
from alflow.cli import bench as bench_cli
from alflow.config.base import check_local_path
from alflow.errors import InvalidInputError
from alflow.util.fsutil import atomic_write_bytes, check_writable_dir, check_writable_file, file_problem
from alflow.util.names import check_log_dir, check_output_file, check_path_name
from alflow.util.pathnames import NAME_MAX, PATH_MAX, path_name_problem
from alflow_deployments import webhook
from tests.unit.test_hostile_round13_outputs import _m0_args

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9"
LONG = "a" * 300
"""A name longer than any Linux file system allows (255 bytes)."""


@pytest.fixture
def tmp_path(short_tmp: Path) -> Path:
    """A short folder: the paths below are long only by the name under test."""
    return short_tmp


# -- the helper ----------------------------------------------------------------------------------------------------


def test_a_name_longer_than_the_file_system_allows_is_named_with_its_length(tmp_path: Path) -> None:
    for path in (tmp_path / LONG, tmp_path / LONG / "x.json", tmp_path / "new" / LONG / "deeper" / "x.json"):
        problem = path_name_problem(str(path))
        assert problem is not None
        assert "a name (a part between slashes) of 300 bytes" in problem, problem
        assert f"longer than the {os.pathconf(tmp_path, 'PC_NAME_MAX')} bytes" in problem, problem


def test_names_are_counted_in_bytes_not_characters(tmp_path: Path) -> None:
    """128 Japanese characters are 384 bytes of UTF-8: too long, though 128 characters are fewer than 255."""
    assert path_name_problem(str(tmp_path / ("\u65e5" * 128))) is not None
    assert path_name_problem(str(tmp_path / ("\u65e5" * 85))) is None  # 255 bytes: the most allowed


def test_a_name_of_exactly_name_max_bytes_is_fine(tmp_path: Path) -> None:
    assert path_name_problem(str(tmp_path / ("b" * NAME_MAX) / "x")) is None
    assert path_name_problem(str(tmp_path / ("b" * (NAME_MAX + 1)))) is not None


def test_a_path_longer_than_path_max_is_refused_whole_even_with_short_names(tmp_path: Path) -> None:
    deep = "/".join(["abcdefgh"] * (PATH_MAX // 9 + 1))
    problem = path_name_problem(str(tmp_path / deep))
    assert "bytes a path may have" in (problem or ""), problem
    relative = path_name_problem("x/" * (PATH_MAX // 2))  # made absolute: the folder it is in counts too
    assert "bytes a path may have" in (relative or ""), relative


def test_a_nul_and_bytes_that_are_not_utf8_are_refused() -> None:
    assert "NUL" in (path_name_problem("out/a\0b.json") or "")
    undecodable = os.fsdecode(b"out/\xff\xfe.json")  # a command line's Latin-1 bytes: lone surrogates
    assert "not valid UTF-8" in (path_name_problem(undecodable) or "")


def test_ordinary_paths_pass(tmp_path: Path) -> None:
    for ok in ("out.json", "results", "~/x.json", "/", ".", str(tmp_path / "new" / "deep" / "x.json")):
        assert path_name_problem(ok) is None, ok


def test_check_path_name_is_one_line_naming_the_option_and_the_cut_path(tmp_path: Path) -> None:
    path = str(tmp_path / LONG / "x.json")
    with pytest.raises(ValueError, match="has a name") as err:
        check_path_name(path, what="--out")
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"--out {path[:80]!r}... ({len(path):,} characters) has a name"), line
    assert check_path_name(tmp_path / "x.json", what="--out") == str(tmp_path / "x.json")


def test_every_shared_path_check_refuses_a_name_too_long(tmp_path: Path) -> None:
    """The checks of outputs, folders, config paths and input files: each one line (they raised ``OSError``)."""
    long_dir = tmp_path / LONG
    long_file = long_dir / "x.json"
    checks: list[Callable[[], object]] = [
        lambda: check_output_file(str(long_file), what="--output"),
        lambda: check_log_dir(str(long_dir)),
        lambda: check_out_dir(long_dir),
        lambda: check_writable_dir(long_dir, what="results_root"),
        lambda: check_writable_file(long_file, what="reference_path"),
        lambda: check_local_path(str(long_dir)),
    ]
    for check in checks:
        with pytest.raises(ValueError, match=r"a name .* of 300 bytes"):
            check()
    assert "of 300 bytes" in (file_problem(long_file) or "")


# -- the commands --------------------------------------------------------------------------------------------------


COMMANDS: dict[str, tuple[str, Callable[[Path, str], list[str]]]] = {
    "bench --out": ("--out", lambda t, p: ["bench", "--base-url", DEAD_URL, "--out", p]),
    "eval gsm8k --out": (
        "--out",
        lambda t, p: ["eval", "gsm8k", "--base-url", DEAD_URL, "--model", "m", "--out", p],
    ),
    "eval gsm8k --test-file": (
        "GSM8K file",
        lambda t, p: ["eval", "gsm8k", "--base-url", DEAD_URL, "--model", "m", "--test-file", p],
    ),
    "reference m0-config --out": ("--out", lambda t, p: _m0_args(Path(p))),
    "reference import-inferencex --into": (
        "--into",
        lambda t, p: [
            "reference",
            "import-inferencex",
            str(ROOT / "references" / "models.yaml"),
            "--into",
            p,
        ],
    ),
    "reference export-inferencex --out": (
        "--out",
        lambda t, p: ["reference", "export-inferencex", str(t / "missing.yaml"), "--out", p],
    ),
    "sim serve --step-log": ("--step-log", lambda t, p: ["sim", "serve", "--step-log", p]),
    "sim serve --answer-key": ("--answer-key", lambda t, p: ["sim", "serve", "--answer-key", p]),
    "report show --output": ("--output", lambda t, p: ["report", "show", str(t), "-f", "md", "-o", p]),
    "report k-schedule --out": ("--out", lambda t, p: ["report", "k-schedule", str(t), "--out", p]),
    "report compare --root": ("--root", lambda t, p: ["report", "compare", "--root", p]),
    "results serve ROOT": ("ROOT", lambda t, p: ["results", "serve", p]),
    "demo --results-root": ("--results-root", lambda t, p: ["demo", "--results-root", p]),
}


def _one_line(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("where", ["final name", "a folder's name"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_answers_a_name_too_long_in_one_line_naming_its_option(
    command: str, where: str, tmp_path: Path
) -> None:
    option, argv = COMMANDS[command]
    path = tmp_path / LONG if where == "final name" else tmp_path / LONG / "x.json"
    line = _one_line(CliRunner().invoke(app, argv(tmp_path, str(path))))
    assert line.startswith(f"error: {option} "), line
    assert "300 bytes" in line, line


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_answers_a_path_not_in_utf8_in_one_line_naming_its_option(
    command: str, tmp_path: Path
) -> None:
    """A command line's bytes of another encoding (Latin-1 ``\xff``) reach Python as lone surrogates."""
    option, argv = COMMANDS[command]
    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9.json")
    line = _one_line(CliRunner().invoke(app, argv(tmp_path, path)))
    assert line.startswith(f"error: {option} "), line
    assert "is not valid UTF-8" in line, line


def test_tiny_serve_model_too_long_is_one_line_before_the_engine_loads(tmp_path: Path) -> None:
    pytest.importorskip("numpy")  # the tiny engine's module needs it (alflow[tiny])
    line = _one_line(CliRunner().invoke(app, ["tiny", "serve", "--model", str(tmp_path / LONG / "m.gguf")]))
    assert line.startswith("error: --model "), line
    assert "300 bytes" in line, line


def test_the_webhook_out_too_long_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / LONG / "automations.yaml"
    assert webhook.main(["--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: --out "), lines
    assert "300 bytes" in lines[0], lines


def test_bench_out_that_fails_after_the_load_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fills during the load: the write of records.parquet was an ``OSError`` traceback."""

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(bench_core, "write_records", disk_full)
    out = tmp_path / "run"
    said = bench_core._write_out(out, [], {}, {"completed": 1})
    assert said == f"--out '{out}': cannot write the run's files (No space left on device)"
    with pytest.raises(InvalidInputError, match="300 bytes"):
        check_out_dir(tmp_path / LONG)


def test_bench_prints_the_summary_then_the_write_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench_core.BenchResult(
        {"completed": 3, "failed": 0}, True, "--out 'run': cannot write the run's files"
    )
    with pytest.raises(typer.Exit) as stop:
        bench_cli._report(result, json_out=True, api_key=None)
    assert stop.value.exit_code == 2
    said = capsys.readouterr()
    assert '"completed": 3' in said.out
    assert (
        said.err.strip() == "error: --out 'run': cannot write the run's files; the summary is printed above"
    )


def test_an_atomic_write_to_a_device_writes_through_and_never_replaces_it(tmp_path: Path) -> None:
    """``report show -o /dev/null`` as root renamed a temporary file over /dev/null: a regular file for everyone."""
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("no permission to make a device node here")
    assert atomic_write_bytes(device, b"report") == device
    assert stat.S_ISCHR(device.stat().st_mode), "the device was replaced by a regular file"
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary file left beside it
    regular = tmp_path / "r.md"
    atomic_write_bytes(regular, b"report")
    assert regular.read_bytes() == b"report"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="a block device, FIFO or socket"):
        atomic_write_bytes(tmp_path / "fifo", b"report")  # neither blocks for a reader nor replaces the FIFO
    assert stat.S_ISFIFO((tmp_path / "fifo").stat().st_mode)
