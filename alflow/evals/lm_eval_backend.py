"""Optional GSM8K backend: lm-evaluation-harness run as a subprocess against the same server.

Used only when the ``lm_eval`` command is installed (it is not a dependency of alflow). It runs the
harness's ``gsm8k`` task with its ``local-chat-completions`` model, the chat template and few-shot
examples as turns, then reads both scores from the results file the harness writes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from alflow.errors import AlflowError, InvalidInputError

RESULT_KEYS = {"strict-match": "exact_match,strict-match", "flexible-extract": "exact_match,flexible-extract"}


class LmEvalError(AlflowError):
    """lm-evaluation-harness is missing, failed, or wrote no usable results."""


@dataclass(frozen=True)
class LmEvalScores:
    """Both GSM8K scores as the harness reported them."""

    strict_match: float
    flexible_extract: float
    samples: int | None
    results_file: Path

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "backend": "lm-eval",
            "scores": {"strict-match": self.strict_match, "flexible-extract": self.flexible_extract},
            "samples": self.samples,
            "results_file": str(self.results_file),
        }


def lm_eval_command(
    base_url: str,
    model: str,
    output_dir: Path,
    *,
    num_shots: int = 5,
    limit: int | None = None,
    concurrency: int = 16,
    seed: int = 1234,
) -> list[str]:
    """The harness's command line for GSM8K against an OpenAI-compatible chat endpoint."""
    model_args = ",".join(
        [
            f"model={model}",
            f"base_url={base_url.rstrip('/')}/v1/chat/completions",
            f"num_concurrent={concurrency}",
            "max_retries=3",
            "tokenized_requests=False",
        ]
    )
    cmd = [
        "lm_eval",
        "--model",
        "local-chat-completions",
        "--model_args",
        model_args,
        "--tasks",
        "gsm8k",
        "--num_fewshot",
        str(num_shots),
        "--apply_chat_template",
        "--fewshot_as_multiturn",
        "--seed",
        str(seed),
        "--output_path",
        str(output_dir),
    ]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    return cmd


def parse_results(output_dir: Path) -> LmEvalScores:
    """Read the newest ``results*.json`` under ``output_dir`` and return both GSM8K scores."""
    files = sorted(output_dir.rglob("results*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise LmEvalError(f"lm_eval wrote no results*.json under {output_dir}")
    path = files[-1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        task = data["results"]["gsm8k"]
        strict = float(task[RESULT_KEYS["strict-match"]])
        flexible = float(task[RESULT_KEYS["flexible-extract"]])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LmEvalError(f"{path}: no GSM8K strict-match/flexible-extract scores ({exc!r})") from None
    samples = data.get("n-samples", {}).get("gsm8k", {}).get("effective")
    return LmEvalScores(strict, flexible, int(samples) if samples is not None else None, path)


def run_lm_eval(
    base_url: str,
    model: str,
    output_dir: Path,
    *,
    num_shots: int = 5,
    limit: int | None = None,
    concurrency: int = 16,
    seed: int = 1234,
    timeout_s: float = 7200.0,
) -> LmEvalScores:
    """Run the harness as a subprocess and parse its results (LmEvalError when it fails)."""
    if shutil.which("lm_eval") is None:
        raise LmEvalError(
            "the lm-eval backend needs the 'lm_eval' command (pip install lm-eval); it is not on PATH"
        )
    if timeout_s <= 0:
        raise InvalidInputError(f"timeout_s={timeout_s} must be positive")
    output_dir.mkdir(parents=True, exist_ok=True)
    cmd = lm_eval_command(
        base_url, model, output_dir, num_shots=num_shots, limit=limit, concurrency=concurrency, seed=seed
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise LmEvalError(f"lm_eval did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-15:])
        raise LmEvalError(f"lm_eval exited with code {proc.returncode}:\n{tail}")
    return parse_results(output_dir)
