"""``alflow run``: one flow in this process, and what every local flow run needs first.

Prefect is imported only when a flow runs (``alflow bench`` and the other commands start without it).
Without ``PREFECT_API_URL`` a flow runs on Prefect's temporary local server, started here with a guard
that stops it however this process ends.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import is_dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from pydantic import BaseModel
from rich.console import Console

from alflow.cli.common import console, emit_json, fail, parse_floats, say, split_list
from alflow.errors import AlflowError, InvalidInputError
from alflow.util import jsonutil, signals
from alflow.util.procguard import Guard
from alflow.util.redact import redact_data, redact_urls_in_text
from alflow.util.rows import dump_row
from alflow.util.yamlfile import load_yaml_model


def register(app: typer.Typer) -> None:
    """Add ``alflow run`` to ``app``."""
    app.command("run")(run)


FLOWS: dict[str, str] = {
    "m0": "CalibrateParams",
    "m1": "GateParams",
    "m2": "BenchmarkParams",
    "sweep": "SweepParams",
}
"""Flow name -> its parameter model in alflow.config (the flow itself: alflow_flows.entry)."""


def prefect_defaults() -> None:
    """Settings every local run needs here (no analytics; time for the temporary server to start)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")


_GUARDED: dict[int, Guard] = {}
_SIGNALLED: list[int] = []
"""The termination signals this process received (a run that got one exits 128 + signal, however Prefect reports it)."""


def _termination_signal(state: Any) -> int | None:
    """The signal behind a failed flow state: Prefect's ``TerminationSignal`` anywhere in its error's chain."""
    from prefect.exceptions import TerminationSignal

    try:
        exc: object = state.result(raise_on_failure=False)
    except Exception:  # a state without a readable result: no signal known
        return None
    seen: set[int] = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, TerminationSignal):
            return int(exc.signal)
        exc = exc.__cause__ or exc.__context__
    return None


STOP_GRACE_ENV = "ALFLOW_STOP_GRACE_S"
STOP_GRACE_S = 20.0
"""How long a run may take to unwind after SIGTERM before it exits at once (``ALFLOW_STOP_GRACE_S`` overrides).

Unwinding (storing the interrupted point as partial, stopping the servers, Prefect's last state and
the temporary server's stop) takes 3-10 s here, up to 65,536 streams; 20 s leaves room for a busy host
and stays inside the "ends within seconds, no hang past 30 s" promise.
"""


def stop_grace_s() -> float:
    """The grace from ``ALFLOW_STOP_GRACE_S`` (seconds, > 0) or :data:`STOP_GRACE_S`; a bad value is the default."""
    text = os.environ.get(STOP_GRACE_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return STOP_GRACE_S
    return value if math.isfinite(value) and value > 0 else STOP_GRACE_S


def _exit_if_still_stopping(signum: int, grace_s: float) -> None:
    """The watchdog: after ``grace_s``, say so, dump every thread's stack and exit ``128 + signum`` at once.

    The unwinding a signal starts can stall where the signal landed (a lock taken just before the
    ``SystemExit``, a Prefect service draining to a server that is gone). The servers this run started
    are stopped by their guards (:mod:`alflow.util.procguard`) when this process exits, and ``alflow infra
    cleanup`` drops a registry entry left behind. The line and the stacks go straight to file
    descriptor 2, which holds no Python lock that the stalled thread could own.
    """
    import faulthandler

    time.sleep(grace_s)
    name = signal.Signals(signum).name
    line = (
        f"error: alflow: still stopping {grace_s:g} s after {name}; exiting now (the servers it "
        "started are stopped by their guards; `alflow infra cleanup` drops what the registry still lists). "
        "Where it stalled, for a bug report:\n"
    )
    os.write(2, line.encode())
    faulthandler.dump_traceback(file=2, all_threads=True)
    os._exit(128 + signum)


def _terminate_as_exit(signum: int, frame: object) -> None:
    """SIGTERM ends a run like Ctrl-C does: ``finally`` blocks stop its servers, ``atexit`` the temporary server.

    A watchdog bounds the unwinding (:func:`_exit_if_still_stopping`); a second SIGTERM while the run
    unwinds is ignored, so it cannot break off the cleanup the first one started.
    """
    del frame
    if _SIGNALLED:
        return
    _SIGNALLED.append(signum)
    threading.Thread(
        target=_exit_if_still_stopping,
        args=(signum, stop_grace_s()),
        name="alflow-stop-watchdog",
        daemon=True,
    ).start()
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
    with a guard (:mod:`alflow.util.procguard`) that stops it when this process dies, however it dies.
    """
    prefect_defaults()
    quiet_expected_tracebacks()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate_as_exit)
        signals.hangup_as_termination()  # SIGHUP (terminal closed) as SIGTERM: the run keeps what it measured
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    _in_own_session(server)
    server.start()
    process = server.server_process
    if process is not None and process.pid not in _GUARDED:
        _GUARDED[process.pid] = Guard.start(process.pid, group=False, grace_s=5.0)


def _in_own_session(server: Any) -> None:
    """Start Prefect's temporary server in a session of its own.

    In this process's group, a terminal's Ctrl-C (or a SIGTERM to the group) stopped it at once, and the run's
    unwinding then retried the gone API for 76 s, with tracebacks, before it exited 1. Out of the group it
    lives until this process stops it at exit (or its guard does, however this process dies).
    """
    start = server._run_uvicorn_command  # Prefect 3: the Popen of the server (prefect/server/api/server.py)

    def detached() -> subprocess.Popen[Any]:
        popen = subprocess.Popen
        subprocess.Popen = functools.partial(popen, start_new_session=True)  # type: ignore[misc,assignment]
        try:
            return cast("subprocess.Popen[Any]", start())
        finally:
            subprocess.Popen = popen  # type: ignore[misc]

    server._run_uvicorn_command = detached


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

    model: type[BaseModel] = getattr(config_module, FLOWS[flow])
    return load_yaml_model(path, model, what="config")


SHORT_FORM: dict[str, tuple[str, tuple[str, ...]]] = {
    "m0": ("m0_params", ("models", "ks")),
    "m1": ("m1_params", ("model", "k", "thinking")),
    "m2": ("m2_params", ("model", "k", "target_al", "concurrencies")),
    "sweep": ("sweep_params_of", ("model", "ks", "target_al", "concurrencies")),
}
"""Flow name -> (its resolver in alflow_flows.presets, the short-form fields it takes), as in the Prefect UI's form."""


def _unique(values: list[Any], option: str, text: str) -> None:
    """Refuse a value given twice (it would be measured twice)."""
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise InvalidInputError(f"{option} {text!r}: {twice} is given twice: give each value once")


def _ints(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    values = parse_floats(text, option)
    if not values or any(not math.isfinite(v) or v != int(v) for v in values):
        raise InvalidInputError(f"{option} {text!r}: expected whole numbers separated by commas")
    # each as written where it is an integer (a float cannot hold 99999999999999999999999: the bound named another)
    ints = [
        int(p) if p.lstrip("+-").isdigit() else int(v)
        for p, v in zip(split_list(text, option), values, strict=True)
    ]
    _unique(ints, option, text)
    return ints


def _names(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    names = split_list(text, option)
    if not names:
        raise InvalidInputError(f"{option} {text!r}: give at least one model id (comma-separated)")
    _unique(names, option, text)
    return names


def short_form(flow: str, given: dict[str, object]) -> dict[str, object]:
    """The short-form fields given on the command line (None: not given), checked against ``flow``'s form."""
    allowed = SHORT_FORM[flow][1]
    for name, value in given.items():
        if value is not None and name not in allowed:
            takes = ", ".join("--" + a.replace("_", "-") for a in allowed)
            raise InvalidInputError(
                f"--{name.replace('_', '-')} does not apply to flow {flow} (it takes {takes})"
            )
    return {name: value for name, value in given.items() if value is not None}


def resolve_params(
    flow: str, params: BaseModel | None, preset: str | None, fields: dict[str, object]
) -> BaseModel:
    """The flow's full parameters: ``params`` (from --config) and/or ``preset``, the short-form fields over them.

    The rules are the flows' own (:mod:`alflow.config.presets`); a preset is a file under the project's
    ``presets/`` or, with ``PREFECT_API_URL`` set, a Prefect Variable ``alflow-preset-NAME``.
    """
    if params is None and preset is None:
        raise InvalidInputError(
            f"run {flow}: give --config FILE.yaml (the full configuration) or --preset NAME (a server preset, "
            "e.g. sim)"
        )
    if preset is None and not fields:
        assert params is not None
        return params
    from alflow_flows.entry import resolve_short_form

    resolved: BaseModel = resolve_short_form(SHORT_FORM[flow][0], preset, params, fields)
    return resolved


def print_plan(flow: str, params: BaseModel, as_json: bool) -> None:
    """The dry run: every check a real run makes before it starts, then the plan (text, or JSON with --json)."""
    from alflow.config import BenchmarkParams, CalibrateParams, GateParams, SweepParams
    from alflow_flows.entry import checked_plan

    assert isinstance(params, CalibrateParams | GateParams | BenchmarkParams | SweepParams)
    plan = checked_plan(flow, params)
    if as_json:
        emit_json(plan.to_dict())
    else:
        console.print(plan.text(), markup=False, emoji=False, highlight=False, soft_wrap=True)


# the options of `alflow run`, declared once (the command's signature names them)
FlowArg = Annotated[str, typer.Argument(help="m0, m1, m2 or sweep.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="YAML file with the flow's full parameters (the form's advanced params)."),
]
PresetOpt = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="Server preset by name (presets/NAME.yaml, e.g. sim); with --config it replaces the file's server.",
    ),
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="m1, m2, sweep: the model id to serve.")]
ModelsOpt = Annotated[str | None, typer.Option("--models", help="m0: model ids, comma-separated.")]
KOpt = Annotated[int | None, typer.Option("--k", help="m1, m2: speculative tokens K.")]
KsOpt = Annotated[str | None, typer.Option("--ks", help="m0, sweep: Ks, comma-separated (e.g. 1,2,3).")]
TargetAlOpt = Annotated[float | None, typer.Option("--target-al", help="m2, sweep: the target AL.")]
ConcurrenciesOpt = Annotated[
    str | None, typer.Option("--concurrencies", help="m2, sweep: concurrencies, comma-separated.")
]
ThinkingOpt = Annotated[str | None, typer.Option("--thinking", help="m1: thinking on or off.")]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help=(
            "Print the plan (each server's command, environment with secrets by name, config files, release "
            "gates, knobs) and start nothing; refuses what a real run refuses (exit 2)."
        ),
    ),
]


def run(
    flow: FlowArg,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    model: ModelOpt = None,
    models: ModelsOpt = None,
    k: KOpt = None,
    ks: KsOpt = None,
    target_al: TargetAlOpt = None,
    concurrencies: ConcurrenciesOpt = None,
    thinking: ThinkingOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the flow's result as JSON.")] = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Run one flow locally (Prefect's temporary server unless PREFECT_API_URL is set); exit 1 if it fails.

    The configuration is a file (--config), a preset (--preset), or both; the short-form options
    change a few values over it, as the Prefect UI's form does.
    """
    try:
        if flow not in FLOWS:
            raise InvalidInputError(f"unknown flow {flow!r}; known: {', '.join(FLOWS)}")  # before its options
        if thinking is not None and thinking not in ("on", "off"):
            raise InvalidInputError(f"--thinking {thinking!r}: must be on or off")
        fields = short_form(
            flow,
            {
                "model": model,
                "models": _names(models, "--models"),
                "k": k,
                "ks": _ints(ks, "--ks"),
                "target_al": target_al,
                "concurrencies": _ints(concurrencies, "--concurrencies"),
                "thinking": thinking,
            },
        )
        loaded = None if config is None else load_params(flow, config)
        if loaded is None and preset is None:
            resolve_params(flow, None, None, fields)  # names what is missing, before Prefect is asked
        prefect_defaults()
        if dry_run:
            print_plan(flow, resolve_params(flow, loaded, preset, fields), as_json)
            return
        check_prefect_api()
        params = resolve_params(flow, loaded, preset, fields)
        from alflow_flows.entry import check_launchable

        check_launchable(params)  # a server its install cannot run: refused before the run starts
    except AlflowError as exc:
        raise fail(str(exc)) from None
    prepare_local_run()
    from alflow_flows.entry import flow_function

    fn: Any = flow_function(flow)
    # the full configuration as every flow's advanced parameter (the short form stays empty)
    state = fn(params=params, return_state=True)
    if not state.is_completed():
        print_flow_failure(f"flow {flow}", str(state.message))
        # a signal that lands while Prefect sets up a task run can come back as another error (Prefect 3.9:
        # "Task run is not set"): the run was still stopped by the signal, and says so in its exit code
        signum = _SIGNALLED[0] if _SIGNALLED else _termination_signal(state)
        raise typer.Exit(1 if signum is None else 128 + signum)
    outcome = state.result()
    data = dump_row(outcome) if is_dataclass(outcome) else outcome  # the flows' typed outcomes
    result = redact_data(json.loads(json.dumps(data, default=str)))  # URLs printed without credentials
    if as_json:
        emit_json(result)
    else:
        say(f"flow {flow} completed: {jsonutil.dumps(result, indent=None)[:2000]}")  # names: escaped
