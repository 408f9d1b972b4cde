"""An M0 calibration point, typed, and the reference entry built from it (alflow.methods.calibration), without Prefect."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import polars as pl
import pytest

from alflow.acceptance.stats import from_counters
from alflow.config import CalibrateParams, ModelSpec, SpecMethod, ThinkingMode, server_config
from alflow.measure import Measurement
from alflow.methods.calibration import (
    CalibrationError,
    CalibrationPoint,
    EntryContext,
    mode_point,
    reference_entry,
)
from alflow.metrics.client import summarize
from alflow.metrics.prometheus import Snapshot
from alflow.reference.table import Variant, m0_variant
from alflow.results.manifest import ServerRecord

pytestmark = pytest.mark.unit

WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SERVER = ServerRecord.model_validate(
    {
        "runner": "docker",
        "id": "c0ffee",
        "image": "vllm/vllm-openai:v0.21.0",
        "image_digest": "sha256:abc",
        "provenance": {"framework": "vllm", "framework_version": "0.21.0", "argv": ["vllm", "serve", "m"]},
    }
)
CONTEXT = EntryContext(
    method=SpecMethod.EAGLE3,
    framework="vllm",
    dataset="nvidia/SPEED-Bench",
    dataset_hash="f" * 64,
    code_version="alflow 0.1.0 (abc)",
    flow_run_id="run-1",
    host="gpu-node-1",
    variant=Variant("org/eagle3-draft", "probabilistic", "block", 4, True),
)
MODEL = ModelSpec(id="org/model", revision="r1", reasoning=True)


def _snapshot(value: float) -> Snapshot:
    return Snapshot(url="http://h/metrics", wall_time_s=value, mono_ns=int(value * 1e9), samples={})


def _measurement(*, stats: bool = True, failed: int = 0) -> Measurement:
    records = pl.DataFrame(
        {
            "request_id": [0, 1],
            "warmup": [False, False],
            "error": [None, "HTTP 500" if failed else None],
            "start_ns": [0, 0],
            "first_token_ns": [10_000_000, 10_000_000],
            "end_ns": [50_000_000, 60_000_000],
            "chunk_ns": [[10_000_000, 50_000_000], [10_000_000, 60_000_000]],
            "input_tokens": [5, 5],
            "output_tokens": [6, 6],
        }
    )
    return Measurement(
        records=records,
        client=summarize(records, duration_s=1.0),
        spec_stats=from_counters(1000, 1700, draft_tokens=3000, k=3) if stats else None,
        dialect="vllm",
        baseline=_snapshot(1.0),
        final=_snapshot(2.0),
    )


def _point() -> CalibrationPoint:
    mode = mode_point(_measurement(failed=1), prompts=40, subject="org/model K=3 thinking=on")
    return CalibrationPoint(measured_at=WHEN, server=SERVER, modes={"on": mode})


def test_the_reference_entry_carries_the_servers_statistics_and_the_launch_provenance() -> None:
    entry = reference_entry(_point(), MODEL, 3, ThinkingMode.ON, CONTEXT)
    assert (entry.model, entry.k, entry.thinking, entry.method) == (
        "org/model",
        3,
        ThinkingMode.ON,
        SpecMethod.EAGLE3,
    )
    assert entry.al == pytest.approx(2.7)
    assert (entry.num_drafts, entry.accepted_tokens, entry.draft_tokens) == (1000, 1700, 3000)
    assert entry.ci_low is not None
    assert entry.ci_high is not None
    assert entry.ci_low < entry.al < entry.ci_high
    prov = entry.provenance
    assert prov is not None
    assert (prov.framework, prov.framework_version) == ("vllm", "0.21.0")
    assert (prov.image, prov.image_digest) == ("vllm/vllm-openai:v0.21.0", "sha256:abc")
    assert prov.command == ("vllm", "serve", "m")
    assert (prov.prompt_count, prov.date, prov.flow_run_id, prov.host) == (40, WHEN, "run-1", "gpu-node-1")
    assert prov.sampling == MODEL.sampling(ThinkingMode.ON)
    # the drafter variant it was measured with (schema 2)
    assert entry.variant == Variant("org/eagle3-draft", "probabilistic", "block", 4, True)
    assert (entry.draft_model, entry.concurrency, entry.prefix_caching) == ("org/eagle3-draft", 4, True)


def test_m0_variant_comes_from_the_params_and_the_server_template() -> None:
    model = ModelSpec(id="m")
    plain = CalibrateParams(models=(model,), method="mtp", server=server_config(framework="sim", model="m"))
    # vLLM's defaults stored explicitly; M0's default load and the template's prefix caching (off)
    assert m0_variant(plain) == Variant(None, "greedy", "standard", 1, False)
    server = server_config(
        framework="sim",
        model="m",
        enable_prefix_caching=True,
        speculative={
            "method": "eagle3",
            "k": 3,
            "draft_model": "org/d",
            "draft_sample_method": "probabilistic",
            "rejection_sample_method": "block",
        },
    )
    params = CalibrateParams(
        models=(model,), method="eagle3", draft_model="org/d", server=server, load={"concurrency": 8}
    )
    assert m0_variant(params) == Variant("org/d", "probabilistic", "block", 8, True)
    # a self-drafting method records no draft model even when the params name one
    mtp = CalibrateParams(
        models=(model,), method="mtp", draft_model="org/d", server=server_config(framework="sim", model="m")
    )
    assert m0_variant(mtp).draft_model is None


def test_the_point_survives_pickling_as_prefect_caches_it() -> None:
    point = _point()
    back = pickle.loads(pickle.dumps(point))
    assert back.mode(ThinkingMode.ON).stats == point.mode(ThinkingMode.ON).stats
    assert back.mode(ThinkingMode.ON).failed == 1
    assert back.mode(ThinkingMode.ON).scrapes()["dialect"] == "vllm"


def test_a_mode_without_speculative_steps_or_not_measured_is_refused_by_name() -> None:
    with pytest.raises(
        CalibrationError, match="no speculative steps measured for org/model K=3 thinking=off"
    ):
        mode_point(_measurement(stats=False), prompts=40, subject="org/model K=3 thinking=off")
    with pytest.raises(CalibrationError, match=r"no thinking=off measurement \(it has \['on'\]\)"):
        reference_entry(_point(), MODEL, 3, ThinkingMode.OFF, CONTEXT)


def test_a_launch_without_a_framework_falls_back_to_the_configured_one() -> None:
    point = _point()
    bare = CalibrationPoint(point.measured_at, ServerRecord(), point.modes)
    prov = reference_entry(bare, MODEL, 3, ThinkingMode.ON, CONTEXT).provenance
    assert prov is not None
    assert (prov.framework, prov.image, prov.command) == ("vllm", None, None)
