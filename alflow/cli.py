"""The ``alflow`` command line.

Every command that produces numbers has ``--json`` (machine-readable output on stdout). Errors in
the user's input are printed as one line on stderr (``error: ...``) with exit code 2.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from alflow import __version__, jsonutil, measure_cli
from alflow.acceptance import knobs as knobs_mod
from alflow.acceptance import reference as ref
from alflow.acceptance import synthetic as syn
from alflow.errors import AlflowError, InvalidInputError
from alflow.evals import cli as eval_cli
from alflow.models import cli as models_cli
from alflow.procguard import Guard
from alflow.redact import redact_data, redact_urls_in_text
from alflow.reports import cli as report_cli
from alflow.sim import cli as sim_cli
from alflow.tiny import cli as tiny_cli
from alflow.yamlfile import load_yaml_model
from infra import cli as infra_cli

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="alflow",
    help="Calibrate, gate and benchmark speculative decoding in LLM serving frameworks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
synthetic_app = typer.Typer(
    help="Synthetic acceptance: framework knobs and scheme comparison.", no_args_is_help=True
)
reference_app = typer.Typer(help="Reference AL tables: validate, show, diff.", no_args_is_help=True)
app.add_typer(synthetic_app, name="synthetic")
app.add_typer(reference_app, name="reference")
eval_cli.register(app)
models_cli.register(app)
sim_cli.register(app)
tiny_cli.register(app)
measure_cli.register(app)


def _run_is_live(run_id: str) -> bool:
    """Whether a Prefect flow run is still going (asked lazily: only cleanup of Slurm jobs needs it)."""
    prefect_defaults()
    from tasks.servers import flow_run_is_live

    return flow_run_is_live(run_id)


infra_cli.register(app, is_live=_run_is_live)
report_cli.register(app)

console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn alflow's input errors into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except AlflowError as exc:
            err_console.print(f"error: {redact_urls_in_text(str(exc))}", markup=False, highlight=False)
            raise typer.Exit(code=2) from None

    return wrapper


def emit_json(data: object) -> None:
    """Write ``data`` as indented strict JSON on stdout (non-finite numbers: see alflow.jsonutil)."""
    sys.stdout.write(jsonutil.dumps(data) + "\n")


def parse_rates(text: str | None) -> tuple[float, ...] | None:
    """Parse ``--rates 1,0.49,0`` into floats, naming a value that is not a number."""
    if text is None:
        return None
    out = []
    for i, part in enumerate(text.split(","), start=1):
        try:
            out.append(float(part.strip()))
        except ValueError:
            raise InvalidInputError(f"--rates value {i} {part.strip()!r} is not a number") from None
    return tuple(out)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        sys.stdout.write(f"alflow {__version__}\n")
        raise typer.Exit


# --------------------------------------------------------------------------------------------
# alflow synthetic


KOpt = Annotated[int, typer.Option("--k", help="Number of speculative tokens K (1..16).")]
AlOpt = Annotated[float | None, typer.Option("--al", help="Target acceptance length L (1..K+1).")]
RatesOpt = Annotated[
    str | None, typer.Option("--rates", help="Explicit unconditional per-position rates, comma-separated.")
]


def check_target_options(k: int, al: float | None, rates: tuple[float, ...] | None) -> None:
    """``--k``, ``--al`` and ``--rates`` each valid on its own; the error names the option."""
    checks: list[tuple[str, object, Callable[[], object]]] = [("--k", k, lambda: syn.validate_k(k))]
    if al is not None:
        checks.append(("--al", al, lambda: syn.validate_al(al, k)))
    if rates is not None:
        checks.append(("--rates", ",".join(f"{r:g}" for r in rates), lambda: syn.validate_rates(rates, k)))
    for option, value, check in checks:
        try:
            check()
        except InvalidInputError as exc:
            raise InvalidInputError(f"{option} {value}: {exc}") from None


@synthetic_app.command("knobs")
@handle_errors
def synthetic_knobs(
    framework: Annotated[str, typer.Option("--framework", help="vllm, sglang or trtllm.")],
    k: KOpt,
    al: AlOpt = None,
    rates: RatesOpt = None,
    scheme: Annotated[
        str | None, typer.Option("--scheme", help="Override the framework's scheme (sglang-multinomial).")
    ] = None,
    method: Annotated[
        str | None,
        typer.Option("--method", help="Speculative method (decides TensorRT-LLM's two-model path)."),
    ] = None,
    two_model: Annotated[
        bool | None, typer.Option("--two-model/--one-model", help="TensorRT-LLM: force the path.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the framework's synthetic-acceptance setting for K and a target AL (or rates)."""
    check_target_options(k, al, parse_rates(rates))
    result = knobs_mod.render_knobs(
        framework, k, al=al, rates=parse_rates(rates), scheme=scheme, method=method, two_model=two_model
    )
    if as_json:
        emit_json(result.to_dict())
        return
    table = Table(title=f"{escape(framework)} synthetic acceptance, K={k}", show_header=False)
    for name, value in result.env.items():
        table.add_row("env", Text(f"{name}={value}"))
    if result.speculative_config:
        table.add_row("--speculative-config", Text(json.dumps(result.speculative_config)))
    if result.distribution is not None:
        d = result.distribution
        table.add_row("scheme", Text(f"{result.scheme} ({d.granularity})"))
        table.add_row("expected AL", f"{d.mean:.6g} (bias {d.bias:+.4g}, variance {d.variance:.4g})")
        table.add_row("per-position rates", ", ".join(f"{p:.6g}" for p in d.per_position_rates))
    console.print(table)
    for warning in result.warnings:
        err_console.print(f"warning: {warning}", markup=False, highlight=False)


@synthetic_app.command("compare")
@handle_errors
def synthetic_compare(k: KOpt, al: AlOpt = None, rates: RatesOpt = None, as_json: JsonOpt = False) -> None:
    """Compare every scheme's accept-length distribution for K and a target AL (or rates)."""
    check_target_options(k, al, parse_rates(rates))
    comparison = syn.compare_schemes(k, al=al, rates=parse_rates(rates))
    if as_json:
        emit_json(comparison.to_dict())
        return
    table = Table(title=f"Synthetic acceptance schemes for {escape(comparison.target.describe())}, K={k}")
    for col in ("scheme", "draw", "mean AL", "bias", "variance"):
        table.add_column(col, justify="left" if col in ("scheme", "draw") else "right")
    for j in range(1, k + 2):
        table.add_column(f"P(len={j})", justify="right")
    for d in comparison.rows:
        biased = abs(d.bias) > 1e-9
        bias = f"{d.bias if biased else 0.0:+.4f}"
        style = "bold red" if biased else None
        table.add_row(
            Text(d.scheme),
            Text(d.granularity),
            f"{d.mean:.4f}",
            bias,
            f"{d.variance:.4f}",
            *(f"{p:.4f}" for p in d.pmf),
            style=style,
        )
    console.print(table)
    console.print(
        "per-batch: one draw per verify step shared by the whole batch (same mean, but batch-level "
        "variance does not average out); red: the scheme's mean differs from the target",
        highlight=False,
    )
    for name, why in comparison.skipped.items():
        console.print(f"skipped {name}: {why}", markup=False, highlight=False)


# --------------------------------------------------------------------------------------------
# alflow reference


PathArg = Annotated[Path, typer.Argument(help="Path of a reference table (YAML).")]


@reference_app.command("validate")
@handle_errors
def reference_validate(path: PathArg, as_json: JsonOpt = False) -> None:
    """Validate a reference table; exit 2 with the file, entry and field of the first problems."""
    table = ref.load_reference(path)
    summary = {"path": str(path), "valid": True, "kind": table.kind, "entries": len(table.entries)}
    if as_json:
        emit_json(summary)
    else:
        console.print(
            f"{path}: valid {table.kind} table, {len(table.entries)} entries", highlight=False, markup=False
        )


@reference_app.command("show")
@handle_errors
def reference_show(
    path: PathArg,
    model: Annotated[str | None, typer.Option("--model", help="Only this model.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a reference table: AL by K for each model, method and thinking mode."""
    table = ref.load_reference(path)
    entries = [e for e in table.entries if model is None or e.model == model]
    if model is not None and not entries:
        raise InvalidInputError(f"model {model!r} is not in {path}")
    if as_json:
        emit_json(
            {
                "kind": table.kind,
                "dataset": table.dataset,
                "category": table.category,
                "entries": [e.model_dump(mode="json", exclude_none=True) for e in entries],
            }
        )
        return
    ks = sorted({e.k for e in entries})
    out = Table(title=escape(f"Reference AL: {table.dataset}/{table.category} ({table.kind})"))
    for col in ("model", "method", "thinking"):
        out.add_column(col)
    for k in ks:
        out.add_column(f"K={k}", justify="right")
    groups: dict[tuple[str, str, str], dict[int, float]] = {}
    for e in entries:
        groups.setdefault((e.model, e.method.value, e.thinking.value), {})[e.k] = e.al
    for (m, meth, th), by_k in groups.items():
        out.add_row(Text(m), Text(meth), Text(th), *(f"{by_k[k]:.3f}" if k in by_k else "" for k in ks))
    console.print(out)
    if table.kind != "measured":
        console.print(
            f"note: this is a {table.kind} table, not a measured reference", highlight=False, markup=False
        )


@reference_app.command("diff")
@handle_errors
def reference_diff(
    old: Annotated[Path, typer.Argument(help="The previous table.")],
    new: Annotated[Path, typer.Argument(help="The new table.")],
    tolerance: Annotated[float, typer.Option(help="AL changes within this are reported as unchanged.")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Show what changed between two reference tables, and by how much."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidInputError(f"--tolerance {tolerance:g}: must be a finite number >= 0")
    diff = ref.diff_tables(ref.load_reference(old), ref.load_reference(new), tolerance=tolerance)
    if as_json:
        emit_json(diff.to_dict())
        return
    for line in diff.table_changes:
        console.print(f"table {line}", highlight=False, markup=False)
    out = Table(title=escape(f"{old} -> {new}"))
    for col in (
        "model",
        "method",
        "thinking",
        "K",
        "status",
        "old AL",
        "new AL",
        "delta",
        "rel",
        "provenance",
    ):
        out.add_column(col)
    for r in diff.rows:
        if r.status == "unchanged" and not r.provenance_changes:
            continue
        out.add_row(
            Text(r.model),
            Text(r.method),
            Text(r.thinking),
            str(r.k),
            Text(r.status),
            "" if r.old_al is None else f"{r.old_al:.4f}",
            "" if r.new_al is None else f"{r.new_al:.4f}",
            "" if r.delta is None else f"{r.delta:+.4f}",
            "" if r.rel_delta is None else f"{r.rel_delta:+.2%}",
            Text("; ".join(r.provenance_changes)),
        )
    if out.row_count:
        console.print(out)
    else:
        console.print("no changes", highlight=False)


@reference_app.command("audit")
@handle_errors
def reference_audit(
    table: Annotated[Path, typer.Argument(help="The reference table to audit.")],
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories of the M0 runs that wrote it.")],
    as_json: JsonOpt = False,
) -> None:
    """Recompute every value of a table from the stored scrapes of its runs; exit 1 on a mismatch."""
    from alflow.results.audit import audit_reference

    report = audit_reference(table, [str(d) for d in run_dirs])
    if as_json:
        emit_json(report.to_dict())
    else:
        out = Table(title=escape(f"Audit of {table}"))
        for col in ("entry", "status", "problems"):
            out.add_column(col)
        for row in report.rows:
            out.add_row(Text(row.entry), Text(row.status), Text("; ".join(row.problems)))
        console.print(out)
        console.print("audit passed" if report.ok else "audit FAILED", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@reference_app.command("m0-config")
@handle_errors
def reference_m0_config(
    models: Annotated[str, typer.Option("--models", help="Comma-separated model ids from the catalogue.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the M0 config (YAML).")],
    catalogue: Annotated[Path, typer.Option("--catalogue", help="Model catalogue.")] = Path(
        "references/models.yaml"
    ),
    ks: Annotated[str, typer.Option("--ks", help="Comma-separated K values.")] = "1,2,3,4,5,6,7",
    thinking: Annotated[str, typer.Option("--thinking", help="Comma-separated thinking modes.")] = "on,off",
    framework: Annotated[str, typer.Option("--framework", help="vllm (references) or sim (tests).")] = "vllm",
    image: Annotated[str | None, typer.Option("--image", help="Framework image with tag.")] = None,
    prompts: Annotated[
        str | None,
        typer.Option("--prompts", help="Prepared SPEED-Bench JSONL (default: bundled demo prompts)."),
    ] = None,
    reference: Annotated[
        str, typer.Option("--reference", help="Reference table to write.")
    ] = "references/speed-bench-coding.yaml",
    results_root: Annotated[str, typer.Option("--results-root", help="Run store root.")] = "results",
    runner: Annotated[str, typer.Option("--runner", help="process or docker.")] = "docker",
    extra_arg: Annotated[
        list[str] | None, typer.Option("--extra-arg", help="Extra server argument (repeat).")
    ] = None,
) -> None:
    """Write the M0 config the reference-AL workflow runs (one per model: ``alflow run m0 --config``)."""
    from alflow.config import CalibrateParams, CalibrationCatalogue

    cat = load_yaml_model(catalogue, CalibrationCatalogue, what="model catalogue")
    ids = [m.strip() for m in models.split(",") if m.strip()]
    if len(ids) != 1:
        raise InvalidInputError(
            f"--models {models!r}: give exactly one model per config (the workflow loops)"
        )
    try:
        item = cat.get(ids[0])
        k_values = tuple(int(k) for k in ks.split(","))
    except ValueError as exc:
        raise InvalidInputError(f"{exc}") from None
    params = CalibrateParams.model_validate(
        {
            "models": [item.model.model_dump(mode="json")],
            "method": item.method.value,
            "draft_model": item.draft_model,
            "ks": k_values,
            "thinking": [t.strip() for t in thinking.split(",") if t.strip()],
            "server": {
                "framework": framework,
                "model": item.model.id,
                "revision": item.model.revision,
                "image": image,
                "parallelism": item.parallelism.model_dump(),
                "extra_args": list(extra_arg or ()),
            },
            "placement": {"runner": {"kind": runner}, "results_root": results_root},
            "workload": {"kind": "speed-bench", "path": prompts, "category": "coding"},
            "load": {"concurrency": 1},
            "reference_path": reference,
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    console.print(f"wrote {out}", highlight=False, markup=False)


# --------------------------------------------------------------------------------------------
# alflow run / alflow demo (Prefect is imported only when these run)

FLOWS: dict[str, tuple[str, str, str]] = {
    "m0": ("flows.calibrate", "calibrate", "CalibrateParams"),
    "m1": ("flows.gate", "gate", "GateParams"),
    "m2": ("flows.benchmark", "benchmark", "BenchmarkParams"),
    "sweep": ("flows.sweep", "sweep", "SweepParams"),
}
"""Flow name -> (module, flow function, parameter model in alflow.config)."""


def prefect_defaults() -> None:
    """Settings every local run needs here (no analytics; time for the temporary server to start)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")


_GUARDED: dict[int, Guard] = {}


def _terminate_as_exit(signum: int, frame: object) -> None:
    """SIGTERM ends a run like Ctrl-C does: ``finally`` blocks stop its servers, ``atexit`` the temporary server."""
    del frame
    raise SystemExit(128 + signum)


class _AlflowErrorsWithoutTraceback(logging.Filter):
    """Drop the traceback Prefect's engine logs with a failed task or flow run when the error is alflow's own.

    An :class:`~alflow.errors.AlflowError` (a server that did not start, a point that aborted, a failed
    gate) is an expected outcome with a message that says what happened; its traceback is noise on a
    terminal (the record itself, with the message, is kept). Any other exception keeps its traceback:
    that is a bug. Only ``alflow run`` and ``alflow demo`` install this; deployments keep Prefect's logging.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, AlflowError):
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_expected_tracebacks() -> None:
    """Install :class:`_AlflowErrorsWithoutTraceback` on Prefect's flow and task run loggers (once)."""
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _AlflowErrorsWithoutTraceback) for f in logger.filters):
            logger.addFilter(_AlflowErrorsWithoutTraceback())


def print_flow_failure(what: str, message: str) -> None:
    """``error: WHAT failed: HEADLINE`` on stderr, further lines (a server's log tail) indented below it.

    So exactly one line starts with ``error:``, also when the message quotes a server log whose own
    lines start with ``error:``.
    """
    headline, *rest = redact_urls_in_text(message).splitlines() or [""]
    lines = [f"error: {what} failed: {headline}", *(f"  | {line}" for line in rest)]
    Console(stderr=True, soft_wrap=True).print("\n".join(lines), markup=False, highlight=False)


def prepare_local_run() -> None:
    """Before a flow runs in this process: Prefect's settings, SIGTERM handling, and a guarded temporary server.

    Without ``PREFECT_API_URL``, Prefect starts a temporary API server as a child process on first use
    and stops it at exit; a SIGKILL of this process would leave it running. It is started here instead,
    with a guard (:mod:`alflow.procguard`) that stops it when this process dies, however it dies.
    """
    prefect_defaults()
    quiet_expected_tracebacks()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate_as_exit)
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    process = server.server_process
    if process is not None and process.pid not in _GUARDED:
        _GUARDED[process.pid] = Guard.start(process.pid, group=False, grace_s=5.0)


def check_prefect_api(timeout_s: float = 5.0) -> None:
    """With ``PREFECT_API_URL`` set (environment or Prefect profile), check the server answers.

    An unreachable server is one line and exit 2 before the flow starts (Prefect itself would print a
    long traceback after its own retries). Any HTTP answer counts as reachable.
    """
    import urllib.error
    import urllib.request

    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        return
    probe = url.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(probe, timeout=timeout_s):  # noqa: S310 - the user's own setting
            return
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise InvalidInputError(
            f"PREFECT_API_URL={url} is unreachable ({reason}): start that Prefect server "
            "(prefect server start) or unset PREFECT_API_URL to run on Prefect's temporary local server"
        ) from None


def load_params(flow: str, path: Path) -> BaseModel:
    """Read a YAML config into the flow's parameter model; errors name the file and the field."""
    if flow not in FLOWS:
        raise InvalidInputError(f"unknown flow {flow!r}; known: {', '.join(FLOWS)}")
    import alflow.config as config_module

    model: type[BaseModel] = getattr(config_module, FLOWS[flow][2])
    return load_yaml_model(path, model, what="config")


@app.command("run")
def run(
    flow: Annotated[str, typer.Argument(help="m0, m1, m2 or sweep.")],
    config: Annotated[Path, typer.Option("--config", help="YAML file with the flow's parameters.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the flow's result as JSON.")] = False,
) -> None:
    """Run one flow locally (Prefect's temporary server unless PREFECT_API_URL is set); exit 1 if it fails."""
    err = Console(stderr=True, soft_wrap=True)
    try:
        params = load_params(flow, config)
        prefect_defaults()
        check_prefect_api()
    except AlflowError as exc:
        err.print(f"error: {redact_urls_in_text(str(exc))}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    prepare_local_run()
    module, name, _ = FLOWS[flow]
    fn: Any = getattr(importlib.import_module(module), name)
    state = fn(params, return_state=True)
    if not state.is_completed():
        print_flow_failure(f"flow {flow}", str(state.message))
        raise typer.Exit(1)
    result = redact_data(
        json.loads(json.dumps(state.result(), default=str))
    )  # URLs printed without credentials
    if as_json:
        emit_json(result)
    else:
        console.print(f"flow {flow} completed: {jsonutil.dumps(result, indent=None)[:2000]}", markup=False)


class DemoEngine(StrEnum):
    """Engines the demo runs on."""

    sim = "sim"
    tiny = "tiny"
    vllm = "vllm"


@app.command("demo")
def demo(
    results_root: Annotated[Path, typer.Option("--results-root", help="Where the demo writes.")] = Path(
        "results/demo"
    ),
    engine: Annotated[
        DemoEngine,
        typer.Option(
            "--engine",
            help="sim: M0 -> M1 -> M2 on the simulated engine; tiny: M0 -> M1 on the real tiny CPU engine "
            "(needs the alflow\\[tiny] extra); vllm: M0 -> M1 on a real vLLM (CPU build, SmolLM2-135M; needs "
            "scripts/setup.sh --vllm), and M2's refusal on CPU.",
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
        check_prefect_api()
    except AlflowError as exc:
        err_console.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    prepare_local_run()
    if engine is DemoEngine.vllm:
        console.print(
            "[bold]alflow demo --engine vllm[/bold]: M0 -> M1 on a REAL vLLM (CPU build) serving SmolLM2-135M "
            "with n-gram drafting (about 5 GiB of memory, several minutes on 2 cores); then M2, which vLLM's "
            "CPU build refuses.",
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
        if not out["m1"]["vllm-cpu"]["passed"]:
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
    refusal = out.get("m2_refusal")
    console.print(
        "M2 (synthetic acceptance) refused on vLLM's CPU build, as expected: " + (refusal or "")
        if refusal
        else "M2: NOT refused (unexpected on vLLM's CPU build)",
        highlight=False,
        markup=False,
    )
    console.print(f"{out['label']}", highlight=False, markup=False)
    console.print(
        f"Results: {out['results_root']} (report.html and report.md inside each run directory; server logs in "
        "server-logs/)",
        highlight=False,
        markup=False,
    )
    console.print(f"Demo finished in {took:.0f} s.", highlight=False)


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


def usage_error_line(exc: typer.TyperException) -> str:
    """A usage error of the command line parser (bad option value, unknown option) as one line."""
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None else ""
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    return " ".join(f"{where}{exc.format_message()}{hint}".split())


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``alflow`` console script.

    Every input error ends the same way: one line on stderr (``error: ...``) and exit code 2, also
    the parser's own usage errors (a bad option value, an unknown option), which Typer would print as
    a usage box, and an alflow input error of a command that does not catch its own.
    """
    try:
        code = app(args=argv, prog_name="alflow", standalone_mode=False)
    except typer.TyperException as exc:  # click's ClickException family, vendored by Typer
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            err_console.print(f"error: {usage_error_line(exc)}", markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted", markup=False, highlight=False)
        sys.exit(130)
    except AlflowError as exc:
        err_console.print(f"error: {' '.join(str(exc).split())}", markup=False, highlight=False)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
