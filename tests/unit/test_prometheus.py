"""Exposition parsing, snapshots, windowed deltas with resets, scraping, background series, PromQL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import orjson
import pytest

from alflow.acceptance.stats import CounterResetError
from alflow.metrics import names
from alflow.metrics.prometheus import (
    PeriodicScraper,
    PromQLWindow,
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    counter_resets,
    parse_exposition,
    scrape,
)
from tests.unit.sse_server import SseServer

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"


def snap(name: str, t: float = 0.0, mono: int = 0) -> Snapshot:
    return parse_exposition((FIX / name).read_text(), url=name, wall_time_s=t, mono_ns=mono)


def test_parses_total_samples_e_notation_and_keeps_created_apart() -> None:
    s = snap("vllm_before.txt")
    assert s.counter(names.VLLM_NUM_DRAFTS) == 1_234_567 + 100  # 1.234567e+06 plus engine 1, summed
    assert s.counter(names.VLLM_NUM_DRAFTS, {"engine": "1"}) == 100
    # the _created gauge (a unix timestamp) is never read as the counter's value
    assert "vllm:spec_decode_num_drafts_created" in s.samples
    assert s.counter(names.VLLM_NUM_DRAFTS) < 1e9
    assert s.gauge(names.VLLM_NUM_RUNNING) == 6.0
    assert s.counter("vllm:does_not_exist") is None
    assert s.has(names.VLLM_NUM_DRAFTS)


def test_classic_counter_text_without_type_suffix() -> None:
    text = (
        "# HELP vllm:spec_decode_num_drafts Number of drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{model_name="m"} 2.5e+07\n'
        'vllm:spec_decode_num_drafts_created{model_name="m"} 1.7e+09\n'
        "# TYPE process_cpu_seconds summary\n"
        'process_cpu_seconds{quantile="0.5"} 3\n'
        "process_cpu_seconds_count 4\n"
    )
    s = parse_exposition(text)
    assert s.counter(names.VLLM_NUM_DRAFTS) == 25_000_000
    assert "process_cpu_seconds_count" not in s.samples  # summaries are skipped
    assert s.types[names.VLLM_NUM_DRAFTS] == "counter"


def test_invalid_text_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="not valid Prometheus"):
        parse_exposition("metric{unclosed 1\n", url="u")


def test_window_deltas_and_per_label_grouping() -> None:
    w = SnapshotWindow(snap("vllm_before.txt", mono=1), snap("vllm_after.txt", mono=2))
    assert w.increase(names.VLLM_NUM_DRAFTS) == 1100
    assert w.increase(names.VLLM_NUM_ACCEPTED_TOKENS) == 1650
    assert w.increase(names.VLLM_NUM_DRAFTS, {"engine": "0"}) == 1000
    assert w.increase_by(names.VLLM_ACCEPTED_PER_POS, "position") == {"0": 770, "1": 550, "2": 330}
    assert w.increase("vllm:absent") is None
    assert counter_resets(w.before, w.after) == []


def test_counter_reset_is_detected() -> None:
    before, after = snap("vllm_before.txt", mono=1), snap("vllm_after_reset.txt", mono=2)
    assert names.VLLM_NUM_DRAFTS + "_total" in counter_resets(before, after)
    with pytest.raises(CounterResetError, match="went backwards"):
        SnapshotWindow(before, after).increase(names.VLLM_NUM_DRAFTS)


def test_snapshot_round_trips_through_json() -> None:
    s = snap("sglang_after.txt", t=12.5, mono=99)
    back = Snapshot.from_dict(orjson.loads(orjson.dumps(s.to_dict())))
    assert back.samples == s.samples
    assert (back.wall_time_s, back.mono_ns, back.url) == (12.5, 99, "sglang_after.txt")


async def test_scrape_over_http_and_clear_errors() -> None:
    async with SseServer() as srv:
        srv.state.metrics_text = (FIX / "trtllm_after.txt").read_text()
        s = await scrape(srv.base_url + "/metrics")
        assert s.counter(names.TRTLLM_NUM_DRAFT_TOKENS) == 3_003_000
        with pytest.raises(ScrapeError, match="JSON, not Prometheus text"):
            await scrape(srv.base_url + "/json-metrics")
        with pytest.raises(ScrapeError, match="HTTP 404"):
            await scrape(srv.base_url + "/nope")
    with pytest.raises(ScrapeError, match="cannot scrape"):
        await scrape(srv.base_url + "/metrics", timeout_s=2)


async def test_background_scraper_builds_a_gauge_series() -> None:
    async with SseServer() as srv:
        srv.state.metrics_text = (FIX / "sglang_before.txt").read_text()
        async with PeriodicScraper(srv.base_url + "/metrics", interval_s=0.02) as bg:
            await asyncio.sleep(0.07)
            srv.state.metrics_text = (FIX / "sglang_after.txt").read_text()
            await asyncio.sleep(0.07)
        n = len(bg.snapshots)
        await asyncio.sleep(0.05)
        assert len(bg.snapshots) == n  # stopped on exit
    values = [v for _, v in bg.series(names.SGLANG_SPEC_ACCEPT_LENGTH)]
    assert 4 <= len(values) <= 10
    assert values[0] == pytest.approx(2.41)
    assert values[-1] == pytest.approx(2.56)
    w = SnapshotWindow(bg.snapshots[0], bg.snapshots[-1], series=bg.snapshots)
    assert len(w.gauge_series(names.SGLANG_SPEC_ACCEPT_LENGTH)) == len(values)
    assert bg.errors == []


# ---- a Prometheus server's HTTP API, as a thread on an ephemeral port ----

QUERY_RESULTS: dict[tuple[str, bool], list[tuple[dict[str, str], str]]] = {
    # increase() results are extrapolated by Prometheus: not whole numbers
    (names.VLLM_NUM_DRAFTS, False): [({}, "1100.3666666666667")],
    (names.VLLM_NUM_ACCEPTED_TOKENS, False): [({}, "1649.6")],
    (names.VLLM_NUM_DRAFT_TOKENS, False): [({}, "3300")],
    (names.VLLM_ACCEPTED_PER_POS, True): [
        ({"position": "0"}, "770.2"),
        ({"position": "1"}, "549.9"),
        ({"position": "2"}, "330"),
    ],
}


def lookup(q: str) -> list[tuple[dict[str, str], str]]:
    for (name, grouped), rows in QUERY_RESULTS.items():
        if (name + "_total{" in q or name + "_total[" in q) and ("by (" in q) == grouped and "increase(" in q:
            return rows
    return []


class PromHandler(BaseHTTPRequestHandler):
    queries: ClassVar[list[dict[str, list[str]]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        params = parse_qs(url.query)
        PromHandler.queries.append(params)
        if url.path == "/api/v1/query":
            q = params["query"][0]
            rows = lookup(q)
            ts = float(params.get("time", ["0"])[0])
            result = [{"metric": m, "value": [ts, v]} for m, v in rows]
            body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        elif url.path == "/api/v1/query_range":
            values = [[1700000000 + i, str(2.4 + i / 10)] for i in range(3)]
            body = {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]},
            }
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = orjson.dumps(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), PromHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    PromHandler.queries = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_promql_window_rounds_increase_and_groups_by_label(prometheus: str) -> None:
    w = PromQLWindow(prometheus, 1_700_000_000.0, 1_700_000_120.5, selector='{job="vllm"}')
    assert w.increase(names.VLLM_NUM_DRAFTS) == 1100
    assert w.increase_by(names.VLLM_ACCEPTED_PER_POS, "position") == {"0": 770, "1": 550, "2": 330}
    assert w.increase("vllm:absent") is None
    q = PromHandler.queries[0]
    assert q["query"][0] == f'sum(increase({names.VLLM_NUM_DRAFTS}_total{{job="vllm"}}[121s]))'
    assert float(q["time"][0]) == pytest.approx(1_700_000_120.5)
    assert "rounded" in w.notes[0]
    assert [v for _, v in w.gauge_series(names.SGLANG_SPEC_ACCEPT_LENGTH)] == pytest.approx([2.4, 2.5, 2.6])


def test_promql_errors_name_the_query(prometheus: str) -> None:
    w = PromQLWindow(prometheus + "/missing", 0.0, 10.0)
    with pytest.raises(ScrapeError, match=r"PromQL query .* failed"):
        w.increase(names.VLLM_NUM_DRAFTS)
