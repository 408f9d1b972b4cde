"""A run's plan without running it (``alflow run ... --dry-run``, a flow's ``dry_run`` parameter).

Per server the flow would start: the point (method step, model, K, target), the runner, the rendered command,
the environment (redacted as provenance records it; secrets by name only), the config files, the release gates
judged against the image tag, the synthetic knobs and the warnings. Built by the same code a real run uses
(:func:`~alflow.methods.common.point_server`, :func:`~alflow.frameworks.recipes.build_launch`, the process
runner's :func:`~alflow.frameworks.recipes.check_install`), so every refusal of a real run is raised here too,
before anything starts. Nothing is started, written or fetched.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    DockerOptions,
    ExternalServer,
    GateParams,
    ProcessOptions,
    ServerConfig,
    SlurmOptions,
    SweepParams,
    SyntheticAcceptance,
    ThinkingMode,
)
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipe_kit import image_tag
from alflow.frameworks.recipes import build_launch, check_install
from alflow.frameworks.versions import FrameworkVersion
from alflow.methods.common import point_server, reference_variant, synthetic_target
from alflow.methods.m0 import check_reference_target
from alflow.methods.sweep_rules import benchmark_for, gate_for
from alflow.reference.table import ReferenceEntry, load_reference
from alflow.results.manifest import ServerProvenance

FlowParams = CalibrateParams | GateParams | BenchmarkParams | SweepParams


@dataclass(frozen=True)
class GateCheck:
    """One release gate a server's configuration needs, judged against the image tag (or left to the live server)."""

    feature: str
    minimum: str
    source: str
    verdict: str

    def to_dict(self) -> dict[str, str]:
        """The gate as JSON."""
        return asdict(self)


@dataclass(frozen=True)
class PlannedServer:
    """One server a flow would start, and what it would measure on it."""

    step: str
    """``m0``, ``m1`` or ``m2``."""
    point: str
    """What is measured on it: model, method, K, thinking modes, the M2 target and concurrencies."""
    runner: str
    server: ServerProvenance
    gates: tuple[GateCheck, ...]
    secrets: tuple[str, ...] = ()
    """The names of the secret variables the runner passes through (their values are never read here)."""

    def to_dict(self) -> dict[str, Any]:
        """The server as JSON (the environment redacted; secrets by name)."""
        return {
            "step": self.step,
            "point": self.point,
            "runner": self.runner,
            "server": self.server.model_dump(mode="json", exclude_defaults=True),
            "gates": [g.to_dict() for g in self.gates],
            "secrets": list(self.secrets),
        }

    def lines(self) -> list[str]:
        """The server as indented text lines."""
        s = self.server
        out = [f"{self.step.upper()}: {self.point}", f"  runner: {self.runner}"]
        if s.image:
            out.append(f"  image: {s.image}")
        out.append(f"  command: {s.command}")
        if s.worker_argv:
            out.append(f"  worker command: {' '.join(s.worker_argv)}")
        for name, value in sorted(s.env.items()):
            out.append(f"  env: {name}={value}")
        out += [f"  secret (passed by name, value never read): {name}" for name in self.secrets]
        for path, content in s.files.items():
            out.append(f"  file {path}:")
            out += [f"    {line}" for line in content.splitlines()]
        if s.synthetic:
            out.append("  synthetic: " + _synthetic_summary(s.synthetic))
        out += [f"  gate: {g.feature} (from {g.minimum}; {g.source}): {g.verdict}" for g in self.gates]
        out += [f"  runtime K: {k.get('name')} ({k.get('effect', '')})" for k in s.runtime_k]
        out += [f"  warning: {w}" for w in s.warnings]
        if s.engine_note:
            out.append(f"  engine: {s.engine_note}")
        return out


@dataclass(frozen=True)
class Plan:
    """Every server a flow would start, in order."""

    flow: str
    servers: tuple[PlannedServer, ...]

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON."""
        return {"flow": self.flow, "dry_run": True, "servers": [s.to_dict() for s in self.servers]}

    def markdown(self) -> str:
        """The plan for a markdown artifact, shown and never rendered.

        The text sits in one fenced block longer than any backtick run in it, so user strings (model ids,
        arguments, file contents) cannot close it.
        """
        text = self.text()
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
        return f"# Dry run of {self.flow}\n\n{fence}text\n{text}\n{fence}\n"

    def text(self) -> str:
        """The plan as text: a header, then each server's block."""
        out = [f"dry run of {self.flow}: {len(self.servers)} server(s) would start; nothing was started"]
        for i, server in enumerate(self.servers, 1):
            out.append(f"[{i}/{len(self.servers)}] " + "\n".join(server.lines()))
        return "\n".join(out)


def _synthetic_summary(knobs: dict[str, Any]) -> str:
    """The rendered knobs in one line: the scheme, its draw granularity and expected mean, its pmf."""
    expected = knobs.get("expected") or {}
    parts = [f"scheme {knobs.get('scheme')}"]
    if expected:
        parts.append(f"{expected.get('granularity')} draws, expected mean AL {expected.get('mean_al')}")
        pmf = {n: p for n, p in (expected.get("pmf") or {}).items() if p}
        parts.append("accept-length pmf " + ", ".join(f"{n}: {p}" for n, p in pmf.items()))
    if knobs.get("rates"):
        parts.append(f"rates {knobs['rates']}")
    return "; ".join(parts)


def reference_entry(params: GateParams | BenchmarkParams) -> ReferenceEntry:
    """The reference entry M1 gates against or M2 targets (a missing one is the flow's refusal).

    Looked up by (model or ``reference_model``, method or M2's ``reference_method``, thinking, K, drafter
    variant) in ``reference_path``.
    """
    method = (params.reference_method if isinstance(params, BenchmarkParams) else None) or params.method
    return load_reference(str(params.reference_path)).lookup(
        params.reference_model or params.model.id,
        method,
        params.thinking,
        params.k,
        reference_variant(params),
    )


def m2_server(params: BenchmarkParams) -> tuple[ServerConfig, str]:
    """M2's server and where its target AL comes from: the rule, in one place (the flow and the dry run use it).

    The server is the template at the model, method and K with synthetic acceptance at the target: the parameters'
    ``target_al``, else the reference table's entry as the flow looks it up. The server holds the target
    (:func:`alflow.methods.common.synthetic_target`).
    """
    if params.target_al is not None:
        target, origin = params.target_al, "given"
    else:
        entry = reference_entry(params)
        target, origin = entry.al, f"reference {params.reference_path}, {entry.model} {entry.variant.label()}"
    synthetic = SyntheticAcceptance(target_al=target, scheme=params.scheme)
    server = point_server(
        params.server,
        params.model.id,
        params.method,
        params.k,
        draft_model=params.draft_model,
        synthetic=synthetic,
    )
    return server, origin


def first_server(params: CalibrateParams | GateParams | BenchmarkParams) -> ServerConfig:
    """The server of a flow's first point (M0: first model and K; M1; M2 with its synthetic target)."""
    if isinstance(params, CalibrateParams):
        return point_server(
            params.server, params.models[0].id, params.method, params.ks[0], draft_model=params.draft_model
        )
    if isinstance(params, BenchmarkParams):
        return m2_server(params)[0]
    return point_server(
        params.server, params.model.id, params.method, params.k, draft_model=params.draft_model
    )


def runner_launch(launch: Launch, runner: object, *, local: bool = True) -> Launch:
    """``launch`` as the runner starts it.

    A process runner checks the install (only where it runs here: ``local``) and runs no image; Slurm runs its
    ``container_image`` or the bare program, never the recipe's image.
    """
    if isinstance(runner, ProcessOptions):
        env = runner.framework_env
        if not local:
            return launch.without_image()
        return check_install(launch, None if not env else Path(env).expanduser().absolute())
    if isinstance(runner, SlurmOptions):
        bare = launch.without_image()
        return bare if runner.container_image is None else replace(bare, image=runner.container_image)
    return launch


def runner_label(runner: object) -> str:
    """The runner in a few words."""
    if isinstance(runner, ProcessOptions):
        return "process" + (f" (framework_env {runner.framework_env})" if runner.framework_env else "")
    if isinstance(runner, DockerOptions):
        return "docker"
    if isinstance(runner, SlurmOptions):
        return "slurm"
    if isinstance(runner, ExternalServer):
        return (
            f"external server at {runner.base_url} (alflow starts nothing; the command is what it would be)"
        )
    return type(runner).__name__


def gate_checks(launch: Launch) -> tuple[GateCheck, ...]:
    """Each release gate of ``launch``, judged against its image tag (a too-old tag was refused at build)."""
    found = FrameworkVersion.parse(image_tag(launch.image))
    checks = []
    for cap in launch.requirements:
        if found is not None:
            verdict = f"passes on the image tag ({found})"
        elif launch.image:
            verdict = "the image tag names no release: a warning now, judged on the live server's version"
        else:
            verdict = "no image: judged on the installed or live server's version"
        checks.append(GateCheck(cap.feature, str(cap.minimum), cap.source, verdict))
    return tuple(checks)


def planned(
    step: str, point: str, server: ServerConfig, runner: object, *, local: bool = True
) -> PlannedServer:
    """One server as the flow would start it (the recipe's and the install's refusals raised here)."""
    launch = runner_launch(build_launch(server), runner, local=local)
    api_key = getattr(runner, "api_key_env", None)
    names = (*launch.secret_env, *getattr(runner, "secrets", ()), *((api_key,) if api_key else ()))
    if not server.port:  # the recipe picked a free port now; the run picks its own at start
        point += "; port chosen free at start (the one shown is free now)"
    return PlannedServer(
        step,
        point,
        runner_label(runner),
        launch.provenance(),
        gate_checks(launch),
        tuple(dict.fromkeys(names)),
    )


def _m0(params: CalibrateParams, local: bool) -> list[PlannedServer]:
    check_reference_target(params)  # the table on disk can take these values, as the flow checks first
    out = []
    for model in params.models:
        modes = [m.value for m in params.thinking if model.reasoning or m is ThinkingMode.OFF] or ["off"]
        for k in params.ks:
            server = point_server(params.server, model.id, params.method, k, draft_model=params.draft_model)
            point = (
                f"model {model.id}, {params.method.value} K={k}, thinking {', '.join(modes)}; real acceptance"
            )
            out.append(planned("m0", point, server, params.placement.runner, local=local))
    return out


def _m1(params: GateParams, local: bool) -> list[PlannedServer]:
    reference = reference_entry(params).al
    point = (
        f"model {params.model.id}, {params.method.value} K={params.k}, thinking {params.thinking.value}; "
        f"real acceptance against reference AL {reference:.4f} ({params.reference_path})"
    )
    return [planned("m1", point, first_server(params), params.placement.runner, local=local)]


def _m2(params: BenchmarkParams, local: bool) -> list[PlannedServer]:
    server, origin = m2_server(params)
    target = synthetic_target(server)
    point = (
        f"model {params.model.id}, {params.method.value} K={params.k}; synthetic target AL {target:.4f} "
        f"({origin}, scheme {params.scheme or 'the framework default'}); concurrencies "
        f"{', '.join(str(c) for c in params.concurrencies)}"
        + (f", each {params.repeats} times" if params.repeats > 1 else "")
    )
    return [planned("m2", point, server, params.placement.runner, local=local)]


def unit_params(params: FlowParams) -> tuple[CalibrateParams | GateParams | BenchmarkParams, ...]:
    """The M0, M1 or M2 parameters a flow runs: itself, or a sweep's M1 and M2 of each K in order."""
    if isinstance(params, SweepParams):
        return tuple(p for k in params.ks for p in (gate_for(params, k), benchmark_for(params, k)))
    return (params,)


def runs_here(params: FlowParams) -> bool:
    """Whether the flow's servers start from this machine (not a sweep fanned out over GPU nodes' workers)."""
    return not (isinstance(params, SweepParams) and params.fan_out is not None)


def plan_of(flow: str, params: FlowParams) -> Plan:
    """The plan of ``flow`` with ``params``: every server, in the order the flow starts them.

    A sweep fanned out over GPU nodes is planned without this machine's install check: its children check
    their own installs on their nodes, as a real sweep's do.
    """
    local = runs_here(params)
    servers: list[PlannedServer] = []
    for unit in unit_params(params):
        if isinstance(unit, CalibrateParams):
            servers += _m0(unit, local)
        elif isinstance(unit, GateParams):
            servers += _m1(unit, local)
        else:
            servers += _m2(unit, local)
    return Plan(flow, tuple(servers))
