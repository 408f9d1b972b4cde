"""Exposition parsing, snapshots, windowed deltas with resets, scraping, background series, PromQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import orjson
import pytest

from alflow.acceptance.stats import CounterResetError
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.frameworks.vllm import names as vllm_names
from alflow.metrics.prometheus import (
    PeriodicScraper,
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    counter_resets,
    parse_exposition,
    scrape,
)
from alflow.metrics.promql import PromQLWindow, promql_start
from alflow.util.rows import dump_row, load_row
from tests.unit.loopback_http import serving
from tests.unit.sse_server import SseServer

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"


def snap(name: str, t: float = 0.0, mono: int = 0) -> Snapshot:
    return parse_exposition((FIX / name).read_text(), url=name, wall_time_s=t, mono_ns=mono)


def test_parses_total_samples_e_notation_and_keeps_created_apart() -> None:
    s = snap("vllm_before.txt")
    assert s.counter(vllm_names.VLLM_NUM_DRAFTS) == 1_234_567 + 100  # 1.234567e+06 plus engine 1, summed
    assert s.counter(vllm_names.VLLM_NUM_DRAFTS, {"engine": "1"}) == 100
    # the _created gauge (a unix timestamp) is never read as the counter's value
    assert "vllm:spec_decode_num_drafts_created" in s.samples
    assert s.counter(vllm_names.VLLM_NUM_DRAFTS) < 1e9
    assert s.gauge(vllm_names.VLLM_NUM_RUNNING) == 6.0
    assert s.counter("vllm:does_not_exist") is None
    assert s.has(vllm_names.VLLM_NUM_DRAFTS)


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
    assert s.counter(vllm_names.VLLM_NUM_DRAFTS) == 25_000_000
    assert "process_cpu_seconds_count" not in s.samples  # summaries are skipped
    assert s.types[vllm_names.VLLM_NUM_DRAFTS] == "counter"


def test_invalid_text_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="not valid Prometheus"):
        parse_exposition("metric{unclosed 1\n", url="u")


def test_window_deltas_and_per_label_grouping() -> None:
    w = SnapshotWindow(snap("vllm_before.txt", mono=1), snap("vllm_after.txt", mono=2))
    assert w.increase(vllm_names.VLLM_NUM_DRAFTS) == 1100
    assert w.increase(vllm_names.VLLM_NUM_ACCEPTED_TOKENS) == 1650
    assert w.increase(vllm_names.VLLM_NUM_DRAFTS, {"engine": "0"}) == 1000
    assert w.increase_by(vllm_names.VLLM_ACCEPTED_PER_POS, "position") == {"0": 770, "1": 550, "2": 330}
    assert w.increase("vllm:absent") is None
    assert counter_resets(w.before, w.after) == []


def test_counter_reset_is_detected() -> None:
    before, after = snap("vllm_before.txt", mono=1), snap("vllm_after_reset.txt", mono=2)
    assert vllm_names.VLLM_NUM_DRAFTS + "_total" in counter_resets(before, after)
    with pytest.raises(CounterResetError, match="went backwards"):
        SnapshotWindow(before, after).increase(vllm_names.VLLM_NUM_DRAFTS)


def test_snapshot_round_trips_through_json() -> None:
    s = snap("sglang_after.txt", t=12.5, mono=99)
    back = load_row(Snapshot, orjson.loads(orjson.dumps(dump_row(s))))
    assert back.samples == s.samples
    assert (back.wall_time_s, back.mono_ns, back.url) == (12.5, 99, "sglang_after.txt")


async def test_scrape_over_http_and_clear_errors() -> None:
    async with SseServer() as srv:
        srv.state.metrics_text = (FIX / "trtllm_after.txt").read_text()
        s = await scrape(srv.base_url + "/metrics")
        assert s.counter(trtllm_names.TRTLLM_NUM_DRAFT_TOKENS) == 3_003_000
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
    values = [v for _, v in bg.series(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH)]
    assert 4 <= len(values) <= 10
    assert values[0] == pytest.approx(2.41)
    assert values[-1] == pytest.approx(2.56)
    w = SnapshotWindow(bg.snapshots[0], bg.snapshots[-1], series=bg.snapshots)
    assert len(w.gauge_series(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH)) == len(values)
    assert bg.errors == []


# ---- a Prometheus server's HTTP API, as a thread on an ephemeral port ----

# Counter series as Prometheus holds them: (labels, value at the window's start, value after its end);
# None: no such series then. Two nodes (instances); the sums over them are whole-window counts.
SERIES: dict[str, list[tuple[dict[str, str], float | None, float | None]]] = {
    vllm_names.VLLM_NUM_DRAFTS: [({"instance": "n0"}, 40, 640), ({"instance": "n1"}, 60, 560)],
    vllm_names.VLLM_NUM_ACCEPTED_TOKENS: [({"instance": "n0"}, 50, 950), ({"instance": "n1"}, 0, 750)],
    vllm_names.VLLM_NUM_DRAFT_TOKENS: [({"instance": "n0"}, 120, 1920), ({"instance": "n1"}, 180, 1680)],
    vllm_names.VLLM_ACCEPTED_PER_POS: [
        ({"instance": "n0", "position": "0"}, 10, 410),
        ({"instance": "n0", "position": "1"}, 20, 320),
        ({"instance": "n0", "position": "2"}, 20, 220),
        ({"instance": "n1", "position": "0"}, 0, 370),
        ({"instance": "n1", "position": "1"}, 5, 255),
        ({"instance": "n1", "position": "2"}, 0, 130),
    ],
    "vllm:went_back": [({"instance": "n0"}, 10, 50), ({"instance": "n1"}, 30, 5)],
    "vllm:vanished": [({"instance": "n0"}, 10, 50), ({"instance": "n1"}, 30, None)],
    "vllm:absent": [],
}
OTHER_SERIES = 8
"""Series of a counter the table above does not name (zero throughout): enough for any baseline's count."""


def series_of(q: str) -> tuple[str, list[tuple[dict[str, str], float | None, float | None]]]:
    """The counter a query reads (``timestamp(NAME_total{...})`` or ``NAME_total{...}``) and its series."""
    name = q.removeprefix("timestamp(").split("_total", 1)[0]
    default: list[tuple[dict[str, str], float | None, float | None]] = [
        ({"instance": f"x{i}"}, 0.0, 0.0) for i in range(OTHER_SERIES)
    ]
    return name, SERIES.get(name, default)


class PromHandler(BaseHTTPRequestHandler):
    """Answers instant queries for counter values and sample timestamps, and range queries for gauges.

    A value query with ``time`` gets the start values; one without gets the values "now": the start
    values for the first ``start_reads`` such reads of a counter (a window's start read after warm-up),
    the end values after that. Sample timestamps are now plus ``stamp_lag_s`` (negative: stale).
    """

    queries: ClassVar[list[dict[str, list[str]]]] = []
    start_reads: ClassVar[int] = 0
    stamp_lag_s: ClassVar[float] = 1.0
    reads: ClassVar[dict[str, int]] = {}

    def vector(self, q: str, at: str | None) -> list[dict[str, object]]:
        name, series = series_of(q)
        now = time.time()
        if q.startswith("timestamp("):
            values = [(labels, now + self.stamp_lag_s) for labels, _, end in series if end is not None]
            return [{"metric": m, "value": [now, str(v)]} for m, v in values]
        if at is None:
            PromHandler.reads[name] = PromHandler.reads.get(name, 0) + 1
        start = at is not None or PromHandler.reads[name] <= PromHandler.start_reads
        picked = [(m, s if start else e) for m, s, e in series]
        return [
            {"metric": {"__name__": name + "_total", **m}, "value": [now, str(v)]}
            for m, v in picked
            if v is not None
        ]

    def do_GET(self) -> None:
        url = urlparse(self.path)
        params = parse_qs(url.query)
        PromHandler.queries.append(params)
        if url.path == "/api/v1/query":
            result = self.vector(params["query"][0], params.get("time", [None])[0])
            body: dict[str, object] = {
                "status": "success",
                "data": {"resultType": "vector", "result": result},
            }
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
    PromHandler.queries = []
    PromHandler.reads = {}
    PromHandler.start_reads = 0
    PromHandler.stamp_lag_s = 1.0
    with serving(PromHandler) as url:
        yield url


def test_promql_window_differences_counter_values_per_series_without_extrapolation(prometheus: str) -> None:
    w = PromQLWindow(prometheus, 1_700_000_000.0, 1_700_000_120.5, selector='{job="vllm"}')
    assert w.increase(vllm_names.VLLM_NUM_DRAFTS) == 1100  # (640 - 40) + (560 - 60): exact, nothing rounded
    assert w.increase(vllm_names.VLLM_NUM_DRAFTS, {"instance": "n1"}) == 500
    assert w.increase_by(vllm_names.VLLM_ACCEPTED_PER_POS, "position") == {"0": 770, "1": 550, "2": 330}
    assert w.increase("vllm:absent") is None
    assert not w.has("vllm:absent")
    sel = f'{vllm_names.VLLM_NUM_DRAFTS}_total{{job="vllm"}}'
    stamps, end, start = PromHandler.queries[:3]
    assert stamps["query"] == [f"timestamp({sel})"]  # waits for a scrape after the window's end
    assert end == {"query": [sel]}  # then the values as Prometheus holds them
    assert start["query"] == [sel]
    assert float(start["time"][0]) == pytest.approx(1_700_000_000.0)  # no start read after warm-up
    assert not any("increase(" in q["query"][0] for q in PromHandler.queries)
    assert "no extrapolation" in w.notes[0]
    assert "latest scrapes at or before 1700000000.000 (they may count the warm-up" in w.notes[0]
    assert [v for _, v in w.gauge_series(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH)] == pytest.approx(
        [2.4, 2.5, 2.6]
    )


def test_promql_start_after_warmup_is_the_window_start(prometheus: str) -> None:
    PromHandler.start_reads = 1
    counters = {vllm_names.VLLM_NUM_DRAFTS: 2, vllm_names.VLLM_ACCEPTED_PER_POS: 6, "vllm:absent": 0}
    start = promql_start(prometheus, counters, time.time(), selector='{job="vllm"}')
    assert set(start.values) == {vllm_names.VLLM_NUM_DRAFTS, vllm_names.VLLM_ACCEPTED_PER_POS}
    assert sum(start.values[vllm_names.VLLM_NUM_DRAFTS].values()) == 100
    w = PromQLWindow(prometheus, start.time_s - 1, start.time_s + 1, start=start, selector='{job="vllm"}')
    assert w.increase(vllm_names.VLLM_NUM_DRAFTS) == 1100
    assert w.increase_by(vllm_names.VLLM_ACCEPTED_PER_POS, "position") == {"0": 770, "1": 550, "2": 330}
    assert not any("time" in q for q in PromHandler.queries)  # every start value read after warm-up
    assert "warm-up's end" in w.notes[0]
    PromHandler.start_reads = 0
    assert w.increase(vllm_names.VLLM_NUM_ACCEPTED_TOKENS) == 1650  # not read after warm-up: read at start_s
    assert any("not read after warm-up" in n for n in w.notes)


def test_promql_waits_for_every_series_and_a_scrape_after_the_instant(prometheus: str) -> None:
    PromHandler.stamp_lag_s = -5.0  # every latest sample is older than the instant asked for
    w = PromQLWindow(prometheus, time.time() - 10, time.time(), sync_timeout_s=0.3, poll_s=0.05)
    with pytest.raises(ScrapeError, match=r"has not scraped all 2 series of .*num_drafts_total since"):
        w.increase(vllm_names.VLLM_NUM_DRAFTS)
    PromHandler.stamp_lag_s = 1.0
    with pytest.raises(ScrapeError, match=r"not scraped all 3 series .* \(2 series;"):
        promql_start(
            prometheus, {vllm_names.VLLM_NUM_DRAFTS: 3}, time.time(), sync_timeout_s=0.3, poll_s=0.05
        )


def test_promql_window_refuses_a_counter_that_went_back_or_vanished(prometheus: str) -> None:
    w = PromQLWindow(prometheus, 0.0, 10.0)
    with pytest.raises(CounterResetError, match=r"went_back\{'instance': 'n1'\} went backwards by 25 "):
        w.increase("vllm:went_back")
    assert w.increase("vllm:went_back", {"instance": "n0"}) == 40
    with pytest.raises(
        CounterResetError, match=r"vllm:vanished\{'instance': 'n1'\} vanished from Prometheus"
    ):
        w.increase("vllm:vanished")


def test_promql_errors_name_the_query(prometheus: str) -> None:
    w = PromQLWindow(prometheus + "/missing", 0.0, 10.0)
    with pytest.raises(ScrapeError, match=r"PromQL query .* failed"):
        w.increase(vllm_names.VLLM_NUM_DRAFTS)
