"""The client-timing judgement: coalescing arithmetic, the ITL and client-bound rules, the monitor, the report."""

from __future__ import annotations

import asyncio
import random
import time

import polars as pl
import pytest

from alflow.loadgen.frames import records_frame
from alflow.loadgen.monitor import LoadMonitor
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.timing import (
    CLOCK_LAG_P99_MAX_MS,
    ClientLoad,
    ClientTiming,
    client_timing,
    coalescing,
)
from alflow.metrics.client import summarize
from alflow.util.rows import dump_row

pytestmark = pytest.mark.unit

MS = 1_000_000


def _load(**over: object) -> ClientLoad:
    base: dict[str, object] = {
        "wall_s": 10.0, "cpu_s": 2.0, "lag_samples": 1000, "lag_p50_ms": 0.1, "lag_p99_ms": 0.5,
        "lag_max_ms": 2.0, "concurrency": 64, "in_flight_max": 64, "in_flight_mean": 63.8,
    }  # fmt: skip
    base.update(over)
    return ClientLoad(**base)  # type: ignore[arg-type]


def _records(chunks: list[list[int]], source: str = "kernel") -> pl.DataFrame:
    recs = []
    for i, ns in enumerate(chunks):
        rec = RequestRecord(request_id=i, session_id=f"s{i}", start_ns=0, chunk_ns=ns, stamp_source=source)
        rec.first_token_ns, rec.end_ns, rec.done_ns = ns[0], ns[-1], ns[-1]
        rec.http_status, rec.input_tokens, rec.output_tokens = 200, 4, len(ns)
        recs.append(rec)
    return records_frame(recs)


def test_coalescing_counts_chunks_sharing_a_read_and_the_gaps_they_spoil() -> None:
    # request 0: a read of three chunks after the first (two zero gaps, and the 10 ms gap leading into it)
    # request 1: a read of two at the start (one zero gap, nothing leads into it); request 2: one chunk
    series = pl.Series(
        [[0, 10 * MS, 10 * MS, 10 * MS, 40 * MS], [7, 7, 20 * MS], [5]], dtype=pl.List(pl.Int64)
    )
    assert coalescing(series) == (9, 5, 6, 4, 1)
    assert coalescing(pl.Series([[0, MS, 2 * MS]], dtype=pl.List(pl.Int64))) == (3, 0, 2, 0, 0)
    assert coalescing(pl.Series([], dtype=pl.List(pl.Int64))) == (0, 0, 0, 0, 0)


def test_itl_percentiles_need_uncoalesced_reads_and_with_the_clock_a_punctual_loop() -> None:
    clean = [[i * 10 * MS for i in range(50)] for _ in range(4)]  # 196 gaps, none spoiled
    assert client_timing(
        _records(clean), _load(lag_p99_ms=30.0)
    ).itl_measurable  # kernel stamps: lag is undone
    late = client_timing(_records(clean, "clock"), _load(lag_p99_ms=2 * CLOCK_LAG_P99_MAX_MS))
    assert not late.itl_measurable
    assert "dated by the process clock while the event loop's p99 lag was 2.0 ms" in str(late.itl_note)
    assert client_timing(_records(clean, "clock"), _load()).itl_measurable
    spoiled = [list(c) for c in clean]
    spoiled[0][10:13] = [120 * MS] * 3  # 3 chunks in one read: 2 zero gaps + the one leading in = 3 of 196
    judged = client_timing(_records(spoiled), _load())
    assert judged.distorted_gaps == 3
    assert not judged.itl_measurable
    assert judged.itl_note is not None
    assert judged.itl_note.startswith("1.5% of inter-chunk gaps")


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"cpu_s": 9.5}, "the client used 95% of a core per process"),
        ({"lag_p99_ms": 12.0}, "the event loop's p99 lag was 12.0 ms"),
        ({"in_flight_mean": 50.0}, "50.0 of 64 streams were in flight on average"),
    ],
)
def test_the_client_is_the_bottleneck_on_cpu_lag_or_streams_in_flight(
    over: dict[str, object], reason: str
) -> None:
    judged = client_timing(_records([[0, MS]]), _load(**over))
    assert judged.verdict == "client-bound"
    assert any(r.startswith(reason) for r in judged.reasons), judged.reasons
    assert client_timing(_records([[0, MS]]), _load()).verdict == "ok"


def test_open_loop_runs_are_not_judged_by_streams_in_flight() -> None:
    judged = client_timing(_records([[0, MS]]), _load(in_flight_mean=3.0, closed_loop=False))
    assert judged.verdict == "ok"


def test_the_stamp_source_of_a_phase() -> None:
    assert client_timing(_records([[0, MS]], "kernel"), None).stamp_source == "kernel"
    mixed = pl.concat([_records([[0, MS]], "kernel"), _records([[0, MS]], "clock")])
    assert client_timing(mixed, None).stamp_source == "mixed"
    assert client_timing(_records([[0, MS]]).clear(), None).stamp_source == "none"


def test_summarize_keeps_the_itl_mean_and_drops_what_coalescing_spoils() -> None:
    rows = [[0, 10 * MS, 10 * MS, 10 * MS, 40 * MS]] * 3
    s = dump_row(summarize(_records(rows), duration_s=1.0))
    assert s["mean_itl_ms"] == pytest.approx(10.0)  # the gaps' sum survives: (40 ms) / 4 gaps
    assert s["median_itl_ms"] is None
    assert s["p99_itl_ms"] is None
    assert s["std_itl_ms"] is None
    assert str(s["itl_ms_note"]).startswith("ITL median, std and percentiles not measurable: 75.0% of")
    timing = s["client_timing"]
    assert isinstance(timing, dict)
    assert timing["coalesced_share"] == pytest.approx(0.6)
    first_merged = dump_row(summarize(_records([[0, 0, 0, 40 * MS]] * 3), duration_s=1.0))
    assert first_merged["mean_itl_ms"] is None  # the first chunk came late: the gaps' sum is short
    assert str(first_merged["itl_ms_note"]).startswith("ITL (every figure) not measurable:")
    clean = dump_row(summarize(_records([[0, 10 * MS, 20 * MS]]), duration_s=1.0))
    assert clean["median_itl_ms"] == pytest.approx(10.0)
    assert "itl_ms_note" not in clean


async def test_the_monitor_sees_a_blocked_loop_and_the_streams_in_flight() -> None:
    monitor = LoadMonitor(4, interval_s=0.005)
    monitor.start()
    for _ in range(4):
        monitor.opened()
    await asyncio.sleep(0.03)
    time.sleep(0.08)  # noqa: ASYNC251 (the point: the loop is blocked, the next probe wakes about 80 ms late)
    await asyncio.sleep(0.03)
    monitor.all_started()
    for _ in range(4):
        monitor.closed()
    await asyncio.sleep(0.06)  # the tail: not in the mean in flight (counted, the mean would be about 2.8)
    load = await monitor.stop()
    assert load.lag_max_ms is not None
    assert load.lag_max_ms >= 60
    assert load.in_flight_max == 4
    # 4 but for the instant between start() and the first opened(), which a busy machine can stretch to ms
    assert 3.6 < load.in_flight_mean <= 4.0
    assert load.cpu_s >= 0.0
    assert load.cpu_share is not None


def test_merged_loads_sum_the_work_and_keep_the_worst_lag() -> None:
    merged = ClientLoad.merge([_load(), _load(lag_p99_ms=7.0, cpu_s=4.0, closed_loop=False)])
    assert merged.processes == 2
    assert merged.concurrency == 128
    assert merged.lag_p99_ms == 7.0
    assert merged.cpu_share == pytest.approx(6.0 / 10.0 / 2)
    assert merged.closed_loop is False
    with pytest.raises(ValueError, match="no client load"):
        ClientLoad.merge([])


def test_the_m2_report_names_client_bound_points_and_unmeasurable_itl() -> None:
    from alflow.reports.content.m2 import client_cell, client_notes
    from alflow.results.rows import M2Point

    base = M2Point.model_validate({"concurrency": 1024, "k": 3, "framework": "sim", "target_al": 2.0, "audit": "ok",
                              "valid": True, "duration_s": 1.0})  # fmt: skip
    assert client_cell(base) == "n/a"  # a row stored before the verdict existed
    bound = M2Point.model_validate({
        **base.model_dump(), "client_verdict": "client-bound", "client_reasons": "the client used 95% of a core",
        "itl_note": "30.6% of inter-chunk gaps ...", "stamp_source": "kernel",
    })  # fmt: skip
    assert client_cell(bound) == "CLIENT-BOUND (kernel stamps)"
    notes = client_notes([bound])
    assert notes[0].startswith(
        "K=3 concurrency 1024: the load generator was the bottleneck (the client used 95%"
    )
    assert (
        notes[1]
        == "K=3 concurrency 1024: ITL median and percentiles not measurable: 30.6% of inter-chunk gaps ..."
    )
    assert client_notes([base]) == []


def _coalescing_by_definition(requests: list[list[int]]) -> tuple[int, int, int, int, int]:
    """The counts spelled out per request: runs of equal stamps are the chunks of one read."""
    chunks = coalesced = gaps = distorted = first = 0
    for ns in requests:
        chunks += len(ns)
        gaps += max(len(ns) - 1, 0)
        i = 0
        while i < len(ns):
            j = i
            while j + 1 < len(ns) and ns[j + 1] == ns[i]:
                j += 1
            size = j - i + 1
            if size > 1:
                coalesced += size
                distorted += size - 1 + (1 if i > 0 else 0)
                first += i == 0
            i = j + 1
    return chunks, coalesced, gaps, distorted, first


def test_coalescing_matches_its_definition_on_random_streams_whatever_their_neighbours() -> None:
    rng = random.Random(7)
    for _ in range(200):
        requests = []
        for _ in range(rng.randint(0, 6)):
            stamps, now = [], rng.randint(0, 3)
            for _ in range(rng.randint(0, 8)):
                now += rng.choice((0, 0, 1, 2))  # many equal neighbours: reads of several chunks
                stamps.append(now)
            requests.append(stamps)  # a request may end on the stamp the next one starts with
        series = pl.Series(requests, dtype=pl.List(pl.Int64))
        assert coalescing(series) == _coalescing_by_definition(requests), requests


def test_stored_client_timing_is_the_json_of_the_previous_release() -> None:
    """pydantic stores it (:func:`dump_row`) as the hand-written ``to_dict`` did: verdict, rounded shares and load."""
    load = ClientLoad(1.23456, 0.98765, 10, 0.12345, None, 3.00001, 4, 4, 3.99999, 2, False)
    timing = ClientTiming("clock", 7, 3, 6, 1, load, True, ("x",), False, "n")
    assert dump_row(timing) == {
        "verdict": "client-bound", "reasons": ["x"], "stamp_source": "clock", "chunks": 7, "coalesced_chunks": 3,
        "coalesced_share": 0.428571, "gaps": 6, "distorted_gaps": 1, "distorted_share": 0.166667,
        "itl_measurable": False, "itl_mean_measurable": True, "itl_note": "n",
        "client_load": {
            "wall_s": 1.235, "cpu_s": 0.988, "cpu_share": 0.4, "lag_samples": 10, "lag_p50_ms": 0.123,
            "lag_p99_ms": None, "lag_max_ms": 3.0, "concurrency": 4, "in_flight_max": 4, "in_flight_mean": 4.0,
            "processes": 2, "closed_loop": False,
        },
    }  # fmt: skip
    empty = dump_row(ClientTiming("none", 0, 0, 0, 0, None, False, (), True, None))
    assert (empty["verdict"], empty["coalesced_share"], empty["client_load"]) == ("ok", None, None)
    assert "client_bound" not in empty
