"""Metrics across endpoints (issue 10): a server with several metrics endpoints is scraped as one.

Two endpoints serve real Prometheus exposition text (vLLM's format): node 0 the committed fixtures,
node 1 a smaller data-parallel rank. Counters are summed per series; a reset on one endpoint is
detected even when the other's growth makes the sum go up; spec stats come from the sum.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from alflow.acceptance.stats import CounterResetError
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.vllm import names as vllm_names
from alflow.metrics.prometheus import (
    PeriodicScraper,
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    counter_resets,
    merge_snapshots,
    parse_exposition,
    scrape_all,
)
from alflow.metrics.readers import get_dialect
from alflow.util.rows import dump_row, load_row
from tests.unit.sse_server import SseServer

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def node1_text(drafts: int, accepted_per_pos: tuple[int, int, int]) -> str:
    """vLLM exposition text of a second node (engine 0 of its own, K = 3)."""
    accepted = sum(accepted_per_pos)
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} {float(drafts)}',
        "# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_created gauge",
        f'vllm:spec_decode_num_drafts_created{{engine="0",model_name="{MODEL}"}} 1.9e+09',
        "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{MODEL}"}} {float(3 * drafts)}',
        "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{MODEL}"}} {float(accepted)}',
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{MODEL}",position="{i}"}} '
        f"{float(n)}"
        for i, n in enumerate(accepted_per_pos)
    ]
    lines += [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 2.0',
    ]
    return "\n".join(lines) + "\n"


def fixture(name: str, url: str, mono: int) -> Snapshot:
    return parse_exposition((FIX / name).read_text(), url=url, wall_time_s=float(mono), mono_ns=mono)


def node1(drafts: int, per_pos: tuple[int, int, int], mono: int) -> Snapshot:
    return parse_exposition(node1_text(drafts, per_pos), url="http://n2:8001/metrics", mono_ns=mono)


def test_merged_snapshot_sums_counters_per_series_and_keeps_the_latest_created() -> None:
    a = fixture("vllm_before.txt", "http://n1:8000/metrics", 1)
    b = node1(400, (300, 200, 100), 2)
    merged = merge_snapshots([a, b])
    assert merged.urls == ("http://n1:8000/metrics", "http://n2:8001/metrics")
    assert merged.url == "http://n1:8000/metrics + http://n2:8001/metrics"
    # engine 0 exists on both endpoints: summed; engine 1 only on node 0: kept
    assert merged.counter(vllm_names.VLLM_NUM_DRAFTS, {"engine": "0"}) == 1_234_567 + 400
    assert merged.counter(vllm_names.VLLM_NUM_DRAFTS, {"engine": "1"}) == 100
    assert merged.counter(vllm_names.VLLM_NUM_DRAFTS) == a.counter(vllm_names.VLLM_NUM_DRAFTS) + 400
    assert merged.gauge(vllm_names.VLLM_NUM_RUNNING) == 6.0 + 2.0
    created = merged.samples["vllm:spec_decode_num_drafts_created"]
    assert max(created.values()) == 1.9e9  # a timestamp is never summed
    assert merged.mono_ns == 2
    assert merge_snapshots([a]) is a


def test_merging_refuses_nothing_and_duplicates() -> None:
    a = fixture("vllm_before.txt", "http://n1:8000/metrics", 1)
    with pytest.raises(ScrapeError, match="no metrics endpoint"):
        merge_snapshots([])
    with pytest.raises(ScrapeError, match="listed twice"):
        merge_snapshots([a, a])


def test_window_over_two_endpoints_gives_spec_stats_of_the_sum() -> None:
    before = merge_snapshots(
        [fixture("vllm_before.txt", "http://n1:8000/metrics", 1), node1(400, (300, 200, 100), 2)]
    )
    after = merge_snapshots(
        [fixture("vllm_after.txt", "http://n1:8000/metrics", 3), node1(1400, (1100, 700, 400), 4)]
    )
    single = SnapshotWindow(fixture("vllm_before.txt", "a", 1), fixture("vllm_after.txt", "a", 3)).increase(
        vllm_names.VLLM_NUM_DRAFTS
    )
    assert single is not None
    window = SnapshotWindow(before, after)
    assert window.increase(vllm_names.VLLM_NUM_DRAFTS) == single + 1000
    assert counter_resets(before, after) == []
    stats = get_dialect("vllm").spec_stats(window, k=3)
    node0 = get_dialect("vllm").spec_stats(
        SnapshotWindow(fixture("vllm_before.txt", "a", 1), fixture("vllm_after.txt", "a", 3)), k=3
    )
    assert stats.num_drafts == node0.num_drafts + 1000
    assert stats.accepted_tokens == node0.accepted_tokens + (800 + 500 + 300)
    assert stats.al == pytest.approx(1 + stats.accepted_tokens / stats.num_drafts)


def test_a_reset_on_one_endpoint_is_detected_although_the_sum_grows() -> None:
    before = merge_snapshots(
        [fixture("vllm_before.txt", "http://n1:8000/metrics", 1), node1(400, (300, 200, 100), 2)]
    )
    # node 1 restarted (its counters began again); node 0 grew by more than node 1 lost
    after = merge_snapshots(
        [fixture("vllm_after.txt", "http://n1:8000/metrics", 3), node1(50, (30, 20, 10), 4)]
    )
    total_before = before.counter(vllm_names.VLLM_NUM_DRAFTS)
    total_after = after.counter(vllm_names.VLLM_NUM_DRAFTS)
    assert total_before is not None
    assert total_after is not None
    assert total_after > total_before  # the sum alone would hide the reset
    resets = counter_resets(before, after)
    assert vllm_names.VLLM_NUM_DRAFTS + "_total at http://n2:8001/metrics" in resets
    assert all(r.endswith("at http://n2:8001/metrics") for r in resets)
    with pytest.raises(CounterResetError, match=r"went backwards.*metrics endpoint http://n2:8001/metrics"):
        SnapshotWindow(before, after).increase(vllm_names.VLLM_NUM_DRAFTS)


def test_windows_over_different_endpoint_sets_are_refused() -> None:
    before = merge_snapshots(
        [fixture("vllm_before.txt", "http://n1:8000/metrics", 1), node1(400, (300, 200, 100), 2)]
    )
    after = fixture("vllm_after.txt", "http://n1:8000/metrics", 3)
    with pytest.raises(CounterResetError, match="cannot be compared"):
        SnapshotWindow(before, after).increase(vllm_names.VLLM_NUM_DRAFTS)


def test_merged_snapshot_round_trips_through_json_with_its_parts() -> None:
    merged = merge_snapshots(
        [fixture("vllm_before.txt", "http://n1:8000/metrics", 1), node1(400, (300, 200, 100), 2)]
    )
    back = load_row(Snapshot, orjson.loads(orjson.dumps(dump_row(merged))))
    assert back.samples == merged.samples
    assert back.urls == merged.urls
    assert [p.samples for p in back.parts] == [p.samples for p in merged.parts]


async def test_scrape_all_reads_every_endpoint_over_http() -> None:
    async with SseServer() as n1, SseServer() as n2:
        n1.state.metrics_text = (FIX / "vllm_before.txt").read_text()
        n2.state.metrics_text = node1_text(400, (300, 200, 100))
        urls = [n1.base_url + "/metrics", n2.base_url + "/metrics"]
        merged = await scrape_all(urls)
        assert merged.urls == tuple(urls)
        assert merged.counter(vllm_names.VLLM_NUM_DRAFTS, {"engine": "0"}) == 1_234_567 + 400
        one = await scrape_all(urls[0])
        assert one.parts == ()
        assert one.counter(vllm_names.VLLM_NUM_DRAFTS, {"engine": "0"}) == 1_234_567
        with pytest.raises(ScrapeError, match="HTTP 404"):
            await scrape_all([urls[0], n2.base_url + "/nope"])
        async with PeriodicScraper(urls, interval_s=0.02) as bg:
            await asyncio.sleep(0.1)
        assert bg.snapshots
        assert all(s.urls == tuple(urls) for s in bg.snapshots)
        assert bg.errors == []


def test_windowed_gauge_of_several_endpoints_is_their_mean_not_their_sum() -> None:
    def sglang(al: float, url: str, mono: int) -> Snapshot:
        text = (
            "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
            "# TYPE sglang:spec_accept_length gauge\n"
            f'sglang:spec_accept_length{{model_name="m"}} {al}\n'
        )
        return parse_exposition(text, url=url, wall_time_s=float(mono), mono_ns=mono)

    before = merge_snapshots([sglang(2.4, "http://n1/metrics", 1), sglang(2.6, "http://n2/metrics", 2)])
    after = merge_snapshots([sglang(2.0, "http://n1/metrics", 3), sglang(3.0, "http://n2/metrics", 4)])
    series = SnapshotWindow(before, after).gauge_series(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH)
    assert [v for _, v in series] == [pytest.approx(2.5), pytest.approx(2.5)]
    assert after.gauge(sglang_names.SGLANG_SPEC_ACCEPT_LENGTH) == pytest.approx(
        5.0
    )  # a plain gauge read sums
