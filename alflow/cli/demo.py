"""``alflow demo``: M0 -> M1 (-> M2) on the simulated engine, the tiny CPU engine or a real vLLM on CPU."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from alflow.cli.common import console, fail
from alflow.cli.run import check_prefect_api, prefect_defaults, prepare_local_run, print_flow_failure
from alflow.errors import AlflowError
from alflow.fsutil import check_writable_dir


def register(app: typer.Typer) -> None:
    """Add ``alflow demo`` to ``app``."""
    app.command("demo")(demo)


class DemoEngine(StrEnum):
    """Engines the demo runs on."""

    sim = "sim"
    tiny = "tiny"
    vllm = "vllm"


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
    prepare_local_run()
    if engine is DemoEngine.vllm:
        console.print(
            "[bold]alflow demo --engine vllm[/bold]: M0 -> M1 on a REAL vLLM (CPU build) serving SmolLM2-135M "
            "with n-gram drafting, then M2 with synthetic acceptance through alflow's CPU port of vLLM's kernel "
            "rule (about 5 GiB of memory, 10-20 minutes on 2 cores).",
            highlight=False,
        )
    elif engine is DemoEngine.tiny:
        console.print(
            "[bold]alflow demo --engine tiny[/bold]: M0 -> M1 on the tiny CPU engine (Gemma 3 270M, real n-gram "
            "drafting; a few minutes on 2 cores); the first run starts Prefect's temporary local server.",
            highlight=False,
        )
    else:
        console.print(
            "[bold]alflow demo[/bold]: M0 -> M1 -> M2 on the built-in SIMULATED engine (no GPU); "
            "the first run starts Prefect's temporary local server.",
            highlight=False,
        )
    started = time.perf_counter()
    from alflow.config import DemoParams
    from flows.demo import demo as demo_flow

    params = DemoParams(results_root=str(results_root), engine=engine.value, refresh_cache=refresh_cache)
    state: Any = demo_flow(params, return_state=True)
    if not state.is_completed():
        print_flow_failure("the demo", str(state.message))
        raise typer.Exit(1)
    out = state.result()
    took = time.perf_counter() - started
    if engine is DemoEngine.vllm:
        _print_vllm_demo(console, out, took)
        if not out["m1"]["vllm-cpu"]["passed"] or any("failed" in run for run in out["m2"]):
            raise typer.Exit(1)
        return
    if engine is DemoEngine.tiny:
        _print_tiny_demo(console, out, took)
        if not out["m1"]["tiny"]["passed"]:
            raise typer.Exit(1)
        return
    _print_demo(console, out, took)


def _m0_table(what: str, m0: dict[str, Any]) -> Table:
    """The M0 reference table of a real-acceptance demo (model, K, AL, steps), user strings escaped."""
    table = Table(title=f"M0 reference AL ({what}) -> {escape(str(m0['reference_path']))}")
    for col in ("model", "K", "AL", "steps"):
        table.add_column(col)
    for e in m0["entries"]:
        table.add_row(Text(str(e["model"])), str(e["k"]), f"{e['al']:.4f}", str(e["num_drafts"]))
    return table


def _print_tiny_demo(console: Console, out: dict[str, Any], took: float) -> None:
    m0 = out["m0"]
    console.print(_m0_table("tiny CPU engine, real n-gram acceptance", m0))
    cached = m0.get("cached_points") or []
    if cached:
        console.print(
            f"M0 calibration points reused from the cache: {', '.join(cached)}", highlight=False, markup=False
        )
    verdict = out["m1"]["tiny"]
    status = "[green]passed[/green]" if verdict["passed"] else "[red]FAILED[/red]"
    console.print(f"M1 tiny: {status} {escape(verdict['message'])}", highlight=False)
    for v in verdict.get("verdicts") or []:
        console.print(
            f"  - {'pass' if v['passed'] else 'FAIL'}: {v['message']}", highlight=False, markup=False
        )
    console.print(
        f"Results: {out['results_root']} (report.html and report.md inside each run directory; numbers are "
        "real measurements of the tiny CPU engine, not of a GPU server)",
        markup=False,
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)


def _print_vllm_demo(console: Console, out: dict[str, Any], took: float) -> None:
    model = out["model"]
    console.print(f"Model: {escape(str(model['path']))} ({escape(str(model['source']))})", highlight=False)
    m0 = out["m0"]
    console.print(_m0_table("real vLLM, CPU build, n-gram", m0))
    cached = m0.get("cached_points") or []
    if cached:
        console.print(f"M0 points reused from the cache: {escape(', '.join(cached))}", highlight=False)
    verdict = out["m1"]["vllm-cpu"]
    status = "[green]passed[/green]" if verdict["passed"] else "[red]FAILED[/red]"
    console.print(f"M1 vLLM CPU: {status} {escape(verdict['message'])}", highlight=False)
    for v in verdict.get("verdicts") or []:
        console.print(
            f"  - {'pass' if v['passed'] else 'FAIL'}: {v['message']}", highlight=False, markup=False
        )
    for run in out["m2"]:
        _print_vllm_m2(console, run)
    console.print(f"{out['label']}", highlight=False, markup=False)
    console.print(
        f"Results: {out['results_root']} (report.html and report.md inside each run directory; server logs in "
        "server-logs/)",
        highlight=False,
        markup=False,
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)


def _print_vllm_m2(console: Console, run: dict[str, Any]) -> None:
    """One M2 run of the real-vLLM demo: per point the achieved vs target AL, the audit, the shape test."""
    if "failed" in run:
        console.print(
            f"M2 (target {run['target']}): [red]FAILED[/red] {escape(run['failed'])}", highlight=False
        )
        return
    m2 = run["outcome"]
    table = Table(
        title=(
            f"M2 on real vLLM (CPU), synthetic target AL {m2['target_al']:.4f} "
            f"({'the M0 reference' if run['target'] == 'reference' else 'explicit'}; scheme {escape(m2['scheme'])})"
        )
    )
    for col in ("concurrency", "output tok/s", "TPOT ms", "AL achieved", "allowed +/-", "shape p", "audit"):
        table.add_column(col, justify="right")
    for p in m2["points"]:
        fit = p.get("fit_p_value")
        table.add_row(
            str(p["concurrency"]),
            f"{p['output_throughput'] or 0:.1f}",
            f"{p['median_tpot_ms'] or 0:.1f}",
            "-" if p["achieved_al"] is None else f"{p['achieved_al']:.4f}",
            "-" if p["allowed_deviation"] is None else f"{p['allowed_deviation']:.4f}",
            "-" if fit is None else f"{fit:.3g}",
            "valid" if p["valid"] else "INVALID",
        )
    console.print(table)
    console.print(f"  run: {m2['run_dir']}", highlight=False, markup=False)


def _print_demo(console: Console, out: dict[str, Any], took: float) -> None:
    m0 = out["m0"]
    t0 = Table(title=f"M0 reference AL (simulated) -> {escape(str(m0['reference_path']))}")
    for col in ("model", "thinking", "K", "AL", "steps"):
        t0.add_column(col)
    for e in m0["entries"]:
        t0.add_row(
            Text(str(e["model"])),
            Text(str(e["thinking"])),
            str(e["k"]),
            f"{e['al']:.4f}",
            str(e["num_drafts"]),
        )
    console.print(t0)
    cached = m0.get("cached_points") or []
    console.print(
        f"M0 calibration points reused from the cache: {', '.join(cached)}"
        if cached
        else "M0 calibration points measured now (a second run reuses them from the cache)",
        highlight=False,
        markup=False,
    )
    for name, verdict in out["m1"].items():
        status = "[green]passed[/green]" if verdict["passed"] else "[red]FAILED[/red]"
        console.print(f"M1 {escape(name)}: {status} {escape(verdict['message'])}", highlight=False)
    m2 = out["m2"]
    t2 = Table(
        title=f"M2 synthetic benchmark at target AL {m2['target_al']:.4f} (scheme {escape(m2['scheme'])}, simulated)"
    )
    for col in (
        "concurrency",
        "output tok/s/GPU",
        "interactivity tok/s/user",
        "TPOT ms",
        "AL achieved",
        "audit",
    ):
        t2.add_column(col, justify="right")
    for p in m2["points"]:
        t2.add_row(
            str(p["concurrency"]),
            f"{p['output_throughput_per_gpu']:.1f}",
            f"{p['median_interactivity_tokens_per_s'] or 0:.1f}",
            f"{p['median_tpot_ms'] or 0:.2f}",
            f"{p['achieved_al']:.4f}",
            "valid" if p["valid"] else "INVALID",
        )
    console.print(t2)
    console.print(
        f"Results: {out['results_root']} (M2 run: {m2['run_dir']}, report.html and report.md inside each run directory; `alflow report RUN_DIR` renders one again)",
        markup=False,
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)
