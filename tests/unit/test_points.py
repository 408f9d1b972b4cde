"""One M2 point from a measurement and its audit (alflow.methods.points), without Prefect."""

from __future__ import annotations

import polars as pl
import pytest
from pydantic import ValidationError

from alflow.acceptance.stats import from_counters
from alflow.acceptance.synthetic import distribution
from alflow.gates import AuditDetails, Verdict, audit_synthetic
from alflow.measure import Measurement
from alflow.methods.points import M2Point, best_k, m2_point
from alflow.metrics.client import ClientSummary, LatencyStats
from alflow.metrics.prometheus import Snapshot

pytestmark = pytest.mark.unit


def _client(**over: object) -> ClientSummary:
    """A measured phase's summary: 8 requests, 512 tok/s on 2 GPUs, median TPOT 12.5 ms."""
    none = LatencyStats(None, None, None, ((99.0, None),))
    fields: dict[str, object] = {
        "duration": 2.0, "completed": 8, "failed": 0, "total_input_tokens": 800,
        "total_output_tokens": 1024, "request_throughput": 4.0, "output_throughput": 512.0,
        "total_token_throughput": 912.0, "ttft": LatencyStats(30.0, 25.0, 5.0, ((99.0, 41.0),)),
        "tpot": LatencyStats(13.0, 12.5, 1.0, ((99.0, 15.0),)), "itl": none, "e2el": none,
        "interactivity": LatencyStats(77.0, 80.0, 3.0, ((99.0, 90.0),)), "total_chunks": 263,
        "tokens_per_chunk": 3.9, "tokens_per_chunk_after_first": 4.0, "num_nodes": 1, "num_gpus": 2,
        "output_throughput_per_gpu": 256.0, "total_token_throughput_per_gpu": 456.0,
    }  # fmt: skip
    fields.update(over)
    return ClientSummary(**fields)  # type: ignore[arg-type]


def _measurement(**kw: object) -> Measurement:
    base: dict[str, object] = {
        "records": pl.DataFrame({"ok": [True] * 8}),
        "client": _client(),
        "spec_stats": from_counters(1000, 3000, draft_tokens=4000, k=4),
        "dialect": "vllm",
        "duration_s": 2.0,
    }
    base.update(kw)
    return Measurement(**base)  # type: ignore[arg-type]


def _point(m: Measurement, audit: Verdict | None) -> tuple[dict[str, object], list[str]]:
    point, failures = m2_point(
        m,
        concurrency=4,
        k=4,
        framework="sim",
        target_al=4.0,
        nodes=1,
        audit=audit,
        metrics_where="http://x/metrics",
    )
    return point.model_dump(), failures


def test_an_audited_point_carries_the_audit_and_the_client_numbers() -> None:
    m = _measurement()
    assert m.spec_stats is not None
    verdict = audit_synthetic(m.spec_stats, distribution("vllm", 4, al=4.0), subject="sim K=4 concurrency 4")
    point, failures = _point(m, verdict)
    assert verdict.passed
    assert failures == []
    assert point["valid"] is True
    assert point["partial"] is False
    assert point["achieved_al"] == 4.0
    assert isinstance(verdict.details, AuditDetails)
    assert point["expected_al"] == verdict.details.expected_al
    assert point["allowed_deviation"] == verdict.details.allowed
    assert point["num_drafts"] == 1000
    assert point["output_throughput_per_gpu"] == 256.0
    assert point["total_token_throughput"] == 912.0
    assert (point["median_tpot_ms"], point["median_ttft_ms"], point["p99_ttft_ms"]) == (12.5, 25.0, 41.0)
    assert point["median_itl_ms"] is None  # no inter-chunk gaps measured: stored as missing, never as 0
    assert point["median_interactivity_tokens_per_s"] == 80.0
    assert point["duration_s"] == 2.0


def test_a_failed_audit_makes_the_point_invalid_and_names_it() -> None:
    m = _measurement(spec_stats=from_counters(1000, 1000, draft_tokens=4000, k=4))  # AL 2, target 4
    assert m.spec_stats is not None
    verdict = audit_synthetic(m.spec_stats, distribution("vllm", 4, al=4.0), subject="sim K=4 concurrency 4")
    point, failures = _point(m, verdict)
    assert not point["valid"]
    assert failures == [verdict.message]
    assert "FAILED" in str(point["audit"])


def test_an_aborted_point_is_partial_and_invalid_and_keeps_its_requests_count() -> None:
    point, failures = _point(_measurement(aborted="the server stopped answering", spec_stats=None), None)
    assert point["partial"] is True
    assert point["valid"] is False
    assert len(failures) == 1
    assert "aborted mid-point (the server stopped answering); its 8 requests are kept" in failures[0]


def test_a_server_that_died_with_requests_in_flight_cuts_the_point_short_like_an_abort() -> None:
    """No request found the server gone (nothing aborted the load), but some failed and the final scrape found none."""
    baseline = Snapshot(url="http://x/metrics", wall_time_s=1.0, mono_ns=1, samples={})
    gone = "the final metrics scrape failed, so the window has no end: cannot scrape http://x/metrics"
    m = _measurement(
        spec_stats=None, baseline=baseline, stats_error=gone, client=_client(completed=5, failed=3)
    )
    assert m.aborted is None
    assert m.cut_short == f"the server stopped answering: 3 measured request(s) failed and {gone}"
    point, failures = _point(m, None)
    assert (point["partial"], point["valid"]) == (True, False)
    assert failures == [f"sim K=4 concurrency 4: aborted mid-point ({m.cut_short}); its 8 requests are kept and the "
                        "point is marked partial"]  # fmt: skip
    assert (
        _measurement(spec_stats=None, baseline=baseline, stats_error=gone).cut_short is None
    )  # all answered
    assert _measurement(aborted="refused", baseline=baseline, stats_error=gone).cut_short == "refused"


def test_a_point_without_spec_stats_is_invalid_and_says_where_it_looked() -> None:
    point, failures = _point(_measurement(spec_stats=None, stats_error="counter reset"), None)
    assert point["valid"] is False
    assert failures == ["sim K=4 concurrency 4: no spec-decode stats at http://x/metrics: counter reset"]


def test_failed_requests_invalidate_an_audited_point() -> None:
    m = _measurement(client=_client(failed=2))
    assert m.spec_stats is not None
    verdict = audit_synthetic(m.spec_stats, distribution("vllm", 4, al=4.0), subject="s")
    point, failures = _point(m, verdict)
    assert verdict.passed
    assert point["valid"] is False
    assert failures == ["sim K=4 concurrency 4: 2 requests failed"]


def _m2(k: int, conc: int, thr: float | None, inter: float | None, valid: bool = True) -> M2Point:
    return M2Point(
        concurrency=conc, k=k, framework="vllm", target_al=2.0, achieved_al=2.0, valid=valid, partial=False,
        audit="ok", num_drafts=100, expected_al=2.0, allowed_deviation=0.1, completed=8, failed=0,
        output_throughput=thr, nodes=1, num_gpus=1, total_token_throughput=thr, output_throughput_per_gpu=thr,
        total_token_throughput_per_gpu=thr, median_interactivity_tokens_per_s=inter, median_tpot_ms=10.0,
        median_ttft_ms=5.0, p99_ttft_ms=9.0, median_itl_ms=20.0, tokens_per_chunk=2.0, duration_s=1.0,
    )  # fmt: skip


def test_best_k_per_concurrency_by_throughput_per_gpu_and_by_interactivity() -> None:
    points = [
        _m2(1, 4, 100.0, 90.0),
        _m2(3, 4, 150.0, 80.0),
        _m2(5, 4, 999.0, 999.0, valid=False),  # an invalid point takes no part
        _m2(1, 16, 300.0, None),
        _m2(3, 16, 300.0, 40.0),  # equal throughput: the lower K wins; a missing figure counts as 0
    ]
    best = best_k(points)
    assert [b.concurrency for b in best] == [4, 16]
    assert (best[0].best_k_throughput, best[0].output_throughput_per_gpu) == (3, 150.0)
    assert (best[0].best_k_interactivity, best[0].median_interactivity_tokens_per_s) == (1, 90.0)
    assert (best[1].best_k_throughput, best[1].best_k_interactivity) == (1, 3)
    assert best_k([_m2(1, 4, 1.0, 1.0, valid=False)]) == []
    assert M2Point.model_validate(points[0].model_dump()) == points[0]


def test_a_stored_row_from_an_older_version_reads_with_its_missing_figures_as_none() -> None:
    old = {
        "concurrency": 4,
        "k": 3,
        "framework": "vllm",
        "target_al": 2.5,
        "achieved_al": 2.49,
        "valid": True,
    }
    point = M2Point.model_validate({**old, "a_future_column": 1})
    assert (point.concurrency, point.k, point.achieved_al, point.valid) == (4, 3, 2.49, True)
    assert (point.partial, point.nodes, point.num_drafts, point.allowed_deviation) == (False, 1, None, None)
    with pytest.raises(ValidationError, match="an M2 point row lacks concurrency, target_al"):
        M2Point.model_validate({"k": 3})
