"""``alflow demo``: M0 -> M1 (-> M2) on the simulated engine, the tiny CPU engine or a real vLLM on CPU."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from alflow.cli.common import console, fail, markup_safe, new_table, say
from alflow.cli.run import check_prefect_api, prefect_defaults, prepare_local_run, print_flow_failure
from alflow.errors import AlflowError
from alflow.metrics.point_metrics import INTERACTIVITY, OUTPUT_PER_GPU, OUTPUT_THROUGHPUT, TPOT
from alflow.util.fsutil import check_writable_dir

if TYPE_CHECKING:
    from alflow.methods.outcomes import DemoBenchmark, DemoGate, DemoOutcome, M0Outcome


def register(app: typer.Typer) -> None:
    """Add ``alflow demo`` to ``app``."""
    app.command("demo")(demo)


class DemoEngine(StrEnum):
    """Engines the demo runs on."""

    sim = "sim"
    tiny = "tiny"
    vllm = "vllm"


_BANNERS = {
    DemoEngine.vllm: (
        "[bold]alflow demo --engine vllm[/bold]: M0 -> M1 on a REAL vLLM (CPU build) serving SmolLM2-135M "
        "with n-gram drafting, then M2 with synthetic acceptance through alflow's CPU port of vLLM's kernel "
        "rule (about 5 GiB of memory, 10-20 minutes on 2 cores)."
    ),
    DemoEngine.tiny: (
        "[bold]alflow demo --engine tiny[/bold]: M0 -> M1 on the tiny CPU engine (Gemma 3 270M, real n-gram "
        "drafting; a few minutes on 2 cores); the first run starts Prefect's temporary local server."
    ),
    DemoEngine.sim: (
        "[bold]alflow demo[/bold]: M0 -> M1 -> M2 on the built-in SIMULATED engine (no GPU; about a minute, "
        "Prefect's temporary local server starting first)."
    ),
}
"""What the demo says it does, printed before Prefect starts."""


def demo(
    results_root: Annotated[Path, typer.Option("--results-root", help="Where the demo writes.")] = Path(
        "results/demo"
    ),
    engine: Annotated[
        DemoEngine,
        typer.Option(
            "--engine",
            help="sim: M0 -> M1 -> M2 on the simulated engine; tiny: M0 -> M1 on the real tiny CPU engine "
            "(needs the alflow\\[tiny] extra); vllm: M0 -> M1 -> M2 on a real vLLM (CPU build, SmolLM2-135M; M2 "
            "through alflow's CPU port of vLLM's synthetic rule; needs scripts/setup.sh --vllm).",
        ),
    ] = DemoEngine.sim,
    refresh_cache: Annotated[
        bool,
        typer.Option(
            "--refresh-cache",
            help="sim: measure the M0 points again even when cached (tiny always measures).",
        ),
    ] = False,
) -> None:
    """M0 -> M1 (one pass, one deliberate fail) -> M2 on the simulated engine, or M0 -> M1 on the tiny engine."""
    prefect_defaults()
    try:
        check_writable_dir(results_root, what="--results-root")  # before Prefect starts: one line, exit 2
        check_prefect_api()
    except AlflowError as exc:
        raise fail(str(exc)) from None
    console.print(_BANNERS[engine], highlight=False)  # before Prefect's temporary server takes its 5-15 s
    started = time.perf_counter()
    prepare_local_run()
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from alflow.config import DemoParams
    from alflow_flows.entry import flow_function

    params = DemoParams(results_root=str(results_root), engine=engine.value, refresh_cache=refresh_cache)
    # on the temporary server (gone when the demo ends) no one watches heartbeats; a sync flow run joins its
    # heartbeat thread at its end, up to a second for each of the demo's five flow runs
    heartbeats = {} if PREFECT_API_URL.value() else {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    with temporary_settings(updates=heartbeats):
        state: Any = flow_function("demo")(params, return_state=True)
    if not state.is_completed():
        print_flow_failure("the demo", str(state.message))
        raise typer.Exit(1)
    out: DemoOutcome = state.result()
    took = time.perf_counter() - started
    if engine is DemoEngine.vllm:
        _print_vllm_demo(console, out, took)
        if not all(g.passed for g in out.m1) or any(b.failed is not None for b in out.m2):
            raise typer.Exit(1)
        return
    if engine is DemoEngine.tiny:
        _print_tiny_demo(console, out, took)
        if not all(g.passed for g in out.m1):
            raise typer.Exit(1)
        return
    _print_demo(console, out, took)


def _m0_table(what: str, m0: M0Outcome) -> Table:
    """The M0 reference table of a real-acceptance demo (model, K, AL, steps), user strings escaped."""
    table = new_table(
        f"M0 reference AL ({what}) -> {markup_safe(m0.reference_path)}", ("model", "K", "AL", "steps")
    )
    for e in m0.entries:
        table.add_row(Text(e.model), str(e.k), f"{e.al:.4f}", str(e.num_drafts))
    return table


def _print_gate(console: Console, title: str, gate: DemoGate) -> None:
    """One M1 run of a real-acceptance demo: its status and message, then each gate's verdict."""
    status = "[green]passed[/green]" if gate.passed else "[red]FAILED[/red]"
    console.print(f"M1 {markup_safe(title)}: {status} {markup_safe(gate.message)}", highlight=False)
    for v in gate.outcome.verdicts if gate.outcome is not None else ():
        say(f"  - {'pass' if v.passed else 'FAIL'}: {v.message}")


def _print_tiny_demo(console: Console, out: DemoOutcome, took: float) -> None:
    console.print(_m0_table("tiny CPU engine, real n-gram acceptance", out.m0))
    if out.m0.cached_points:
        say(f"M0 calibration points reused from the cache: {', '.join(out.m0.cached_points)}")
    for g in out.m1:
        _print_gate(console, g.name, g)
    say(
        f"Results: {out.results_root} (report.html and report.md inside each run directory; numbers are "
        "real measurements of the tiny CPU engine, not of a GPU server)"
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)


def _print_vllm_demo(console: Console, out: DemoOutcome, took: float) -> None:
    console.print(
        f"Model: {markup_safe(str(out.model_path))} ({markup_safe(str(out.model_source))})", highlight=False
    )
    console.print(_m0_table("real vLLM, CPU build, n-gram", out.m0))
    if out.m0.cached_points:
        console.print(
            f"M0 points reused from the cache: {markup_safe(', '.join(out.m0.cached_points))}",
            highlight=False,
        )
    for g in out.m1:
        _print_gate(console, "vLLM CPU", g)
    for run in out.m2:
        _print_vllm_m2(console, run)
    say(f"{out.label}")
    say(
        f"Results: {out.results_root} (report.html and report.md inside each run directory; server logs in "
        "server-logs/)"
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)


def _print_vllm_m2(console: Console, run: DemoBenchmark) -> None:
    """One M2 run of the real-vLLM demo: per point the achieved vs target AL, the audit, the shape test."""
    target = "reference" if run.target is None else run.target
    if run.outcome is None:
        console.print(
            f"M2 (target {target}): [red]FAILED[/red] {markup_safe(str(run.failed))}", highlight=False
        )
        return
    m2 = run.outcome
    title = (
        f"M2 on real vLLM (CPU), synthetic target AL {m2.target_al:.4f} "
        f"({'the M0 reference' if run.target is None else 'explicit'}; scheme {markup_safe(m2.scheme)})"
    )
    columns = ("concurrency", "output tok/s", "TPOT ms", "AL achieved", "allowed +/-", "shape p", "audit")
    table = new_table(title, columns, justify="right")
    for p in m2.points:
        table.add_row(
            str(p.concurrency),
            f"{p.value(OUTPUT_THROUGHPUT) or 0:.1f}",
            f"{p.value(TPOT) or 0:.1f}",
            "-" if p.achieved_al is None else f"{p.achieved_al:.4f}",
            "-" if p.allowed_deviation is None else f"{p.allowed_deviation:.4f}",
            "-" if p.fit_p_value is None else f"{p.fit_p_value:.3g}",
            "valid" if p.valid else "INVALID",
        )
    console.print(table)
    say(f"  run: {m2.run_dir}")


def _print_demo(console: Console, out: DemoOutcome, took: float) -> None:
    m0 = out.m0
    t0 = new_table(
        f"M0 reference AL (simulated) -> {markup_safe(m0.reference_path)}",
        ("model", "thinking", "K", "AL", "steps"),
    )
    for e in m0.entries:
        t0.add_row(Text(e.model), Text(e.thinking.value), str(e.k), f"{e.al:.4f}", str(e.num_drafts))
    console.print(t0)
    say(
        f"M0 calibration points reused from the cache: {', '.join(m0.cached_points)}"
        if m0.cached_points
        else "M0 calibration points measured now (a second run reuses them from the cache)"
    )
    for g in out.m1:
        status = "[green]passed[/green]" if g.passed else "[red]FAILED[/red]"
        console.print(f"M1 {markup_safe(g.name)}: {status} {markup_safe(g.message)}", highlight=False)
    [run] = out.m2
    assert run.outcome is not None  # the simulated M2 ends its flow on failure: the demo fails before this
    m2 = run.outcome
    title = (
        f"M2 synthetic benchmark at target AL {m2.target_al:.4f} (scheme {markup_safe(m2.scheme)}, simulated)"
    )
    columns = (
        "concurrency",
        "output tok/s/GPU",
        "interactivity tok/s/user",
        "TPOT ms",
        "AL achieved",
        "audit",
    )
    t2 = new_table(title, columns, justify="right")
    for p in m2.points:
        t2.add_row(
            str(p.concurrency),
            f"{p.value(OUTPUT_PER_GPU) or 0:.1f}",
            f"{p.value(INTERACTIVITY) or 0:.1f}",
            f"{p.value(TPOT) or 0:.2f}",
            "-" if p.achieved_al is None else f"{p.achieved_al:.4f}",
            "valid" if p.valid else "INVALID",
        )
    console.print(t2)
    say(
        f"Results: {out.results_root} (M2 run: {m2.run_dir}, report.html and report.md inside each run directory; `alflow report RUN_DIR` renders one again)"
    )
    say(f"Browse them: alflow results serve {out.results_root}")
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)
