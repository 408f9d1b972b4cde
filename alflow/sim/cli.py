"""``alflow sim serve``: the command line of the simulated engine (a typer sub-app).

:func:`register` adds the ``sim`` group to the root ``alflow`` app; ``python -m alflow.sim serve``
runs the same command on its own. The framework sources (arguments the command does not define, such as vLLM's
``--speculative-config`` JSON or ATOM's ``--spec-decode-acceptance-length``, and the SGLang and TensorRT-LLM
environment variables) are read by the dialect's plugin as described in :mod:`alflow.sim.config`.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from alflow.errors import AlflowError, InvalidInputError
from alflow.serving.app import run_until_signalled, serve_group
from alflow.sim.config import SimConfig, parse_rates, resolve
from alflow.sim.profiles import DEFAULT_PROFILE
from alflow.sim.server import LISTENING_PREFIX, serve
from alflow.util.names import check_host, check_identifier, check_output_file, check_path_name, shown
from alflow.util.typer_options import command_of

log = logging.getLogger("alflow.sim")

_HELP = "The built-in simulated serving engine."

# CLI parameter name -> SimConfig field, for "which values were given explicitly".
_FIELD_OF = {
    "synthetic_rates_text": "synthetic_rates",
    "startup_delay": "startup_delay_s",
    "join_timeout": "join_timeout_s",
    "heartbeat_interval": "heartbeat_s",
    "peer_timeout": "peer_timeout_s",
}


_CONFIG_FIELDS = frozenset(f.name for f in fields(SimConfig))

FRAMEWORK_FLAGS = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Arguments the command does not define are the dialect's own framework flags (``resolve``'s ``framework_args``)."""


@dataclass(frozen=True)
class ServeOptions:
    """The options of the command, declared once (the command's signature is built from them)."""

    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1"
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one and prints it.")] = 8000
    model_name: Annotated[str, typer.Option(help="Model name (served as sim/NAME).")] = "llama-3.3-70b"
    dialect: Annotated[
        str,
        typer.Option(
            help="Framework whose API, metrics and knob sources the simulator speaks (alflow frameworks lists them)."
        ),
    ] = "vllm"
    k: Annotated[int, typer.Option("--k", help="Speculative (draft) tokens per step, K.")] = 3
    method: Annotated[str, typer.Option(help="Drafting method: mtp, eagle3, draft_model or ngram.")] = "mtp"
    synthetic_al: Annotated[
        float | None, typer.Option(help="Synthetic acceptance: target AL (bonus token included).")
    ] = None
    synthetic_rates_text: Annotated[
        str | None,
        typer.Option(
            "--synthetic-rates", help="Synthetic acceptance: unconditional per-position rates p_1..p_K."
        ),
    ] = None
    synthetic_scheme: Annotated[
        str | None, typer.Option(help="Synthetic scheme (default: the dialect's own).")
    ] = None
    max_num_seqs: Annotated[int, typer.Option(help="Most requests running at once; the rest queue.")] = 256
    max_model_len: Annotated[int, typer.Option(help="Context limit (prompt + output tokens).")] = 32768
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 0
    profile: Annotated[str, typer.Option(help="Timing profile (GPU + model).")] = DEFAULT_PROFILE
    time_scale: Annotated[
        float,
        typer.Option(
            help="1 = real time; 0 = as fast as possible (also $ALFLOW_SIM_TIME_SCALE: a slower engine for the same "
            "arguments, as a slower image of one regression series).",
            envvar="ALFLOW_SIM_TIME_SCALE",
        ),
    ] = 1.0
    step_log: Annotated[
        Path | None, typer.Option(help="Append one JSON line per verify step to this file.")
    ] = None
    acceptance_quality: Annotated[
        float, typer.Option(help="Natural acceptance: factor on conditional rates (0.5 = degraded).")
    ] = 1.0
    mean_output_tokens: Annotated[
        int, typer.Option(help="Mean natural output length (without ignore_eos).")
    ] = 300
    answer_key: Annotated[Path | None, typer.Option(help="GSM8K-style JSONL: answer its questions.")] = None
    answer_accuracy: Annotated[float, typer.Option(help="Probability an answer-key reply is right.")] = 1.0
    startup_delay: Annotated[float, typer.Option(help="Fault: seconds to wait before listening.")] = 0.0
    fail_startup: Annotated[bool, typer.Option(help="Fault: exit with an error instead of listening.")] = (
        False
    )
    crash_after_requests: Annotated[
        int | None, typer.Option(help="Fault: the process exits after N completed requests.")
    ] = None
    error_rate: Annotated[float, typer.Option(help="Fault: share of requests answered with HTTP 500.")] = 0.0
    stream_error_rate: Annotated[
        float, typer.Option(help="Fault: share of streams that carry an error event inside a 200.")
    ] = 0.0
    stall_after_tokens: Annotated[
        int | None, typer.Option(help="Fault: every request stops emitting after N tokens.")
    ] = None
    sglang_window_steps: Annotated[int, typer.Option(help="SGLang gauges: verify steps per window.")] = 40
    short_draft_share: Annotated[
        float,
        typer.Option(
            help="Share of verify steps that propose fewer than K drafts (1..K-1), accepts capped by them (0..1)."
        ),
    ] = 0.0
    sglang_token_mode: Annotated[
        str, typer.Option(help="SGLang synthetic output: fixed (token id 100) or real-draft-token.")
    ] = "fixed"  # noqa: S105  (a mode, not a password)
    nnodes: Annotated[
        int, typer.Option(help="Nodes the server spans (node R listens on --port + R; the head is rank 0).")
    ] = 1
    node_rank: Annotated[int, typer.Option(help="This node's rank: 0 is the head, 1..N-1 are workers.")] = 0
    head_addr: Annotated[
        str | None, typer.Option(help="Multi-node: the head's address (workers connect to it).")
    ] = None
    dist_port: Annotated[
        int | None, typer.Option(help="Multi-node: the head's port for workers joining (join protocol).")
    ] = None
    node_parallel: Annotated[
        str,
        typer.Option(
            help="Multi-node: tp (one model across the nodes) or dp (one engine per node, own metrics)."
        ),
    ] = "tp"
    join_timeout: Annotated[
        float,
        typer.Option(help="Multi-node: seconds for every worker to join (and a worker to reach the head)."),
    ] = 300.0
    heartbeat_interval: Annotated[float, typer.Option(help="Multi-node: seconds between heartbeats.")] = 0.5
    peer_timeout: Annotated[
        float, typer.Option(help="Multi-node: a peer silent this many seconds is gone.")
    ] = 5.0
    framework_version: Annotated[
        str | None,
        typer.Option(
            help="The framework version this server reports in its dialect's way (vLLM and TensorRT-LLM "
            "GET /version, SGLang /server_info), for tests of alflow's release gates; default: 'alflow-sim'."
        ),
    ] = None
    ignore_synthetic: Annotated[
        bool,
        typer.Option(
            help="Fault: read the synthetic-acceptance knobs and then ignore them (real acceptance), as an "
            "image that does not honour them would."
        ),
    ] = False
    per_request_spec_decode_metrics: Annotated[
        str,
        typer.Option(
            help="vLLM's per-request acceptance in responses (metrics.speculative_decoding): none, summary or "
            "detailed (dialect vllm only)."
        ),
    ] = "none"
    sglang_spec_details: Annotated[
        bool,
        typer.Option(
            help="SGLang dialect: answer return_spec_tokens_details with sglext.spec_tokens_details (SGLang PR "
            "#33518); --no-sglang-spec-details ignores the field, as an older SGLang does."
        ),
    ] = True
    log_level: Annotated[str, typer.Option(help="Logging level on stderr.")] = "INFO"
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="VLLM_API_KEY",
            show_default=False,
            help="Require 'Authorization: Bearer KEY' on /v1/* (401 without it), as vLLM's --api-key; "
            "default: $VLLM_API_KEY (pass it by name, e.g. a runner secret, to keep it off the command line).",
        ),
    ] = field(default=None, repr=False)  # never shown


def _serve(ctx: typer.Context, o: ServeOptions) -> None:
    """Run the simulated OpenAI-compatible serving engine (speculative decoding, metrics dialects).

    Arguments not listed here are the dialect's framework's own flags, read as that framework reads them (vLLM:
    --speculative-config JSON; ATOM: --num-speculative-tokens, --spec-decode-acceptance-length or -rate).
    """
    level = o.log_level.upper()
    if level not in _LEVELS:
        sys.stderr.write(f"error: --log-level {shown(o.log_level)} is not one of: {', '.join(_LEVELS)}\n")
        raise typer.Exit(2)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    params = ctx.params
    explicit = [
        _FIELD_OF.get(name, name)
        for name in params
        if getattr(ctx.get_parameter_source(name), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    ]
    try:
        config = resolve(
            _sim_config(o),
            explicit=[name for name in explicit if name in _CONFIG_FIELDS],
            env=os.environ,
            framework_args=tuple(ctx.args),
        )
        try:
            check_host(
                o.host, what="--host"
            )  # '' bound every interface; 'a..b', ESC: a traceback, raw controls
            check_identifier(config.model_name, what="--model-name")
            if config.framework_version is not None:
                check_identifier(config.framework_version, what="--framework-version")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        given = getattr(ctx.get_parameter_source("api_key"), "name", None) == "COMMANDLINE"
        if given and o.api_key == "":  # an explicit empty key would serve every request without a word
            raise InvalidInputError(
                "--api-key '' is empty: give a key, or leave the option out for no authentication"
            )
        if config.step_log is not None:
            _check_step_log(config.step_log)
        if o.ignore_synthetic and config.synthetic:
            logging.getLogger(__name__).warning(
                "fault --ignore-synthetic: the synthetic-acceptance setting is read and ignored (real acceptance)"
            )
            config = replace(config, synthetic_al=None, synthetic_rates=None, synthetic_scheme=None)
    except AlflowError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2) from None
    try:
        run_server(config)
    except AlflowError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(1) from None


serve_command = command_of(ServeOptions, _serve, context=True)
"""``alflow sim serve`` (and ``python -m alflow.sim serve``): the options of :class:`ServeOptions`."""


def _sim_config(o: ServeOptions) -> SimConfig:
    """The engine's settings as the options give them (before the environment and framework flags)."""
    given: dict[str, Any] = {_FIELD_OF.get(f.name, f.name): getattr(o, f.name) for f in fields(ServeOptions)}
    given["synthetic_rates"] = None if o.synthetic_rates_text is None else parse_rates(o.synthetic_rates_text)
    given["api_key"] = o.api_key or None
    return SimConfig(**{name: value for name, value in given.items() if name in _CONFIG_FIELDS})


_LEVELS = tuple(logging.getLevelNamesMapping())  # DEBUG, INFO, WARN, WARNING, ERROR, FATAL, CRITICAL, NOTSET


def _check_step_log(path: Path) -> None:
    """Before listening: ``--step-log`` can be opened for appending (its folder exists; not a folder itself)."""
    allowed = "allowed: a file (new or to append to) in an existing folder"
    try:  # a name longer than the file system allows, a NUL: one line, not an OSError traceback
        check_path_name(path, what="--step-log")
    except ValueError as exc:
        raise InvalidInputError(f"{exc}; {allowed}") from None
    folder = path.parent
    if path.is_dir():
        raise InvalidInputError(f"--step-log {str(path)!r} is a folder; {allowed}")
    if not folder.is_dir():
        why = "does not exist" if not folder.exists() else "is not a folder"
        raise InvalidInputError(f"--step-log {str(path)!r}: its folder {str(folder)!r} {why}; {allowed}")
    try:  # not under /proc, /sys or /dev: /proc/version cannot be appended to (a traceback at the first step)
        check_output_file(str(path), what="--step-log")
    except ValueError as exc:
        raise InvalidInputError(f"{exc}; {allowed}") from None
    if (
        path.exists() and not path.is_file()
    ):  # a FIFO: opening it to append waits for a reader, deaf to SIGTERM
        raise InvalidInputError(
            f"--step-log {str(path)!r} is not a regular file (a FIFO, socket or device); {allowed}"
        )
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise InvalidInputError(f"--step-log {str(path)!r} is not writable (permission denied); {allowed}")


def run_server(config: SimConfig) -> None:
    """Serve until SIGTERM or SIGINT; print the listening line on stdout once bound."""
    run_until_signalled(partial(serve, config), LISTENING_PREFIX)


def register(app: typer.Typer) -> None:
    """Add the ``sim`` group (with ``serve``) to the root ``alflow`` app."""
    app.add_typer(serve_group(serve_command, _HELP, context_settings=FRAMEWORK_FLAGS), name="sim")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m alflow.sim`` (the ``sim`` group on its own)."""
    group = serve_group(serve_command, _HELP, standalone=True, context_settings=FRAMEWORK_FLAGS)
    group(args=argv, prog_name="python -m alflow.sim")
