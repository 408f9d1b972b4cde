"""Framework dialects turn two scrapes into SpecStats (fixtures: AL 2.5, rates 0.7/0.5/0.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.acceptance.runtime_k import note_warnings
from alflow.acceptance.stats import CounterResetError
from alflow.errors import InvalidInputError
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.metrics.dialects import MissingMetricsError
from alflow.metrics.prometheus import SnapshotWindow, parse_exposition
from alflow.metrics.readers import candidate_metrics_urls, detect, dialects, get_dialect
from alflow.plugins import BUILTIN
from tests.simconfig import DIALECTS
from tests.unit.test_prometheus import prometheus  # noqa: F401  (fixture reuse)

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"


def window(fw: str, after: str = "after") -> SnapshotWindow:
    b = parse_exposition((FIX / f"{fw}_before.txt").read_text(), mono_ns=1)
    a = parse_exposition((FIX / f"{fw}_{after}.txt").read_text(), mono_ns=2)
    return SnapshotWindow(b, a)


def test_vllm_al_per_position_and_ci() -> None:
    st = get_dialect("vllm").spec_stats(window("vllm"))
    assert st.num_drafts == 1100
    assert st.accepted_tokens == 1650
    assert st.draft_tokens == 3300
    assert st.k == 3
    assert st.al == pytest.approx(2.5)
    assert st.acceptance_rate == pytest.approx(0.5)
    assert st.per_position_rates == pytest.approx((0.7, 0.5, 0.3))
    assert st.ci is not None
    assert st.ci.method == "histogram-iid"


def test_sglang_takes_the_prefill_token_of_each_finished_request_out() -> None:
    w = window("sglang")
    # the old ratio Δgeneration_tokens / Δverify_calls counts each request's first (prefill) token
    assert w.increase(sglang_names.SGLANG_GENERATION_TOKENS) / w.increase(
        sglang_names.SGLANG_SPEC_VERIFY_CALLS
    ) == pytest.approx(2.52)
    st = get_dialect("sglang").spec_stats(w, k=3)
    assert st.num_drafts == 1000
    assert st.accepted_tokens == 1500  # 2520 tokens - 20 requests - 1000 steps
    assert st.al == pytest.approx(2.5)
    assert st.truncated_requests == 20
    assert "Δnum_requests" in st.note
    assert "low by at most K x requests / steps = 0.0600" in st.note  # the residual, written down
    assert "spec_accept_length: 2 points" in st.note


def test_sglang_retractions_in_the_window_warn_with_the_bias_bound() -> None:
    def scrape(name: str, retracted: int, mono_ns: int) -> object:
        text = (FIX / name).read_text()
        text += "# TYPE sglang:num_retracted_requests_total counter\n"
        text += f'sglang:num_retracted_requests_total{{model_name="m"}} {retracted}\n'
        return parse_exposition(text, mono_ns=mono_ns)

    quiet = get_dialect("sglang").spec_stats(
        SnapshotWindow(scrape("sglang_before.txt", 7, 1), scrape("sglang_after.txt", 7, 2)), k=3
    )
    assert note_warnings(quiet.note) == []  # exported but unmoved: nothing to warn about
    st = get_dialect("sglang").spec_stats(
        SnapshotWindow(scrape("sglang_before.txt", 7, 1), scrape("sglang_after.txt", 12, 2)), k=3
    )
    assert st.al == pytest.approx(2.5)  # the counters' AL is what they say; the warning bounds its bias
    [warning] = note_warnings(st.note)
    assert warning.startswith("WARNING: 5 requests were retracted in the window")
    assert warning.endswith("AL reads high by up to retractions / steps = 0.0050")


def test_sglang_without_the_request_counter_refuses() -> None:
    strip = lambda name: "\n".join(  # noqa: E731
        line for line in (FIX / name).read_text().splitlines() if "num_requests" not in line
    )
    w = SnapshotWindow(
        parse_exposition(strip("sglang_before.txt"), mono_ns=1),
        parse_exposition(strip("sglang_after.txt"), mono_ns=2),
    )
    with pytest.raises(MissingMetricsError, match="prefill"):
        get_dialect("sglang").spec_stats(w, k=3)


def test_trtllm_steps_from_first_position() -> None:
    st = get_dialect("trtllm").spec_stats(window("trtllm"))
    assert st.num_drafts == 1000
    assert st.al == pytest.approx(2.5)
    assert st.per_position_rates == pytest.approx((0.7, 0.5, 0.3))
    assert st.k == 3


def test_trtllm_without_per_position_counters_refuses() -> None:
    strip = "\n".join(
        line
        for line in (FIX / "trtllm_before.txt").read_text().splitlines()
        if "tokens_total{" not in line or "num_" in line
    )
    strip_after = "\n".join(
        line
        for line in (FIX / "trtllm_after.txt").read_text().splitlines()
        if "tokens_total{" not in line or "num_" in line
    )
    w = SnapshotWindow(parse_exposition(strip, mono_ns=1), parse_exposition(strip_after, mono_ns=2))
    for k in (None, 3):  # the iteration counters alone are never used, K or not
        with pytest.raises(MissingMetricsError, match="return_perf_metrics") as info:
            get_dialect("trtllm").spec_stats(w, k=k)
        # an image before the metrics release looks the same: the message names the release and the PR
        assert "TensorRT-LLM 1.3.0rc19 (NVIDIA/TensorRT-LLM PR #12636" in str(info.value)


def test_sglang_without_the_verify_call_counter_names_the_release_not_enable_metrics() -> None:
    strip = lambda name: "\n".join(  # noqa: E731
        line for line in (FIX / name).read_text().splitlines() if "spec_verify_calls" not in line
    )
    w = SnapshotWindow(
        parse_exposition(strip("sglang_before.txt"), mono_ns=1),
        parse_exposition(strip("sglang_after.txt"), mono_ns=2),
    )
    with pytest.raises(MissingMetricsError, match=r"sglang:spec_verify_calls.*PR #25689") as info:
        get_dialect("sglang").spec_stats(w, k=3)
    assert "--enable-metrics" not in str(info.value)  # metrics are on: the release is what is missing


def test_trtllm_al_comes_from_the_per_position_family_alone() -> None:
    """A scrape taken while requests run: iteration counters moved for 1,200 steps, per-position ones for 1,000."""
    w = window("trtllm", "after_midflight")
    mixed = (
        1 + w.increase(trtllm_names.TRTLLM_NUM_ACCEPTED_TOKENS) / 1000
    )  # the old formula: accepted (iteration) / steps (per position)
    assert mixed == pytest.approx(2.9)
    st = get_dialect("trtllm").spec_stats(w, k=3)
    assert st.num_drafts == 1000
    assert st.accepted_tokens == 1500
    assert st.al == pytest.approx(2.5)
    assert st.draft_tokens == 3000
    assert "iteration counters (other timing, not used): AL ~ 2.5833" in st.note


@pytest.mark.parametrize("fw", ["vllm", "sglang", "trtllm"])
def test_counter_reset_raises(fw: str) -> None:
    with pytest.raises(CounterResetError):
        get_dialect(fw).spec_stats(window(fw, "after_reset"), k=3)


@pytest.mark.parametrize("fw", DIALECTS)
def test_detect_each_framework(fw: str) -> None:
    assert detect(parse_exposition((FIX / f"{fw}_after.txt").read_text())).name == fw


def test_detect_and_lookup_errors() -> None:
    with pytest.raises(MissingMetricsError, match="cannot detect"):
        detect(parse_exposition("process_cpu_seconds_total 3\n"))
    with pytest.raises(InvalidInputError, match="unknown metrics dialect"):
        get_dialect("tgi")
    both = (FIX / "vllm_after.txt").read_text() + (FIX / "sglang_after.txt").read_text()
    with pytest.raises(MissingMetricsError, match="several dialects"):
        detect(parse_exposition(both))


def test_missing_spec_counters_say_how_to_enable_them() -> None:
    empty = parse_exposition("vllm:num_requests_running 1\n", mono_ns=1)
    with pytest.raises(MissingMetricsError, match="speculative-config"):
        get_dialect("vllm").spec_stats(SnapshotWindow(empty, empty))


def test_metrics_urls() -> None:
    assert candidate_metrics_urls("http://h:8000/v1", "trtllm") == [
        "http://h:8000" + trtllm_names.TRTLLM_METRICS_PATH
    ]
    assert candidate_metrics_urls("http://h:8000/") == [
        "http://h:8000/metrics",
        "http://h:8000/prometheus/metrics",
    ]
    assert set(dialects()) == {spec.name for spec in BUILTIN if spec.dialect}


def test_vllm_from_promql_window(prometheus: str) -> None:  # noqa: F811
    from alflow.metrics.promql import PromQLWindow

    st = get_dialect("vllm").spec_stats(PromQLWindow(prometheus, 0.0, 60.0))
    assert st.num_drafts == 1100
    assert st.accepted_tokens == 1650
    assert st.al == pytest.approx(2.5)
    assert "Prometheus" in st.note


async def test_sglang_server_info_errors_name_both_paths() -> None:
    from alflow.frameworks.sglang.metrics import sglang_server_info_al
    from tests.unit.sse_server import SseServer

    async with SseServer() as srv:
        with pytest.raises(MissingMetricsError, match=r"/server_info: HTTP 404.*/get_server_info: HTTP 404"):
            await sglang_server_info_al(srv.base_url)


@pytest.mark.parametrize("fw", DIALECTS)
def test_every_dialect_takes_the_confidence_level_the_gate_is_configured_with(fw: str) -> None:
    from alflow.measure import window_stats

    w = window(fw)
    default = get_dialect(fw).spec_stats(w, k=3)
    stats, error = window_stats(fw, w.before, w.after, k=3, level=0.99)
    assert error is None
    assert stats is not None
    assert default.ci is not None
    assert stats.ci is not None
    assert (default.ci.level, stats.ci.level) == (0.95, 0.99)
    assert stats.ci.low < default.ci.low
    assert stats.ci.high > default.ci.high
    assert stats.al == default.al
