"""Hostile round 15 of issue #49 (R15-5, R15-6, R15-7): sizes of dataset files and of HTTP answers, eval's bounds.

R15-5: ``bench --dataset custom`` and ``--dataset speed-bench`` read a 3 GB sparse file whole (6.5 GB of memory); only
GSM8K files were refused by their size. Every dataset loader now refuses by ``stat`` before reading, one line.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from typer.testing import CliRunner

from alflow.bench import served_model
from alflow.cli import app
from alflow.datasets.custom import load_custom
from alflow.datasets.gsm8k import load_gsm8k
from alflow.datasets.literature import load_literature
from alflow.datasets.random_tokens import detokenize_sessions
from alflow.datasets.speed_bench import load_speed_bench
from alflow.datasets.types import MAX_DATASET_BYTES, MAX_SPEED_BENCH_BYTES, Session, Turn
from alflow.errors import AlflowError, InvalidInputError
from alflow.evals.run import probe_synthetic
from alflow.frameworks.sglang.metrics import sglang_server_info_al
from alflow.metrics.prometheus import ScrapeError, scrape
from alflow.metrics.promql import promql_start
from alflow.util.httpread import MAX_API_BYTES, MAX_METRICS_BYTES, AnswerTooLargeError, read_bounded
from tests.unit.flood_server import threaded_server

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


# R15-7: an endless fast body was read whole (bench's detokenize 24 GB, eval's probe a MemoryError traceback).


def _readers(base: str, t: float) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every reader of a whole HTTP answer, each pointed at ``base`` with a total timeout of ``t`` seconds."""

    async def models() -> object:
        async with aiohttp.ClientSession() as http:
            return await served_model(http, base, None, {}, timeout_s=t)

    return {
        "v1-models": models,
        "detokenize": lambda: detokenize_sessions(
            [Session("s", (Turn(prompt=(1, 2, 3)),))], base, "m", timeout_s=t
        ),
        "eval-probe": lambda: probe_synthetic(base, timeout_s=t),
        "metrics-scrape": lambda: scrape(base + "/metrics", timeout_s=t),
        "sglang-server-info": lambda: sglang_server_info_al(base, timeout_s=t),
    }


READERS = ["v1-models", "detokenize", "eval-probe", "metrics-scrape", "sglang-server-info"]


@pytest.mark.parametrize("reader", READERS)
def test_r15_7_an_endless_answer_is_refused_at_its_bound(reader: str) -> None:
    """A flood is one error naming the URL and the bound, well before the total timeout and without the memory."""
    with threaded_server("flood") as base:
        start = time.monotonic()
        with pytest.raises(AlflowError) as err:
            asyncio.run(_readers(base, 20.0)[reader]())
        took = time.monotonic() - start
    message = str(err.value)
    assert "\n" not in message
    assert base.removeprefix("http://") in message
    assert "bytes alflow reads of it" in message, message
    assert took < 20.0, f"{reader} read the flood for {took:.1f} s"


@pytest.mark.parametrize("reader", READERS)
def test_r15_7_a_silent_server_is_one_error_within_the_timeout(reader: str) -> None:
    """A server that never answers is a named error when the total timeout ends, not a hang (the probe's too)."""
    with threaded_server("silent") as base:
        start = time.monotonic()
        with pytest.raises(AlflowError) as err:
            asyncio.run(_readers(base, 2.0)[reader]())
        took = time.monotonic() - start
    assert "\n" not in str(err.value)
    assert took < 10.0  # SGLang's reader asks two paths, 2 s each


def test_r15_7_read_bounded_refuses_a_declared_length_unread() -> None:
    """A ``Content-Length`` past the bound is refused before the body is read."""

    class Declared:
        content_length = MAX_API_BYTES + 1

    with pytest.raises(
        AnswerTooLargeError, match=f"GET u: the answer is larger than the {MAX_API_BYTES:,} bytes"
    ):
        asyncio.run(read_bounded(Declared(), MAX_API_BYTES, "GET u"))  # type: ignore[arg-type]


def test_r15_7_metrics_snapshot_prints_one_line_exit_2() -> None:
    """``alflow metrics snapshot`` at a flooding URL: one line naming the URL and the bound, exit 2."""
    with threaded_server("flood") as base:
        result = CliRunner().invoke(app, ["metrics", "snapshot", "--url", base + "/metrics"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert f"{MAX_METRICS_BYTES:,} bytes" in lines[0]
    assert base.removeprefix("http://") in lines[0]


def test_r15_7_a_prometheus_api_flood_is_refused_at_its_bound() -> None:
    """A PromQL query answered by an endless body is one ScrapeError naming Prometheus and the bound."""
    with threaded_server("flood") as base:
        start = time.monotonic()
        with pytest.raises(ScrapeError) as err:
            promql_start(base, {"vllm:num_requests_running": 1}, 0.0, timeout_s=5.0, sync_timeout_s=1.0)
        took = time.monotonic() - start
    assert f"Prometheus at {base}: the answer is larger than the {MAX_METRICS_BYTES:,} bytes" in str(
        err.value
    )
    assert took < 5.0


# R15-6: eval gsm8k waited 600 s per question (hidden), then called a dead server's model inaccurate; no options.

EVAL = ["eval", "gsm8k", "--model", "m", "--limit", "2", "--concurrency", "2"]


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--stall-timeout", "-1"),
     ("--stall-timeout", "inf"), ("--timeout", "1e99")],
)  # fmt: skip
def test_r15_6_eval_timeouts_are_checked_as_bench_checks_them(option: str, value: str) -> None:
    """A bad ``--timeout`` or ``--stall-timeout`` is one line naming it and what is allowed, exit 2, nothing asked."""
    result = CliRunner().invoke(app, [*EVAL, "--base-url", "http://127.0.0.1:9", option, value])
    assert result.exit_code == 2, result.output
    assert f"{option} " in result.output
    assert "must be" in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("mode", "options", "wanted"),
    [
        ("questions-silent", ["--timeout", "1", "--stall-timeout", "0"], "no answer to any question within --timeout 1 s"),
        ("questions-reject", ["--timeout", "5"], "the server answered 400: "),
        ("questions-drip", ["--timeout", "60", "--stall-timeout", "1"], "stall timeout"),
    ],
    ids=["silent", "reject", "drip"],
)  # fmt: skip
def test_r15_6_a_server_that_answers_no_question_is_an_error_not_an_accuracy(
    mode: str, options: list[str], wanted: str
) -> None:
    """No answer (silence, refusals, a drip) is one line naming ``--base-url``, exit 2, within the bounds given."""
    with threaded_server(mode) as base:
        start = time.monotonic()
        result = CliRunner().invoke(app, [*EVAL, "--base-url", base, *options])
        took = time.monotonic() - start
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --base-url '{base}': "), lines[0]
    assert wanted in lines[0]
    assert "accuracy" not in lines[0]
    assert took < 20.0


@pytest.mark.parametrize(
    ("signum", "code", "how"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_r15_6_an_interrupted_eval_says_so_in_one_line(signum: int, code: int, how: str) -> None:
    """SIGTERM or Ctrl-C while the questions wait: one "interrupted" line and 128 + the signal, no traceback."""
    with threaded_server("questions-silent") as base:
        timer = threading.Timer(3.0, os.kill, (os.getpid(), signum))
        timer.start()
        try:
            result = CliRunner().invoke(app, [*EVAL, "--base-url", base, "--timeout", "60"])
        finally:
            timer.cancel()
    assert result.exit_code == code, result.output
    assert f"eval gsm8k: interrupted ({how})" in result.output
    assert "Traceback" not in result.output
