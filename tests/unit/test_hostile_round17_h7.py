"""Hostile round 17 of issue #49 (F5, F4, M6): eval's options, a server's refusal, the terminal's encoding.

F5: ``eval gsm8k --threshold nan`` passed the accuracy gate (so did ``-inf``), ``--threshold 5`` made a gate that
can never pass, and temperature, max-tokens, concurrency, seed, limit, instruction and model went unchecked to the
server; a server refusing every question (HTTP 400) was reported as "no answer ... within --timeout".
F4: a terminal (``PYTHONIOENCODING=ascii``) that cannot encode a model id was blamed on the run ("a damaged or
foreign file in the run directory?", exit 2). M6: ``bench --category`` with ``--dataset random`` was ignored.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.cli.common import say, tolerant_output, unencodable_output_line
from alflow.cli.root import main
from alflow.errors import InvalidInputError
from alflow.evals.gsm8k import EvalResult, Problem, score_reply
from alflow.evals.thresholds import check_threshold, load_thresholds, threshold_problem
from alflow.gates import accuracy_gate
from tests.unit.flood_server import threaded_server
from tests.unit.report_runs import write_m0

pytestmark = pytest.mark.unit

CLOSED = "http://127.0.0.1:9"
"""A port nothing listens on: a check that passed would end in "cannot reach", never in the option's line."""
EVAL = ["eval", "gsm8k", "--base-url", CLOSED, "--model", "m", "--limit", "4", "--concurrency", "2"]
FINITE_01 = "must be a finite number in [0, 1]"


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value", "wanted"),
    [
        ("--threshold", "nan", FINITE_01),
        ("--threshold", "-inf", FINITE_01),
        ("--threshold", "-1e308", FINITE_01),
        ("--threshold", "-0.1", FINITE_01),
        ("--threshold", "5", FINITE_01),
        ("--threshold", "inf", FINITE_01),
        ("--temperature", "nan", "must be a finite number >= 0"),
        ("--temperature", "-1", "must be a finite number >= 0"),
        ("--max-tokens", "99999999999", "must be an integer in [1, "),
        ("--concurrency", "100000000", "must be an integer in [1, "),
        ("--seed", "-1", "must be an integer in [0, "),
        ("--limit", "99999999999999999999", "must be an integer in [1, "),
        ("--limit", "0", "must be an integer in [1, "),
        ("--shots", "-1", "must be an integer >= 0"),
        ("--instruction", "\x1b[2J", "holds the control or format character(s) U+001B"),
        ("--instruction", "a\u202eb", "U+202E"),
        (
            "--model",
            "m\u200bm",
            "holds the control character(s) U+200B",
        ),  # an instruction may hold one: prompt text
        ("--model", "\u202em", "holds the control character(s) U+202E"),
        ("--model", "m\x1b]0;x\x07", "U+0007, U+001B"),
    ],
)
def test_f5_every_eval_option_is_checked_before_any_question(option: str, value: str, wanted: str) -> None:
    """One line naming the option, the value and what is allowed, exit 2, nothing asked (a closed port)."""
    result = CliRunner().invoke(app, [*EVAL, f"{option}={value}"])
    line = _one_error_line(result.output)
    assert result.exit_code == 2, result.output
    assert line.startswith(f"error: {option} "), line
    assert wanted in line, line
    assert "cannot reach" not in line
    assert "--base-url" not in line
    assert "\x1b" not in line
    assert "\u202e" not in line


def test_f5_an_instruction_of_several_lines_and_a_unicode_model_pass_the_checks() -> None:
    """Newlines and tabs in a system message and a model id in any script are not refused: the request is tried."""
    result = CliRunner().invoke(
        app, [*EVAL[:4], "--model", "modèle-日本", "--instruction", "Solve.\n\tStep by step.", "--limit", "1"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot reach" in _one_error_line(result.output)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1e308, -0.1, 1.0000001, 5.0])
def test_f5_the_yaml_and_the_option_apply_one_threshold_rule(tmp_path: Path, value: float) -> None:
    """The thresholds file (default and per model), ``--threshold`` and the gate itself refuse the same values."""
    assert threshold_problem(value) is not None
    with pytest.raises(InvalidInputError, match=r"--threshold .*: must be a finite number in \[0, 1\]"):
        check_threshold(value, "--threshold")
    problems = []
    if math.isfinite(
        value
    ):  # YAML's .nan / .inf are refused earlier by the YAML reader, as any non-finite number
        number = format(value, ".17e")  # YAML 1.1 reads a float with a dot and a signed exponent only
        for text in (f"default: {number}\n", f"models:\n  m: {number}\n"):
            (tmp_path / "t.yaml").write_text(text)
            with pytest.raises(InvalidInputError) as err:
                load_thresholds(tmp_path / "t.yaml")
            problems.append(str(err.value))
        assert all(FINITE_01 in p for p in problems), problems
    result = EvalResult(
        model="m",
        results=(score_reply(Problem("q0", "1+1?", "#### 2"), "#### 2"),),
        num_shots=0,
        seed=0,
        limit=None,
        population=1,
        duration_s=0.1,
    )
    with pytest.raises(InvalidInputError, match="the accuracy threshold"):
        accuracy_gate(result, value)


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0, 0, 1])
def test_f5_a_threshold_in_the_closed_unit_interval_is_allowed(value: float) -> None:
    assert threshold_problem(value) is None
    assert check_threshold(value, "--threshold") == value


def test_f5_a_server_refusing_every_question_is_reported_as_its_refusal() -> None:
    """HTTP 400 to each question: its status and the start of its answer (redacted, at most 200 characters)."""
    with threaded_server("questions-refuse") as base:
        result = CliRunner().invoke(
            app, ["eval", "gsm8k", "--base-url", base, "--model", "m", "--limit", "2", "--timeout", "30"]
        )
    line = _one_error_line(result.output)
    assert result.exit_code == 2, result.output
    assert line.startswith(f"error: --base-url '{base}': the server answered 400: "), line
    assert "temperature must be >= 0" in line
    assert "hunter2" not in line
    assert "y" * 200 not in line  # cut at 200 characters of the answer
    assert "within --timeout" not in line
    assert "2 of 2 requests failed" in line


# F4: the terminal's encoding


def _non_ascii_run(tmp_path: Path) -> str:
    return write_m0(tmp_path, model="modèle-日本")


def test_f4_the_entry_point_writes_what_the_terminal_cannot_encode_as_escapes(tmp_path: Path) -> None:
    """``alflow report show -f md`` on an ASCII stdout: the report, the model id as ``mod\\xe8le``, exit 0."""
    run = _non_ascii_run(tmp_path)
    with CliRunner(charset="ascii").isolation() as (out, err, _):
        with pytest.raises(SystemExit) as code:
            main(["report", "show", "-f", "md", run])
        sys.stdout.flush()
        text = out.getvalue().decode("ascii")
        errors = err.getvalue().decode("ascii") if err else ""
    assert code.value.code == 0, errors
    assert "mod\\xe8le\\-\\u65e5\\u672c" in text or "mod\\xe8le-\\u65e5\\u672c" in text, text[:500]
    assert "damaged" not in text


def test_f4_an_unencodable_stdout_is_named_not_blamed_on_the_run(tmp_path: Path) -> None:
    """A stdout the entry point could not make tolerant: one line naming stdout and its encoding, exit 1, not 2."""
    run = _non_ascii_run(tmp_path)
    result = CliRunner(charset="ascii").invoke(app, ["report", "show", "-f", "md", run])
    line = _one_error_line(result.stderr)
    assert result.exit_code == 1, result.output
    assert line.startswith("error: stdout's encoding (ascii) cannot encode the text to print"), line
    assert "PYTHONIOENCODING=utf-8" in line
    assert "-o FILE" in line
    assert "damaged" not in line
    assert "could not read" not in line


def test_f4_tolerant_output_makes_the_cli_helpers_unable_to_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """After :func:`tolerant_output`, ``say`` (rich) and a plain write both escape what ASCII cannot hold."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
    monkeypatch.setattr("sys.stdout", stream)
    monkeypatch.setattr("sys.stderr", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))  # never pytest's own
    with pytest.raises(UnicodeEncodeError):
        stream.write("é")
    tolerant_output()
    say("modèle-日本")
    stream.write("modèle\n")
    stream.flush()
    assert raw.getvalue().decode("ascii") == "mod\\xe8le-\\u65e5\\u672c\nmod\\xe8le\n"


def test_f4_only_a_strict_standard_streams_encoding_is_blamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line names stdout and its encoding only where stdout could have raised it; else None (another error)."""
    error = UnicodeEncodeError("ascii", "é", 0, 1, "ordinal not in range(128)")
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BytesIO(), encoding="US-ASCII"))
    monkeypatch.setattr("sys.stderr", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    line = unencodable_output_line(error)
    assert line is not None
    assert line.startswith("stdout's encoding (US-ASCII) cannot encode"), line
    assert "'\\xe9'" in line  # the character, as an escape
    tolerant_output()  # now stdout cannot raise it: an ascii error elsewhere (a file, a header) is not the terminal's
    assert unencodable_output_line(error) is None
    surrogate = UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
    assert unencodable_output_line(surrogate) is None


# M6: bench options that do not apply to the dataset


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["--category", "coding"], "--category 'coding' does not apply to --dataset random"),
        (["--dataset", "custom", "--input-file", "x.jsonl", "--category", "coding"], "does not apply to --dataset custom"),
        (["--dataset", "speed-bench", "--input-file", "x.jsonl", "--category", "\u202ecoding"], "U+202E"),
        (["--category", "a\x1bb"], "--category 'a\\x1bb' holds the control character(s) U+001B"),
        (["--num-shots", "2"], "--num-shots does not apply to --dataset random"),
        (["--dataset", "speed-bench", "--input-file", "x", "--shots-file", "t.jsonl"], "--shots-file does not apply"),
        (["--input-file", "x.jsonl"], "--input-file 'x.jsonl' does not apply to --dataset random"),
    ],
)  # fmt: skip
def test_m6_a_bench_option_the_dataset_does_not_use_is_refused(argv: list[str], wanted: str) -> None:
    """One line naming the option and the dataset, exit 2, before any request (a closed port)."""
    result = CliRunner().invoke(app, ["bench", "--base-url", CLOSED, "--model", "m", *argv])
    line = _one_error_line(result.output)
    assert result.exit_code == 2, result.output
    assert wanted in line, line
    assert "cannot reach" not in line
