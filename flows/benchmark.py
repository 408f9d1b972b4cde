"""M2: synthetic benchmark. Synthetic acceptance at the reference AL, random prompts, a concurrency sweep.

Per point: prompts = ``prompts_per_concurrency`` x concurrency, warm-up =
``warmup_per_concurrency`` x concurrency (excluded from the window), client metrics and spec stats,
and the audit: the achieved AL must match the target within the scheme's expected spread, else the
point is invalid and the run fails (unless ``fail_on_invalid`` is off).
"""

from __future__ import annotations

import polars as pl
from prefect import flow, get_run_logger, tags

from alflow.acceptance.synthetic import distribution
from alflow.config import BenchmarkParams, LoadConfig, SyntheticAcceptance, ThinkingMode
from alflow.measure import PARTIAL_ATTR, Measurement
from alflow.outcomes import M2Outcome
from alflow.points import M2Point, m2_point
from alflow.redact import redact_url
from alflow.reports.markdown import M2Summary
from alflow.topology import gpu_layout, topology
from alflow.workloads import check_m2_prompt_memory, random_workload_sessions
from flows.common import engine_note_of, fail, open_run, point_server, reference_al, reference_variant
from flows.presets import m2_params, run_name
from tasks.gates import audit_synthetic
from tasks.measure import request_sampling, run_load, spec_stats
from tasks.preflight import preflight
from tasks.results import render_report, store_results
from tasks.servers import server_lifetime, wait_ready


@flow(
    name="m2-benchmark",
    flow_run_name=run_name("m2", m2_params, lambda p: f"{p.model.id}-k{p.k}"),
)
def benchmark(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    target_al: float | None = None,
    concurrencies: list[int] | None = None,
    params: BenchmarkParams | None = None,
) -> M2Outcome:
    """M2: synthetic acceptance at the target AL over a concurrency sweep, audited per point.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, sglang-h200,
            trtllm-h200) or a Prefect Variable alflow-preset-NAME. It brings the server, where it runs,
            the model and this run's defaults. Given with params, it replaces their server and placement.
        model: Model id to serve and measure, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct (empty: the preset's).
        k: Number of speculative tokens K, 1 to 16 (empty: the preset's).
        target_al: Target acceptance length that synthetic acceptance forces, 1 to K + 1 (empty: the
            reference AL of this model, method, thinking mode and K in the preset's reference table).
        concurrencies: Concurrency sweep, e.g. [4, 16] (empty: the preset's).
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m2_params(preset, model, k, target_al, concurrencies, params)
    check_m2_prompt_memory(params)  # on the machine that draws them, before the server starts
    log = get_run_logger()
    target = (
        params.target_al
        if params.target_al is not None
        else reference_al(
            str(params.reference_path),
            params.model,
            params.reference_model,
            params.reference_method or params.method,
            params.thinking,
            params.k,
            reference_variant(params),
        )
    )
    synthetic = SyntheticAcceptance(target_al=target, scheme=params.scheme)
    server = point_server(
        params.server,
        params.model.id,
        params.method,
        params.k,
        draft_model=params.draft_model,
        synthetic=synthetic,
    )
    layout = gpu_layout(server)  # every node's GPUs: per-GPU throughput divides by all of them
    writer = open_run(
        "m2",
        params.placement.results_root,
        params.model_dump(mode="json"),
        simulated=server.simulated,
        engine_note=server.engine_note,
    )
    points: list[M2Point] = []
    requests: list[pl.DataFrame] = []
    metrics: list[pl.DataFrame] = []
    failures: list[str] = []
    scheme: str | None = None
    engine_note = server.engine_note
    crashed: BaseException | None = None
    with writer, tags(f"model:{params.model.id}", f"framework:{server.framework}", f"k:{params.k}", "m2"):
        try:
            with server_lifetime(server, params.placement) as handle:
                knobs = handle.provenance.get("synthetic")
                scheme_value = knobs.get("scheme") if isinstance(knobs, dict) else None
                if not scheme_value:
                    raise fail(
                        "m2-benchmark", f"the launch of {server.framework} records no synthetic knobs", {}
                    )
                scheme = str(scheme_value)
                dist = distribution(scheme, params.k, al=target)
                engine_note = engine_note_of(server, handle.provenance)
                writer.update_provenance(
                    server=handle.to_dict(),
                    target_al=target,
                    scheme=scheme,
                    topology=topology(server),
                    engine_note=engine_note,
                )
                log.info(
                    "synthetic target AL %.4f with scheme %s (%s draw)", target, scheme, dist.granularity
                )
                if params.preflight:
                    check = preflight(
                        handle,
                        server,
                        params.k,
                        dist,
                        subject=f"{server.framework} K={params.k} target {target:.4f}",
                        timeout_s=min(60.0, params.request_timeout_s, params.stall_timeout_s or 60.0),
                    )
                    writer.update_provenance(preflight=check.to_dict())
                    if not check.passed:
                        raise fail("m2-benchmark", check.message, {"target_al": target, "k": params.k})
                # each concurrency `repeats` times: every repeat its own warm-up, window, prompts and point
                for i, conc, rep in (
                    (i, c, r) for i, c in enumerate(params.concurrencies) for r in range(params.repeats)
                ):
                    n = params.prompts_per_concurrency * conc
                    warm = params.warmup_per_concurrency * conc
                    sessions = random_workload_sessions(params.workload, n, seed_offset=1000 * i + rep)
                    warm_sessions = random_workload_sessions(
                        params.workload, max(1, warm), seed_offset=1000 * i + 500 + rep
                    )
                    load = LoadConfig(
                        concurrency=conc,
                        num_prompts=n,
                        warmup=warm,
                        timeout_s=params.request_timeout_s,
                        stall_timeout_s=params.stall_timeout_s,
                        client_processes=min(params.client_processes, conc),
                        auto_client_processes=params.auto_client_processes,
                    )
                    wait_ready(
                        handle, params.placement.runner
                    )  # the server is still healthy before each point
                    sampling = request_sampling(
                        params.model, ThinkingMode.OFF, fixed_length=params.workload.osl
                    )
                    try:
                        m = run_load(
                            handle,
                            sessions,
                            load,
                            sampling,
                            k=params.k,
                            endpoint=params.workload.endpoint,
                            warmup_sessions=warm_sessions if warm else None,
                            progress_key=f"m2-progress-c{conc}" + (f"-r{rep}" if params.repeats > 1 else ""),
                            gpus=layout,
                            keep_partial=True,
                        )
                    except BaseException as stop:
                        # SIGTERM / Ctrl-C mid-point: keep the answered requests as a partial point, store
                        # them below, then stop as asked (re-raised at the end)
                        partial = getattr(stop, PARTIAL_ATTR, None)
                        if isinstance(stop, Exception) or not isinstance(partial, Measurement):
                            raise
                        crashed, m = stop, partial
                    else:
                        m = spec_stats(m, params.k)
                    subject = f"{server.framework} K={params.k} concurrency {conc}" + (
                        f" repeat {rep + 1}/{params.repeats}" if params.repeats > 1 else ""
                    )
                    verdict = (
                        audit_synthetic(m.spec_stats, dist, params.audit_abs_tol, subject)
                        if m.aborted is None and m.spec_stats is not None
                        else None
                    )
                    point, point_failures = m2_point(
                        m,
                        concurrency=conc,
                        k=params.k,
                        framework=server.framework,
                        target_al=target,
                        nodes=server.nodes,
                        audit=verdict,
                        metrics_where=" + ".join(redact_url(u) for u in handle.all_metrics_urls),
                        repeat=rep,
                        repeats=params.repeats,
                    )
                    failures += point_failures
                    points.append(point)
                    requests.append(
                        m.records.with_columns(pl.lit(conc).alias("concurrency"), pl.lit(rep).alias("repeat"))
                    )
                    metrics.append(
                        m.metrics_frame().with_columns(
                            pl.lit(conc).alias("concurrency"), pl.lit(rep).alias("repeat")
                        )
                    )
                    if m.aborted is not None:
                        break  # the server died or stalled: later points would measure nothing
        except Exception as exc:  # what was measured before the failure is stored below, then it is raised
            crashed = exc
            failures.append(f"{server.framework} K={params.k}: the run failed: {exc}")
            if not points:
                raise
        rows = [p.to_dict() for p in points]
        spec_frame = pl.DataFrame(rows)
        tables = {
            "requests": pl.concat(requests, how="diagonal_relaxed"),
            "server_metrics": pl.concat(metrics, how="diagonal_relaxed"),
            "spec_stats": spec_frame,
        }
        summary = {
            "flow": "m2",
            "target_al": target,
            "scheme": scheme,
            "nodes": server.nodes,
            "num_gpus": layout.gpus,
            "repeats": params.repeats,
            "points": rows,
            "failures": failures,
            "partial": crashed is not None or any(p.partial for p in points),
        }
        store_results(writer, tables, summary)
        report = M2Summary(
            run_dir=writer.dir,
            engine_note=engine_note,
            model=params.model.id,
            framework=server.framework,
            k=params.k,
            target_al=target,
            scheme=scheme,
            granularity=dist.granularity,
            gpus=layout.gpus,
            nodes=server.nodes,
            points=rows,
            failures=tuple(failures),
        )
        render_report(writer, report, rows, key=f"m2-{params.model.id}-k{params.k}")
        if crashed is not None:
            raise crashed
        if failures and params.fail_on_invalid:
            raise fail("m2-benchmark", "; ".join(failures), {"target_al": target, "k": params.k})
    assert scheme is not None  # set before the first point; no point means the flow raised above
    return M2Outcome(
        run_dir=writer.dir,
        target_al=target,
        scheme=scheme,
        nodes=server.nodes,
        num_gpus=layout.gpus,
        points=tuple(points),
        failures=tuple(failures),
    )
