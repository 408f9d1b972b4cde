"""``alflow eval gsm8k``: the GSM8K accuracy gate from the command line."""

from __future__ import annotations

import asyncio
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from alflow.cli.bench import BENCH_BOUNDS, SECONDS, SECONDS_OR_OFF
from alflow.cli.common import (
    JsonOpt,
    check_options,
    checked_out_file,
    console,
    emit_json,
    fail,
    new_table,
    register_bounds,
    say,
    say_err,
    write_out_file,
)
from alflow.cli.stopping import sigterm_as_exit
from alflow.errors import AlflowError, InvalidInputError
from alflow.evals.gsm8k import DEFAULT_MAX_TOKENS, DEFAULT_SHOTS, EvalResult, PromptConfig
from alflow.evals.lm_eval_backend import run_lm_eval
from alflow.evals.run import Gsm8kRequest, evaluate_gsm8k
from alflow.evals.thresholds import check_threshold, load_thresholds
from alflow.gates import Verdict, accuracy_gate
from alflow.loadgen.spec import DEFAULT_STALL_TIMEOUT_S
from alflow.util import jsonutil
from alflow.util.names import BIDI_CONTROLS, check_identifier, control_characters, shown
from alflow.util.redact import check_http_url
from alflow.util.rows import dump_row

GSM8K_BOUNDS = register_bounds(
    "gsm8k",
    {
        "--timeout": SECONDS,
        "--stall-timeout": SECONDS_OR_OFF,
        **{name: BENCH_BOUNDS[name] for name in ("--temperature", "--max-tokens", "--concurrency", "--seed")},
        "--limit": BENCH_BOUNDS["--num-prompts"],
        "--shots": BENCH_BOUNDS["--num-shots"],
    },
)
"""Each numeric option allows what ``bench``'s of the same meaning does (``--limit``: ``--num-prompts``'s,
``--shots``: ``--num-shots``'s); ``--threshold`` is a threshold's one rule (:func:`check_threshold`)."""

eval_app = typer.Typer(help="Accuracy evaluations (the M1 accuracy gate).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add ``alflow eval`` to ``app``."""
    app.add_typer(eval_app, name="eval")


@eval_app.command("gsm8k")
def gsm8k(
    base_url: Annotated[str, typer.Option("--base-url", help="Server base URL, e.g. http://127.0.0.1:8000.")],
    model: Annotated[str, typer.Option("--model", help="Served model name.")],
    limit: Annotated[int | None, typer.Option("--limit", help="Ask a seeded subset of N questions.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the subset and the few-shot draws.")] = 1234,
    shots: Annotated[int, typer.Option("--shots", help="Few-shot examples per question.")] = DEFAULT_SHOTS,
    instruction: Annotated[str | None, typer.Option("--instruction", help="Optional system message.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight.")] = 64,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Output cap per reply.")
    ] = DEFAULT_MAX_TOKENS,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature.")] = 0.0,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-question timeout in seconds.")] = 600.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            "--stall-timeout",
            help="Abort when the server sends nothing on any open stream for this long (s); 0 = off.",
        ),
    ] = DEFAULT_STALL_TIMEOUT_S,
    test_file: Annotated[
        Path | None, typer.Option("--test-file", help="GSM8K test JSONL (default: bundled).")
    ] = None,
    train_file: Annotated[
        Path | None, typer.Option("--train-file", help="GSM8K train JSONL for shots (default: bundled).")
    ] = None,
    thresholds: Annotated[
        Path | None, typer.Option("--thresholds", help="YAML of per-model thresholds (default 0.90).")
    ] = None,
    threshold: Annotated[float | None, typer.Option("--threshold", help="Override the threshold.")] = None,
    synthetic: Annotated[
        bool,
        typer.Option(
            "--synthetic-launch", help="The server was launched with synthetic acceptance (refused)."
        ),
    ] = False,
    backend: Annotated[
        str, typer.Option("--backend", help="alflow (default) or lm-eval (if installed).")
    ] = "alflow",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write per-question results as JSON here.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score GSM8K (strict-match and flexible-extract) and apply the accuracy gate; exit 1 if it fails."""
    try:
        _check_options(base_url, model, instruction, threshold, {
            "--timeout": timeout, "--stall-timeout": stall_timeout, "--temperature": temperature, "--seed": seed,
            "--max-tokens": max_tokens, "--concurrency": concurrency, "--limit": limit, "--shots": shots})  # fmt: skip
        out_path = None if out is None else checked_out_file(out, "--out")  # before any question is asked
        limit_value = threshold if threshold is not None else load_thresholds(thresholds).for_model(model)
        if backend == "lm-eval":
            _lm_eval(base_url, model, shots, limit, seed, limit_value)
        if backend != "alflow":
            raise typer.BadParameter(
                f"unknown backend {backend!r}; use alflow or lm-eval", param_hint="--backend"
            )
        request = Gsm8kRequest(
            base_url=base_url,
            model=model,
            test_path=test_file,
            train_path=train_file,
            prompt=PromptConfig(num_shots=shots, seed=seed, instruction=instruction, max_tokens=max_tokens),
            limit=limit,
            concurrency=concurrency,
            temperature=temperature,
            synthetic=synthetic,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout or None,
        )
        result = _evaluate(request)
    except AlflowError as exc:
        raise fail(str(exc)) from None
    _report(result, limit_value, model, as_json=as_json, out_path=out_path)


def _check_options(
    base_url: str,
    model: str,
    instruction: str | None,
    threshold: float | None,
    numbers: dict[str, float | None],
) -> None:
    """Every option as ``bench`` checks its own: one line naming the first bad one, before any question is read."""
    check_http_url(base_url, "--base-url")  # before the thresholds and questions are read (round 13)
    try:
        check_identifier(model, what="--model")
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    text = instruction or ""  # prompt text: a joiner or a zero-width in a script is the model's input, kept
    invisible = "".join({c for c in text if unicodedata.category(c) == "Cf" and c not in BIDI_CONTROLS})
    bad = control_characters(text, keep="\t\n" + invisible)  # ESC, BEL, a bidi override
    if bad:
        raise InvalidInputError(
            f"--instruction {shown(instruction or '')} holds the control or format character(s) {', '.join(bad)}: "
            "give printable text (tabs and newlines allowed)"
        )
    check_options(numbers, GSM8K_BOUNDS)
    if threshold is not None:
        check_threshold(threshold, "--threshold")


def _report(
    result: EvalResult, limit_value: float, model: str, *, as_json: bool, out_path: Path | None
) -> None:
    """The scores and the gate's verdict (then ``--out``), and the exit: 0 when the gate passes, else 1."""
    verdict = accuracy_gate(result, limit_value)
    if as_json:  # the scores first: a write that fails after the work must not lose them
        emit_json({**result.summary().model_dump(mode="json"), "verdict": verdict.model_dump()})
    else:
        _print_scores(result, verdict, limit_value, model)
    if out_path is not None:
        _save(out_path, result)
    raise typer.Exit(0 if verdict.passed else 1)


def _lm_eval(base_url: str, model: str, shots: int, limit: int | None, seed: int, limit_value: float) -> None:
    """``--backend lm-eval``: its scores as JSON, then exit 0 or 1 by the gate."""
    with tempfile.TemporaryDirectory(prefix="alflow-lm-eval-") as tmp:
        scores = run_lm_eval(base_url, model, Path(tmp), num_shots=shots, limit=limit, seed=seed)
        data = scores.to_dict()
    passed = min(scores.strict_match, scores.flexible_extract) >= limit_value
    data.update(threshold=limit_value, passed=passed)
    emit_json(data)
    raise typer.Exit(0 if passed else 1)


def _evaluate(request: Gsm8kRequest) -> EvalResult:
    """The evaluation; SIGTERM or Ctrl-C ends it with one "interrupted" line (exit 143 or 130), no traceback."""
    started = time.monotonic()
    try:
        with sigterm_as_exit() as watch:
            return asyncio.run(watch.run(evaluate_gsm8k(request)))
    except (KeyboardInterrupt, SystemExit) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else exc.code
        how = {130: "Ctrl-C", 143: "SIGTERM", 129: "SIGHUP"}.get(
            code if isinstance(code, int) else -1, f"exit {code}"
        )
        say_err(f"eval gsm8k: interrupted ({how}) after {time.monotonic() - started:.1f} s: no scores")
        raise typer.Exit(code if isinstance(code, int) else 1) from None


def _save(path: Path, result: EvalResult) -> None:
    """The per-question results as JSON at ``--out``; a failed write is one line (exit 2), the scores kept."""
    per_question = {
        **result.summary().model_dump(mode="json"),
        "results": [dump_row(r) for r in result.results],
    }
    try:
        write_out_file(
            path,
            jsonutil.dumps(per_question, indent=1).encode(),
            "--out",
            kept="; the scores are printed above",
        )
    except AlflowError as exc:
        raise fail(str(exc)) from None


def _print_scores(result: EvalResult, verdict: Verdict, limit_value: float, model: str) -> None:
    """The two scores as a table, then the gate's verdict."""
    title = escape(f"GSM8K {model} ({len(result.results)} of {result.population} questions)")
    table = new_table(title, ("score", "accuracy", "95% CI", "threshold"))
    for s in (result.strict, result.flexible):
        low, high = s.interval
        table.add_row(s.name, f"{s.accuracy:.4f}", f"[{low:.4f}, {high:.4f}]", f"{limit_value:.4f}")
    console.print(table)
    say(verdict.message)
