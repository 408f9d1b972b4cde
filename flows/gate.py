"""M1: evaluation gate. Real acceptance of the framework under test against the reference, then GSM8K.

Synthetic acceptance is off. The AL gate passes when the achieved AL (with its confidence interval)
is not below ``reference - max(abs_tol, rel_tol x reference)``; the accuracy gate when both GSM8K
scores reach the model's threshold. The flow run ends Failed, naming the metric, its value and the
threshold, when either gate fails, and emits an ``alflow.gate.failed`` event for automations. A run that
passes emits ``alflow.gate.passed`` (labels: model, framework, K; payload: the server it passed), from
which the ``m2-after-m1`` deployment's trigger in prefect.yaml starts M2.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from prefect import flow, get_run_logger, tags

from alflow.config import GateParams, LoadConfig, ThinkingMode
from alflow.gates import Verdict
from alflow.metrics.client import ClientSummary
from alflow.outcomes import M1Outcome
from alflow.redact import redact_url
from alflow.reports.markdown import M1Summary, M1Verdict
from alflow.topology import gpu_layout
from alflow.workloads import dataset_description, speed_bench_sessions
from flows.common import (
    GateFailedError,
    emit_passed,
    fail,
    open_run,
    pass_event,
    point_server,
    reference_al,
    reference_variant,
)
from flows.presets import m1_params, run_name
from tasks.gates import check_accuracy_gate, check_al_gate
from tasks.measure import request_sampling, run_load, spec_stats
from tasks.preflight import preflight, require_preflight
from tasks.results import render_report, store_results
from tasks.servers import server_lifetime


@flow(
    name="m1-gate",
    flow_run_name=run_name("m1", m1_params, lambda p: f"{p.server.framework}-{p.model.id}-k{p.k}"),
)
def gate(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    thinking: ThinkingMode | None = None,
    params: GateParams | None = None,
) -> M1Outcome:
    """M1: the AL gate on SPEED-Bench coding, then the GSM8K accuracy gate.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, sglang-h200,
            trtllm-h200) or a Prefect Variable alflow-preset-NAME. It brings the server, where it runs,
            the model, the reference table and this run's defaults. Given with params, it replaces their
            server and placement.
        model: Model id to serve and gate, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct (empty: the preset's).
        k: Number of speculative tokens K, 1 to 16 (empty: the preset's).
        thinking: Thinking mode of the requests, on or off; the reference AL of this mode is the bar
            (empty: the preset's).
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m1_params(preset, model, k, thinking, params)
    log = get_run_logger()
    reference = reference_al(
        params.reference_path,
        params.model,
        params.reference_model,
        params.method,
        params.thinking,
        params.k,
        reference_variant(params),
    )
    server = point_server(
        params.server, params.model.id, params.method, params.k, draft_model=params.draft_model
    )
    layout = gpu_layout(server)  # every node's GPUs (per-GPU figures in the client summary)
    subject = f"{server.framework} {params.model.id} {params.method.value} K={params.k} thinking={params.thinking.value}"
    writer = open_run(
        "m1",
        params.placement.results_root,
        params.model_dump(mode="json"),
        simulated=server.simulated,
        engine_note=server.engine_note,
    )
    verdicts: list[Verdict] = []
    tables: dict[str, pl.DataFrame] = {}
    client: ClientSummary | None = None
    gsm8k: dict[str, Any] | None = None
    partial: str | None = None
    crashed: Exception | None = None
    with writer, tags(f"model:{params.model.id}", f"framework:{server.framework}", f"k:{params.k}", "m1"):
        dataset = dataset_description(params.workload)
        writer.update_provenance(
            dataset=dataset, reference_path=params.reference_path, reference_al=reference
        )
        sessions = speed_bench_sessions(params.workload)
        try:
            with server_lifetime(server, params.placement) as handle:
                writer.update_provenance(server=handle.to_dict())
                if params.preflight:
                    check = preflight(handle, server, params.k, None, subject=subject)
                    writer.update_provenance(preflight=check.to_dict())
                    require_preflight(check)
                load = LoadConfig.model_validate(
                    {**params.load.model_dump(), "num_prompts": params.load.num_prompts or len(sessions)}
                )
                sampling = request_sampling(
                    params.model, params.thinking, max_tokens=params.workload.max_tokens
                )
                m = run_load(
                    handle,
                    sessions,
                    load,
                    sampling,
                    k=params.k,
                    progress_key="m1-progress",
                    gpus=layout,
                    keep_partial=True,
                )
                m = spec_stats(m, params.k, params.tolerances.confidence)
                client = m.client
                tables["requests"] = m.records
                tables["server_metrics"] = m.metrics_frame()
                if m.spec_stats is not None:
                    tables["spec_stats"] = pl.DataFrame(
                        [
                            {
                                **_flat(m.spec_stats.to_dict()),
                                "reference_al": reference,
                                "partial": m.aborted is not None,
                            }
                        ]
                    )
                if m.aborted is not None:
                    partial = (
                        f"the AL point aborted mid-way ({m.aborted}); its {m.records.height} requests "
                        "are kept and the point is marked partial"
                    )
                    verdicts.append(Verdict("al", False, f"{subject}: no AL verdict: {partial}"))
                else:
                    if m.spec_stats is None:
                        why = m.stats_error or "no baseline or final scrape"
                        where = " + ".join(redact_url(u) for u in handle.all_metrics_urls)
                        raise fail("m1-gate", f"no spec-decode stats at {where} for {subject}: {why}", {})
                    verdicts.append(check_al_gate(m.spec_stats, reference, params.tolerances, subject))
                    if params.gsm8k.enabled:
                        acc_verdict, result = check_accuracy_gate(
                            handle,
                            params.model,
                            params.thinking,
                            params.gsm8k,
                            synthetic=server.synthetic is not None,
                        )
                        verdicts.append(acc_verdict)
                        gsm8k = result.to_dict()
                        per_q: Any = result.to_dict(per_question=True)["results"]
                        tables["gsm8k"] = pl.DataFrame(per_q)
        except Exception as exc:  # what was measured before the failure is stored below, then it is raised
            crashed = exc
            if not tables:
                raise
        failures = [] if partial is None else [partial]
        if crashed is not None:
            failures.append(f"the run failed: {crashed}")
            if not isinstance(crashed, GateFailedError):  # the server or the client failed mid-way
                partial = partial or f"the run failed after the AL point was measured: {crashed}"
        passed = crashed is None and partial is None and all(v.passed for v in verdicts)
        summary = {
            "flow": "m1",
            "subject": subject,
            "passed": passed,
            "partial": partial is not None,
            "failures": failures,
            "verdicts": [v.to_dict() for v in verdicts],
            "client": None if client is None else client.to_dict(),
            "gsm8k": gsm8k,
        }
        store_results(writer, tables, summary)
        report = M1Summary(
            run_dir=writer.dir,
            engine_note=server.engine_note,
            subject=subject,
            passed=passed,
            verdicts=tuple(M1Verdict(v.gate, v.passed, v.message) for v in verdicts),
            dataset=str(dataset["dataset"]),
            category=str(dataset["category"]),
            sessions=len(sessions),
            partial=partial,
        )
        rows = [{"gate": v.gate, "passed": v.passed, "message": v.message} for v in verdicts]
        render_report(writer, report, rows, key=f"m1-{server.framework}-k{params.k}")
        if crashed is not None:
            raise crashed
        if not passed:
            message = "; ".join(v.message for v in verdicts if not v.passed)
            raise fail("m1-gate", message, {"subject": subject, "reference_al": reference})
    log.info("M1 passed for %s", subject)
    # the pass event: prefect.yaml's m2-after-m1 trigger starts M2 from it
    emit_passed("m1-gate", *pass_event(params, run_dir=writer.dir, reference_al=reference))
    return M1Outcome(run_dir=writer.dir, passed=True, verdicts=tuple(verdicts))


def _flat(stats: dict[str, Any]) -> dict[str, Any]:
    """SpecStats as one table row (lists and maps as JSON-ready columns)."""
    ci = stats.pop("ci", None) or {}
    hist = stats.pop("histogram", None) or {}
    out = {**stats, "ci_low": ci.get("low"), "ci_high": ci.get("high"), "ci_method": ci.get("method")}
    out["histogram"] = [int(hist[k]) for k in sorted(hist, key=int)] if hist else None
    return out
