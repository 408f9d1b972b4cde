"""``alflow eval gsm8k``: the GSM8K accuracy gate from the command line."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from alflow.cli.common import (
    JsonOpt,
    checked_out_file,
    console,
    emit_json,
    fail,
    new_table,
    say,
    write_out_file,
)
from alflow.errors import AlflowError
from alflow.evals.gsm8k import DEFAULT_MAX_TOKENS, DEFAULT_SHOTS, EvalResult, PromptConfig
from alflow.evals.lm_eval_backend import run_lm_eval
from alflow.evals.run import Gsm8kRequest, evaluate_gsm8k
from alflow.evals.thresholds import load_thresholds
from alflow.gates import Verdict, accuracy_gate
from alflow.util import jsonutil
from alflow.util.redact import check_http_url
from alflow.util.rows import dump_row

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
        check_http_url(base_url, "--base-url")  # before the thresholds and questions are read (round 13)
        out_path = None if out is None else checked_out_file(out, "--out")  # before any question is asked
        limit_value = threshold if threshold is not None else load_thresholds(thresholds).for_model(model)
        if backend == "lm-eval":
            with tempfile.TemporaryDirectory(prefix="alflow-lm-eval-") as tmp:
                scores = run_lm_eval(base_url, model, Path(tmp), num_shots=shots, limit=limit, seed=seed)
                data = scores.to_dict()
            passed = min(scores.strict_match, scores.flexible_extract) >= limit_value
            data.update(threshold=limit_value, passed=passed)
            emit_json(data)
            raise typer.Exit(0 if passed else 1)
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
        )
        result = asyncio.run(evaluate_gsm8k(request))
    except AlflowError as exc:
        raise fail(str(exc)) from None
    verdict = accuracy_gate(result, limit_value)
    if as_json:  # the scores first: a write that fails after the work must not lose them
        emit_json({**result.summary().model_dump(mode="json"), "verdict": verdict.model_dump()})
    else:
        _print_scores(result, verdict, limit_value, model)
    if out_path is not None:
        _save(out_path, result)
    raise typer.Exit(0 if verdict.passed else 1)


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
