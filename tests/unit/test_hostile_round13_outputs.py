"""Hostile round 13 of issue #49: files the commands write (R13-11, R13-12) and a reference table's command (R13-13).

R13-11: ``eval gsm8k --out`` was written after the evaluation, unchecked: a FIFO hung, a folder, ``/dev/full`` or a
path under a regular file gave a traceback and the scores were lost. R13-12: ``reference m0-config --out`` the same,
and ``reference import-inferencex --into`` under a regular file a traceback. R13-13: a reference table's
``provenance.command`` holding ``--api-key X`` or ``--hf-token=X`` was valid and ``reference show --json`` printed
the values.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alflow.cli import app
from alflow.errors import InvalidInputError
from alflow.evals.gsm8k import EvalResult, QuestionResult
from alflow.reference import table as ref
from alflow.util.names import check_output_file
from tests.unit.report_runs import write_m2
from tests.unit.test_reference import _empty, _entry
from tests.unit.test_reference_variants import GOLDEN_KIMI_PROB

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


class WorkStarted(AssertionError):
    """The command began its work before refusing its output file."""


@pytest.fixture
def tmp_path(short_tmp: Path) -> Path:
    """A short folder (``short_tmp``): the one-line messages cut long paths."""
    return short_tmp


def _bad_paths(tmp_path: Path) -> dict[str, Path]:
    """One path of each kind a file cannot be written at: made on disk where it must exist."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.json").mkdir()
    os.mkfifo(tmp_path / "fifo.json")
    return {
        "fifo": tmp_path / "fifo.json",
        "folder": tmp_path / "folder.json",
        "under-a-file": tmp_path / "afile" / "x.json",
        "deep-under-a-file": tmp_path / "afile" / "a" / "b" / "x.json",
        "dev-full": Path("/dev/full"),
        "proc": Path("/proc/self/x.json"),
    }


KINDS = ("fifo", "folder", "under-a-file", "deep-under-a-file", "dev-full", "proc")
SAID = {
    "fifo": "is not a regular file (a FIFO, socket or device)",
    "folder": "is a folder",
    "under-a-file": "its folder '{tmp}/afile' is not a folder",
    "deep-under-a-file": "is under '{tmp}/afile', which is not a folder",
    "dev-full": "is under /dev: give a file on a disk",
    "proc": "is under /proc: give a file on a disk",
}


def _eval_args(out: Path, *more: str) -> list[str]:
    return ["eval", "gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--out", str(out), *more]


def _m0_args(out: Path) -> list[str]:
    catalogue = str(ROOT / "references" / "models.yaml")
    return [
        "reference",
        "m0-config",
        "--models",
        "deepseek-ai/DeepSeek-V3.1",
        "--catalogue",
        catalogue,
        "--out",
        str(out),
    ]


def _import_args(golden: Path, into: Path) -> list[str]:
    return ["reference", "import-inferencex", str(golden), "--into", str(into)]


def _refuse_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's first piece of work raises: a check after it (or none) fails the test, never hangs it."""

    async def evaluate(request: object) -> EvalResult:
        raise WorkStarted("the evaluation ran before --out was checked")

    def work(*args: object, **kwargs: object) -> Any:
        raise WorkStarted("the command's work ran before its output file was checked")

    monkeypatch.setattr("alflow.cli.evals.evaluate_gsm8k", evaluate)
    monkeypatch.setattr("alflow.cli.reference.load_yaml_model", work)
    monkeypatch.setattr("alflow.reference.inferencex.import_golden", work)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert not isinstance(result.exception, WorkStarted), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "command", ["eval gsm8k --out", "reference m0-config --out", "import-inferencex --into"]
)
def test_an_output_file_that_cannot_be_written_is_one_line_exit_2_before_any_work(
    command: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R13-11, R13-12: a FIFO hung the write; a folder, a device or a path under a file failed after the work."""
    _refuse_work(monkeypatch)
    out = _bad_paths(tmp_path)[kind]
    golden = tmp_path / "golden.yaml"
    golden.write_text(GOLDEN_KIMI_PROB)
    args: Callable[[Path], list[str]] = {
        "eval gsm8k --out": _eval_args,
        "reference m0-config --out": _m0_args,
        "import-inferencex --into": lambda o: _import_args(golden, o),
    }[command]
    option = command.rsplit(" ", 1)[1]
    line = _one_error_line(CliRunner().invoke(app, args(out)))
    assert line.startswith(f"error: {option} '{out}'"), line
    assert SAID[kind].format(tmp=tmp_path) in line, line
    assert (tmp_path / "afile").read_text() == "x"


def test_check_output_file_refuses_a_path_under_a_regular_file_and_lets_missing_folders_be(
    tmp_path: Path,
) -> None:
    """The shared check (report -o, k-schedule --out, the webhook's --out too): the first folder that exists."""
    (tmp_path / "afile").write_text("x")
    for bad in ("afile/x.md", "afile/a/b/x.md"):
        with pytest.raises(ValueError, match=r"afile'.* not a folder"):
            check_output_file(str(tmp_path / bad), what="-o")
    assert check_output_file(str(tmp_path / "new" / "sub" / "x.md")) == tmp_path / "new" / "sub" / "x.md"
    assert check_output_file(str(tmp_path / "afile")) == tmp_path / "afile"  # a regular file: replaced


def test_report_output_under_a_regular_file_names_the_option(tmp_path: Path) -> None:
    """``report show -o afile/x.md`` said "could not read the run(s) ..., md, afile/x.md: FileExistsError"."""
    run = write_m2(tmp_path / "root")
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "x.md"
    result = CliRunner().invoke(app, ["report", "show", str(run), "-f", "md", "-o", str(out)])
    line = _one_error_line(result)
    assert line.startswith(f"error: --output '{out}': its folder '{tmp_path}/afile' is not a folder"), line


def _result(n: int = 4) -> EvalResult:
    rows = tuple(
        QuestionResult(
            f"q{i}", "42", "The answer is 42", "42", "42", strict_correct=True, flexible_correct=True
        )
        for i in range(n)
    )
    return EvalResult(model="m", results=rows, num_shots=5, seed=1, limit=n, population=1319, duration_s=1.0)


def _disk_full(*args: object, **kwargs: object) -> Path:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_eval_out_that_fails_after_the_work_keeps_the_scores_and_says_so_in_one_line(
    as_json: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R13-11: a write that fails after the evaluation (a full disk) lost the scores behind a traceback."""

    async def evaluate(request: object) -> EvalResult:
        return _result()

    monkeypatch.setattr("alflow.cli.evals.evaluate_gsm8k", evaluate)
    monkeypatch.setattr("alflow.cli.common.atomic_write_bytes", _disk_full)
    monkeypatch.setattr("pathlib.Path.write_text", _disk_full)  # the unmended write
    out = tmp_path / "per-question.json"
    result = CliRunner().invoke(app, _eval_args(out, *(["--json"] if as_json else [])))
    line = _one_error_line(result)
    assert line == (
        f"error: --out '{out}': cannot write it (No space left on device); the scores are printed above"
    ), line
    if as_json:
        data = json.loads(result.stdout)
        assert data["questions"] == 4
        assert data["scores"]["strict-match"]["accuracy"] == 1.0, data["scores"]
    else:
        assert "strict-match" in result.stdout
        assert "1.0000" in result.stdout


def test_eval_out_is_written_whole_after_the_scores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mended write still writes: the summary and every question, into a folder it creates."""

    async def evaluate(request: object) -> EvalResult:
        return _result(3)

    monkeypatch.setattr("alflow.cli.evals.evaluate_gsm8k", evaluate)
    out = tmp_path / "new" / "per-question.json"
    result = CliRunner().invoke(app, _eval_args(out))
    assert result.exit_code == 0, result.output
    assert [r["problem_id"] for r in json.loads(out.read_text())["results"]] == ["q0", "q1", "q2"]


def test_m0_config_out_that_fails_at_the_write_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R13-12: ``OSError: [Errno 28] No space left on device`` was a traceback."""
    monkeypatch.setattr("alflow.cli.common.atomic_write_bytes", _disk_full)
    monkeypatch.setattr("pathlib.Path.write_text", _disk_full)
    out = tmp_path / "m0.yaml"
    line = _one_error_line(CliRunner().invoke(app, _m0_args(out)))
    assert line == f"error: --out '{out}': cannot write it (No space left on device)", line


def test_report_output_that_fails_at_the_write_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``report -o`` on a full disk said "could not read the run(s) ... (a damaged or foreign file ...?)"."""
    run = write_m2(tmp_path / "root")
    monkeypatch.setattr("alflow.cli.common.atomic_write_bytes", _disk_full)
    monkeypatch.setattr("pathlib.Path.write_text", _disk_full)
    out = tmp_path / "report.md"
    line = _one_error_line(CliRunner().invoke(app, ["report", "show", str(run), "-f", "md", "-o", str(out)]))
    assert line == f"error: --output '{out}': cannot write it (No space left on device)", line


def test_export_inferencex_out_under_a_regular_file_is_one_line(tmp_path: Path) -> None:
    """``reference export-inferencex --out`` (a folder) under a regular file: checked before the table is read."""
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "golden"
    result = CliRunner().invoke(
        app, ["reference", "export-inferencex", str(tmp_path / "missing.yaml"), "--out", str(out)]
    )
    line = _one_error_line(result)
    assert line.startswith(f"error: --out '{out}' is under {tmp_path}/afile, which is a regular file"), line


# -- R13-13 ---------------------------------------------------------------------------------------------------

SECRETS = {
    "separate flag value": (["--api-key", "REFAPIKEY1"], ["--api-key", "***"]),
    "flag=value": (["--hf-token=REFHF2"], ["--hf-token=***"]),
    "secret header": (["--header", "X-Api-Key: REFHDR3"], ["--header", "X-Api-Key: ***"]),
    "bearer header": (
        ["--header", "Authorization: Bearer REFBEARER4abc"],
        ["--header", "Authorization: ***"],
    ),
    "NAME=value": (["-e", "HF_TOKEN=REFENV5"], ["-e", "HF_TOKEN=***"]),
    "JSON key": (['{"aws_secret_access_key": "REFJSON7"}'], ['{"aws_secret_access_key": "***"}']),
}
PLAIN = [
    "vllm",
    "serve",
    "deepseek-ai/DeepSeek-V3.1",
    "--speculative-config",
    '{"method": "mtp", "num_speculative_tokens": 3}',
    "--otlp-traces-endpoint",
    "tcp://h:4317",
    "-e",
    "HF_TOKEN",
]


def _table_with_command(path: Path, command: list[str]) -> Path:
    ref.update_reference(path, [_entry(1, 1.5)], new=_empty())
    data = yaml.safe_load(path.read_text())
    data["entries"][0]["provenance"]["command"] = command
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("case", list(SECRETS))
def test_a_reference_tables_command_reads_back_without_its_secrets(case: str, tmp_path: Path) -> None:
    """R13-13: ``reference show --json`` printed ``--api-key``'s value; the table is read as a manifest is."""
    given, redacted = SECRETS[case]
    path = _table_with_command(tmp_path / "t.yaml", [*PLAIN, *given])
    secret = next(w for w in "".join(given).replace('"', " ").split() if "REF" in w)
    table = ref.load_reference(path)
    assert table.entries[0].provenance is not None
    assert list(table.entries[0].provenance.command or ()) == [*PLAIN, *redacted]
    result = CliRunner().invoke(app, ["reference", "show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert "REF" not in result.stdout, secret
    assert "***" in result.stdout
    ref.update_reference(path, [_entry(2, 1.7)], new=_empty())  # a write-back keeps no secret on disk
    assert "REF" not in path.read_text()


def test_a_reference_tables_plain_command_is_kept_as_it_is(tmp_path: Path) -> None:
    """The redaction changes nothing else: a speculative config, a tcp:// endpoint, a secret's name alone."""
    path = _table_with_command(tmp_path / "t.yaml", PLAIN)
    provenance = ref.load_reference(path).entries[0].provenance
    assert provenance is not None
    assert list(provenance.command or ()) == PLAIN


def test_a_reference_tables_command_with_a_url_password_is_refused_without_its_value(tmp_path: Path) -> None:
    """A URL's password in any field of a table is refused at validation (as in configuration), never shown."""
    path = _table_with_command(tmp_path / "t.yaml", [*PLAIN, "--otlp", "http://u:REFPW6@h/x"])
    result = CliRunner().invoke(app, ["reference", "validate", str(path)])
    line = _one_error_line(result)
    assert "entries[0].provenance.command" in line, line
    assert "REFPW6" not in result.output


@pytest.mark.parametrize("option", ["--test-file", "--train-file"])
def test_a_gsm8k_file_too_large_is_refused_by_its_size_before_it_is_read(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R13-11 (also): a 2 GB file of one line was read whole (18 s), then "not valid JSON (Not enough memory)"."""
    from alflow.datasets import gsm8k as loader

    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:
        fh.truncate(loader.MAX_FILE_BYTES + 1)  # sparse: no disk used
    monkeypatch.setattr("alflow.datasets.types.orjson.loads", _disk_full)  # a read line would fail the test
    with pytest.raises(InvalidInputError, match=r"huge.jsonl: 67,108,865 bytes, larger than the 67,108,864"):
        loader.read_rows(huge)
    monkeypatch.undo()  # the bundled split is read as usual
    result = CliRunner().invoke(app, _eval_args(tmp_path / "o.json", option, str(huge), "--limit", "1"))
    line = _one_error_line(result)
    assert f"GSM8K file {huge}: 67,108,865 bytes" in line, line
