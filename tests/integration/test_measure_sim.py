"""The load generator, scraper and dialects against the simulated engine over real HTTP.

Each test starts ``python -m alflow.sim serve`` on an ephemeral port (``SimProcess``) with a step
log, so the server's own record of every verify step is the ground truth.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from alflow.datasets.random_tokens import random_sessions
from alflow.datasets.speed_bench import load_speed_bench
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.loadgen.frames import records_frame
from alflow.metrics.client import summarize
from alflow.metrics.prometheus import SnapshotWindow, scrape
from alflow.metrics.readers import detect
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

VOCAB = 20_000  # below the sim tokenizer's vocabulary


def sim_args(dialect: str, step_log: Path, *extra: str) -> list[str]:
    return ["--dialect", dialect, "--k", "3", "--synthetic-al", "2.5", "--time-scale", "0",
            "--step-log", str(step_log), *extra]  # fmt: skip


def steps_between(step_log: Path, start_ns: int = 0, end_ns: int = 2**63) -> tuple[int, int]:
    """(request-step pairs, accepted drafts) from the sim's step log inside [start_ns, end_ns]."""
    pairs = accepted = 0
    for line in step_log.read_bytes().splitlines():
        row = orjson.loads(line)
        if start_ns <= row["time_ns"] <= end_ns:
            pairs += len(row["requests"])
            accepted += sum(row["accepted"])
    return pairs, accepted


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "trtllm"])
async def test_dialect_al_equals_step_log_and_client_tokens_per_chunk(dialect: str, tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args(dialect, log)) as sim:
        work = random_sessions(24, isl=32, osl=150, seed=1, vocab_size=VOCAB)
        warm = random_sessions(6, isl=32, osl=20, seed=2, vocab_size=VOCAB)
        baseline = []

        async def on_start() -> None:
            baseline.append(await scrape(sim.metrics_url))

        res = await run_load(
            work,
            Target(sim.base_url, "sim/llama-3.3-70b", endpoint="completions"),
            LoadSpec(concurrency=8, warmup=6),
            on_measure_start=on_start,
            warmup_sessions=warm,
        )
        final = await scrape(sim.metrics_url)
    assert all(r.ok for r in res.records), [r.error for r in res.records if not r.ok][:3]
    d = detect(final)
    assert d.name == dialect
    stats = d.spec_stats(SnapshotWindow(baseline[0], final), k=3)
    pairs, accepted = steps_between(log, baseline[0].mono_ns, final.mono_ns)
    assert pairs > 0
    assert stats.num_drafts == pairs
    if dialect == "sglang":
        # SGLang counts len(output_ids) when a request finishes: its prefill token is taken out by the dialect,
        # and what the last verify step accepted past max_tokens is not there (the residual the note states)
        cut = (24 + pairs + accepted) - 24 * 150
        assert 0 <= cut <= 24 * 3
        assert stats.truncated_requests == 24
        accepted -= cut
    assert stats.accepted_tokens == accepted
    assert stats.al == pytest.approx(1 + accepted / pairs, abs=1e-12)
    assert stats.al == pytest.approx(2.5, abs=0.1)
    # client side: output tokens after the first per later chunk ~ tokens per verify step
    s = summarize(records_frame(res.records), duration_s=res.duration_s)
    assert s.completed == 24
    assert s.total_output_tokens == 24 * 150
    client_al = s.tokens_per_chunk_after_first
    assert client_al is not None
    assert client_al <= stats.al + 1e-9  # the last step of a request is cut at max_tokens
    assert client_al == pytest.approx(stats.al, abs=0.05)


async def test_multi_turn_session_sends_history_with_the_live_reply(tmp_path: Path) -> None:
    f = tmp_path / "qualitative.jsonl"
    row = {
        "question_id": "q" * 32,
        "category": "coding",
        "sub_category": "x",
        "source": "s",
        "src_id": "1",
        "difficulty": "easy",
        "multiturn": True,
        "messages": [
            {"role": "user", "content": "Write a function that adds two numbers."},
            {"role": "user", "content": "Now add type hints."},
        ],
    }
    f.write_bytes(orjson.dumps(row) + b"\n")
    sessions = load_speed_bench(f, max_tokens=30)
    with SimProcess(sim_args("vllm", tmp_path / "s.jsonl")) as sim:
        res = await run_load(sessions, Target(sim.base_url, "sim/llama-3.3-70b"), LoadSpec(concurrency=1))
        first, second = res.records
        assert first.ok
        assert second.ok
        assert first.text
        history = [
            {"role": "user", "content": row["messages"][0]["content"]},
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": row["messages"][1]["content"]},
        ]
        async with aiohttp.ClientSession() as http:
            body = orjson.dumps({"model": "sim/llama-3.3-70b", "messages": history})
            async with http.post(sim.base_url + "/tokenize", data=body) as resp:
                expected = orjson.loads(await resp.read())["count"]
    # the server saw turn 1, the model's live reply, then turn 2: exactly those tokens
    assert second.input_tokens == expected
    assert second.input_tokens > first.input_tokens + first.output_tokens  # type: ignore[operator]


def _cli() -> tuple[CliRunner, object]:
    import typer

    from alflow.cli.bench import register

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test root."""

    register(app)
    return CliRunner(), app


def test_bench_cli_json_and_out_dir_against_the_sim(tmp_path: Path) -> None:
    runner, app = _cli()
    log = tmp_path / "steps.jsonl"
    out = tmp_path / "run"
    with SimProcess(sim_args("sglang", log)) as sim:
        result = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--dataset", "random", "--isl", "40", "--osl", "150",
             "--vocab-size", str(VOCAB), "--concurrency", "4", "--num-prompts", "12", "--warmup", "4",
             "--endpoint", "chat", "--scrape-interval", "0.05", "--json", "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        summary = orjson.loads(result.stdout)
        snap = runner.invoke(app, ["metrics", "snapshot", sim.base_url, "--json"])  # type: ignore[arg-type]
    assert summary["completed"] == 12
    assert summary["failed"] == 0
    assert summary["model"] == "sim/llama-3.3-70b"
    spec = summary["spec_decode"]
    assert spec["dialect"] == "sglang"
    # ~720 verify steps of sd ~1.1: 0.15 is over 3.5 standard errors (60-token replies gave ~290 steps and
    # a last-step truncation bias, and missed the bound once in ~30 runs)
    assert spec["stats"]["al"] == pytest.approx(2.5, abs=0.15)
    assert (
        "exact, from the sglext.spec_tokens_details of" in spec["stats"]["note"]
    )  # SGLang's per-request counts
    assert spec["counter_resets"] == []
    for name in ("records.parquet", "snapshots.json", "summary.json"):
        assert (out / name).is_file()
    snaps = orjson.loads((out / "snapshots.json").read_bytes())
    base = snaps["baseline"]["mono_ns"]
    end = snaps["final"]["mono_ns"]
    pairs, accepted = steps_between(log, base, end)
    assert spec["stats"]["num_drafts"] == pairs
    assert spec["stats"]["accepted_tokens"] == accepted
    import polars as pl

    frame = pl.read_parquet(out / "records.parquet")
    assert frame.height == 16
    assert frame["warmup"].sum() == 4
    # metrics snapshot: lifetime counters since server start (warm-up included)
    assert snap.exit_code == 0, snap.output
    data = orjson.loads(snap.stdout)
    assert data["dialect"] == "sglang"
    all_pairs, all_acc = steps_between(log)
    # SGLang's /server_info: cumulative AL since server start (warm-up included), per DP rank
    assert spec["sglang_server_info_avg_accept_length_lifetime"] == [pytest.approx(1 + all_acc / all_pairs)]
    assert data["since_server_start"]["num_drafts"] == all_pairs
    # the counters read len(output_ids) at each request's end: what the last verify steps accepted past
    # max_tokens (at most K per request, 16 requests) is not in them
    cut = all_acc - data["since_server_start"]["accepted_tokens"]
    assert 0 <= cut <= 3 * 16


def test_bench_cli_custom_prompt_file_sends_its_texts_in_order_with_each_rows_cap(tmp_path: Path) -> None:
    """vllm bench serve's custom JSONL: the texts go as they are, each row's output_tokens is its cap."""
    runner, app = _cli()
    prompts = tmp_path / "prompts.jsonl"
    texts = ["def reverse(xs): return xs[::-1]", "Write a haiku about caches.", "SELECT 1;"]
    caps = [12, None, 20]
    prompts.write_bytes(
        b"".join(
            orjson.dumps({"prompt": t} | ({"output_tokens": c} if c else {})) + b"\n"
            for t, c in zip(texts, caps, strict=True)
        )
    )
    out = tmp_path / "run"
    with SimProcess(sim_args("vllm", tmp_path / "s.jsonl")) as sim:
        result = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--dataset", "custom", "--input-file", str(prompts),
             "--endpoint", "completions", "--max-tokens", "30", "--ignore-eos", "--json", "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        override = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--dataset", "custom", "--input-file", str(prompts),
             "--endpoint", "completions", "--ignore-eos", "--json", "--out", str(tmp_path / "rows")],
        )  # fmt: skip
        assert override.exit_code == 0, override.output
    import polars as pl

    summary = orjson.loads(result.stdout)
    assert summary["completed"] == 3
    assert summary["config"]["dataset"] == "custom"
    assert summary["config"]["input_sha256"] == "sha256:" + hashlib.sha256(prompts.read_bytes()).hexdigest()
    frame = pl.read_parquet(out / "records.parquet").sort("request_id")
    assert frame["session_id"].to_list() == ["custom-1", "custom-2", "custom-3"]
    assert frame["output_tokens"].to_list() == [30, 30, 30]  # --max-tokens overrides the rows
    rows = pl.read_parquet(tmp_path / "rows" / "records.parquet").sort("request_id")
    assert rows["output_tokens"].to_list() == [12, 256, 20]  # each row's cap, else 256
    # the text went as it is (the sim adds BOS), not wrapped in a chat template (dozens of tokens more)
    from alflow.sim.tokenizer import Tokenizer

    tok = Tokenizer()
    assert rows["input_tokens"].to_list() == [1 + len(tok.encode(t)) for t in texts]


def test_bench_cli_trtllm_metrics_path_is_found(tmp_path: Path) -> None:
    runner, app = _cli()
    with SimProcess(sim_args("trtllm", tmp_path / "s.jsonl")) as sim:
        result = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--isl", "16", "--osl", "30", "--vocab-size", str(VOCAB),
             "--concurrency", "2", "--num-prompts", "4", "--endpoint", "completions", "--json"],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["spec_decode"]["metrics_url"].endswith("/prometheus/metrics")
    assert summary["spec_decode"]["stats"]["k"] == 3


def test_bench_cli_reports_failed_requests_and_exits_1(tmp_path: Path) -> None:
    runner, app = _cli()
    args = [*sim_args("vllm", tmp_path / "s.jsonl"), "--stream-error-rate", "0.5", "--seed", "3"]
    with SimProcess(args) as sim:
        result = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--isl", "16", "--osl", "30", "--vocab-size", str(VOCAB),
             "--concurrency", "4", "--num-prompts", "20", "--endpoint", "completions", "--json"],
        )  # fmt: skip
    assert result.exit_code == 1, result.output
    summary = orjson.loads(result.stdout)
    assert summary["failed"] > 0
    assert summary["all_ok"] is False
    assert "requests failed" in result.stderr


def test_bench_cli_that_measured_no_request_exits_1_and_is_not_all_ok(tmp_path: Path) -> None:
    """Round 10 R10-4: ``--duration 0.000001`` measured nothing and said ``all_ok: true`` with exit 0."""
    runner, app = _cli()
    with SimProcess(sim_args("vllm", tmp_path / "s.jsonl")) as sim:
        result = runner.invoke(
            app,  # type: ignore[arg-type]
            ["bench", "--base-url", sim.base_url, "--isl", "16", "--osl", "4", "--vocab-size", str(VOCAB),
             "--num-prompts", "1", "--duration", "0.000001", "--no-progress", "--json"],
        )  # fmt: skip
    assert result.exit_code == 1, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["completed"], summary["all_ok"]) == (0, False)
    assert "no request was measured" in result.stderr


def test_bench_cli_unknown_category_and_dialect_are_one_line_errors(tmp_path: Path) -> None:
    runner, app = _cli()
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"question_id": "a", "category": "coding", "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    r = runner.invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--dataset", "speed-bench",  # type: ignore[arg-type]
                            "--input-file", str(f), "--category", "cooking", "--model", "m"])  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0
    assert "unknown SPEED-Bench category 'cooking'" in r.stderr
    r = runner.invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--dialect", "tgi"])  # type: ignore[arg-type]
    assert r.exit_code == 2
    assert "unknown metrics dialect 'tgi'" in r.stderr


def test_bench_cli_reads_a_prometheus_server_for_multi_node(tmp_path: Path) -> None:
    """--prometheus-url: the same dialect over counter values read from Prometheus after warm-up and after
    the load (here a fake Prometheus HTTP API; tests/e2e/test_prometheus_real.py runs a real one)."""
    import threading
    from http.server import ThreadingHTTPServer

    from tests.unit.test_prometheus import PromHandler

    prom = ThreadingHTTPServer(("127.0.0.1", 0), PromHandler)
    threading.Thread(target=prom.serve_forever, daemon=True).start()
    PromHandler.queries = []
    PromHandler.reads = {}
    PromHandler.start_reads = 1  # bench reads the window's start after warm-up
    PromHandler.stamp_lag_s = 1.0
    runner, app = _cli()
    try:
        with SimProcess(sim_args("vllm", tmp_path / "s.jsonl")) as sim:
            result = runner.invoke(
                app,  # type: ignore[arg-type]
                ["bench", "--base-url", sim.base_url, "--isl", "16", "--osl", "20", "--vocab-size", str(VOCAB),
                 "--concurrency", "2", "--num-prompts", "4", "--endpoint", "completions", "--json",
                 "--prometheus-url", f"http://127.0.0.1:{prom.server_address[1]}",
                 "--prometheus-selector", '{job="vllm"}'],
            )  # fmt: skip
    finally:
        prom.shutdown()
        prom.server_close()
    assert result.exit_code == 0, result.output
    block = orjson.loads(result.stdout)["spec_decode"]["prometheus"]
    assert block["error"] is None
    assert block["stats"]["num_drafts"] == 1100  # the fake server's end minus start values
    assert block["stats"]["al"] == pytest.approx(2.5)
    assert any('{job="vllm"}' in q["query"][0] for q in PromHandler.queries)
