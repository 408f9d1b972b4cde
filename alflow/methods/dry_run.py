"""A run's plan without running it (``alflow run ... --dry-run``, a flow's ``dry_run`` parameter).

Per server the flow would start: the point (method step, model, K, target), the runner, the rendered command,
the environment (redacted as provenance records it; secrets by name only), the config files, the release gates
judged against the image tag, the synthetic knobs and the warnings. Built by the same code a real run uses
(:func:`~alflow.methods.common.point_server`, :func:`~alflow.frameworks.recipes.build_launch`, the process
runner's :func:`~alflow.frameworks.recipes.check_install`), so every refusal of a real run is raised here too,
before anything starts. Nothing is started, written or fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
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
)
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipes import build_launch, check_install
from alflow.frameworks.versions import FrameworkVersion
from alflow.methods.common import point_server, reference_variant
from alflow.methods.sweep_rules import benchmark_for, gate_for
from alflow.reference.table import load_reference
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
        return {
            "feature": self.feature,
            "minimum": self.minimum,
            "source": self.source,
            "verdict": self.verdict,
        }


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


def m2_target(params: BenchmarkParams) -> tuple[float, str]:
    """M2's target AL and where it comes from: the parameters, or the reference table as the flow looks it up."""
    if params.target_al is not None:
        return params.target_al, "given"
    entry = load_reference(str(params.reference_path)).lookup(
        params.reference_model or params.model.id,
        params.reference_method or params.method,
        params.thinking,
        params.k,
        reference_variant(params),
    )
    return entry.al, f"reference {params.reference_path}"


def first_server(params: CalibrateParams | GateParams | BenchmarkParams) -> ServerConfig:
    """The server of a flow's first point (M0: first model and K; M1; M2 with its synthetic target)."""
    if isinstance(params, CalibrateParams):
        return point_server(
            params.server, params.models[0].id, params.method, params.ks[0], draft_model=params.draft_model
        )
    synthetic = None
    if isinstance(params, BenchmarkParams):
        synthetic = SyntheticAcceptance(target_al=m2_target(params)[0], scheme=params.scheme)
    return point_server(
        params.server,
        params.model.id,
        params.method,
        params.k,
        draft_model=params.draft_model,
        synthetic=synthetic,
    )


def runner_launch(launch: Launch, runner: object) -> Launch:
    """``launch`` as the runner starts it: a process runner checks the install and runs no image."""
    if isinstance(runner, ProcessOptions):
        env = runner.framework_env
        return check_install(launch, None if not env else Path(env).expanduser().absolute())
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
    found = FrameworkVersion.parse(_tag(launch.image))
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


def _tag(image: str | None) -> str | None:
    if not image:
        return None
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def planned(step: str, point: str, server: ServerConfig, runner: object) -> PlannedServer:
    """One server as the flow would start it (the recipe's and the install's refusals raised here)."""
    launch = runner_launch(build_launch(server), runner)
    secrets = tuple(dict.fromkeys((*launch.secret_env, *getattr(runner, "secrets", ()))))
    return PlannedServer(step, point, runner_label(runner), launch.provenance(), gate_checks(launch), secrets)


def _m0(params: CalibrateParams) -> list[PlannedServer]:
    thinking = ", ".join(t.value for t in params.thinking)
    out = []
    for model in params.models:
        for k in params.ks:
            server = point_server(params.server, model.id, params.method, k, draft_model=params.draft_model)
            point = f"model {model.id}, {params.method.value} K={k}, thinking {thinking}; real acceptance"
            out.append(planned("m0", point, server, params.placement.runner))
    return out


def _m1(params: GateParams) -> list[PlannedServer]:
    server = first_server(params)
    point = (
        f"model {params.model.id}, {params.method.value} K={params.k}, thinking {params.thinking.value}; "
        f"real acceptance against {params.reference_path}"
    )
    return [planned("m1", point, server, params.placement.runner)]


def _m2(params: BenchmarkParams) -> list[PlannedServer]:
    target, origin = m2_target(params)
    server = first_server(params)
    point = (
        f"model {params.model.id}, {params.method.value} K={params.k}; synthetic target AL {target:.4f} "
        f"({origin}, scheme {params.scheme or 'the framework default'}); concurrencies "
        f"{', '.join(str(c) for c in params.concurrencies)}"
        + (f", each {params.repeats} times" if params.repeats > 1 else "")
    )
    return [planned("m2", point, server, params.placement.runner)]


def unit_params(params: FlowParams) -> tuple[CalibrateParams | GateParams | BenchmarkParams, ...]:
    """The M0, M1 or M2 parameters a flow runs: itself, or a sweep's M1 and M2 of each K in order."""
    if isinstance(params, SweepParams):
        return tuple(p for k in params.ks for p in (gate_for(params, k), benchmark_for(params, k)))
    return (params,)


def plan_of(flow: str, params: FlowParams) -> Plan:
    """The plan of ``flow`` with ``params``: every server, in the order the flow starts them."""
    servers: list[PlannedServer] = []
    for unit in unit_params(params):
        if isinstance(unit, CalibrateParams):
            servers += _m0(unit)
        elif isinstance(unit, GateParams):
            servers += _m1(unit)
        else:
            servers += _m2(unit)
    return Plan(flow, tuple(servers))
