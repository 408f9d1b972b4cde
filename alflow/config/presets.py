"""Server presets and the flows' short forms: a named base configuration plus the few values a person changes.

A person starting a run from the Prefect UI changes a few things: the server (a named preset), the model,
K (or the Ks of M0), the target AL or the thinking mode, the concurrencies. The flows take those as
top-level parameters, with the full configuration behind an optional advanced ``params``. This module
turns them into the flow's full parameters (:func:`benchmark_params`, :func:`gate_params`,
:func:`calibrate_params`, :func:`sweep_params`), without Prefect:

- the base is ``params`` when given, else the preset's configuration; neither is an error naming both;
- a preset given together with ``params`` replaces its server and placement (run this configuration on
  that server);
- every short-form value that is not None wins over the base: ``model`` sets the model's id (and the
  server's model; a revision pinned for another model is dropped), ``k``, ``target_al`` (the reference
  table is then not read), ``thinking``, ``concurrencies``, ``models`` and ``ks`` (the sweep's ``model`` sets both its M1 and M2 templates).

A preset is a YAML file ``presets/<name>.yaml`` under the project root (:func:`presets_root`:
``$ALFLOW_HOME`` when set, as the deployments' pull step and workers use it, else the current
directory), validated as :class:`ServerPreset`. The flows also read a Prefect Variable
``alflow-preset-<name>`` when no file has that name (that part lives in ``flows/``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.config.base import MAX_CONCURRENCY, StrictModel, check_unique
from alflow.config.flows import (
    BenchmarkParams,
    CalibrateParams,
    GateParams,
    LocalReference,
    ServerPlacement,
    SweepParams,
)
from alflow.config.server import ServerConfig
from alflow.config.speculative import GateTolerances, Method, ModelSpec, SpecMethod, ThinkingMode
from alflow.config.workloads import Gsm8kSettings, LoadConfig, RandomWorkload, SpeedBenchWorkload
from alflow.errors import InvalidInputError
from alflow.util.yamlfile import describe_validation, load_yaml_model, parse_yaml, validate_strict

PRESETS_DIR = "presets"
"""The folder of the preset files under the project root."""

PRESET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A preset's name: lowercase letters, digits, dashes and underscores (a file stem and a Prefect Variable name)."""

VARIABLE_PREFIX = "alflow-preset-"
"""A preset kept as a Prefect Variable is named ``alflow-preset-<name>``."""

P = TypeVar("P", bound=BaseModel)


class PresetGate(StrictModel):
    """What M1 (the eval gate) runs on this preset's server, beside the shared fields."""

    workload: SpeedBenchWorkload = Field(default=SpeedBenchWorkload(), description="Prompts of the AL gate.")
    load: LoadConfig = Field(default=LoadConfig(), description="Load of the AL measurement.")
    tolerances: GateTolerances = Field(default=GateTolerances(), description="AL gate tolerances.")
    gsm8k: Gsm8kSettings = Field(default=Gsm8kSettings(), description="The GSM8K accuracy gate.")


class PresetBenchmark(StrictModel):
    """What M2 (the synthetic benchmark) runs on this preset's server, beside the shared fields."""

    workload: RandomWorkload = Field(default=RandomWorkload(), description="Random-token prompts.")
    concurrencies: tuple[int, ...] = Field(
        (4, 8, 16, 32, 64, 128), min_length=1, description="Concurrency sweep."
    )
    target_al: float | None = Field(
        None,
        ge=1.0,
        le=K_MAX + 1,
        description="Explicit target AL (None: the reference AL from reference_path).",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if any(not 1 <= c <= MAX_CONCURRENCY for c in self.concurrencies):
            raise ValueError(f"concurrencies {self.concurrencies} must all be in [1, {MAX_CONCURRENCY:,}]")
        check_unique(self.concurrencies, "concurrencies")
        return self


class PresetCalibrate(StrictModel):
    """What M0 (calibration) runs on this preset's server, beside the shared fields."""

    ks: tuple[int, ...] = Field((1, 2, 3, 4, 5, 6, 7), min_length=1, description="Ks to calibrate.")
    thinking: tuple[ThinkingMode, ...] = Field(
        (ThinkingMode.ON, ThinkingMode.OFF), min_length=1, description="Thinking modes to calibrate."
    )
    workload: SpeedBenchWorkload = Field(default=SpeedBenchWorkload(), description="Prompts.")
    load: LoadConfig = Field(default=LoadConfig(), description="Load per point.")
    reference_path: LocalReference = Field(
        "references/speed-bench-coding.yaml",
        description="Reference table M0 writes (merged with what it holds).",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_unique(self.ks, "ks")
        check_unique(tuple(t.value for t in self.thinking), "thinking")
        return self


class ServerPreset(StrictModel):
    """A named server and everything a usable M0, M1 or M2 run on it needs besides the short form."""

    description: str = Field(min_length=1, description="What this preset is, in one line.")
    server: ServerConfig = Field(description="The serving engine: framework, image, parallelism, flags.")
    placement: ServerPlacement = Field(
        default=ServerPlacement(), description="Where it runs: runner, GPU host limit, run store."
    )
    model: ModelSpec = Field(description="The model it serves by default, with its sampling.")
    method: Method = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    k: int = Field(3, ge=K_MIN, le=K_MAX, description="Default number of speculative tokens K.")
    thinking: ThinkingMode = Field(
        ThinkingMode.OFF, description="Default thinking mode (M1, and M2's reference)."
    )
    reference_path: LocalReference | None = Field(
        None, description="Reference table of M1's threshold and M2's target AL (None: give target_al)."
    )
    reference_model: str | None = Field(
        None, description="Model name in the reference table (None: the model's id)."
    )
    gate: PresetGate = Field(default=PresetGate(), description="M1's workload, load, tolerances and GSM8K.")
    benchmark: PresetBenchmark = Field(
        default=PresetBenchmark(), description="M2's workload, concurrencies and explicit target."
    )
    calibrate: PresetCalibrate = Field(
        default=PresetCalibrate(), description="M0's Ks, thinking modes, workload, load and table."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.server.model != self.model.id:
            raise ValueError(
                f"server.model {self.server.model!r} differs from model.id {self.model.id!r}: give the same id"
            )
        if self.server.synthetic is not None:
            raise ValueError("a preset's server must not set synthetic: M2 sets the knobs from the target AL")
        return self


# --- finding presets ---------------------------------------------------------------------------------------


def presets_root(environ: Mapping[str, str] | None = None) -> Path:
    """The project root the presets are read under: ``$ALFLOW_HOME`` when set, else the current directory."""
    env = os.environ if environ is None else environ
    home = env.get("ALFLOW_HOME")
    return Path(home) if home else Path.cwd()


def preset_names(root: Path | None = None) -> list[str]:
    """The names of the preset files under ``root`` (sorted; none when there is no ``presets`` folder)."""
    folder = (root or presets_root()) / PRESETS_DIR
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if PRESET_NAME.fullmatch(p.stem))


def check_preset_name(name: str) -> str:
    """``name`` when it is a well-formed preset name, else an error naming the input and the rule."""
    if not PRESET_NAME.fullmatch(name):
        raise InvalidInputError(
            f"preset={name!r} is not a preset name: use lowercase letters, digits, '-' and '_' (at most 64)"
        )
    return name


def preset_path(name: str, root: Path | None = None) -> Path:
    """The file of preset ``name`` under ``root`` (it may not exist)."""
    return (root or presets_root()) / PRESETS_DIR / f"{check_preset_name(name)}.yaml"


def unknown_preset(name: str, root: Path | None = None, *, also: str = "") -> InvalidInputError:
    """The error for a preset name that no file (nor ``also``, e.g. a Prefect Variable) holds."""
    base = root or presets_root()
    known = ", ".join(preset_names(base)) or "none"
    where = f"{base / PRESETS_DIR}/*.yaml" + (f" or {also}" if also else "")
    return InvalidInputError(f"preset={name!r} is not a known preset; known: {known} ({where})")


def load_preset(name: str, root: Path | None = None) -> ServerPreset:
    """Read and validate ``presets/<name>.yaml`` under ``root``; an unknown name lists the known ones."""
    path = preset_path(name, root)
    if not path.is_file():
        raise unknown_preset(name, root)
    return load_yaml_model(path, ServerPreset, what="preset")


def preset_from_data(data: Any, source: str) -> ServerPreset:
    """A preset from a Prefect Variable's value: a JSON object, or YAML text of one; errors name ``source``."""
    if isinstance(data, str):
        data = parse_yaml(data, source)  # the file loader's limits: size, depth, aliases, duplicate keys
    return validate_strict(data, ServerPreset, source=source)


# --- the short forms -----------------------------------------------------------------------------------------


def _validated(model: type[P], data: dict[str, Any], what: str) -> P:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(f"{what}: {describe_validation(exc)}") from None


def _with_model(data: dict[str, Any], model: str | None) -> None:
    """Serve and measure ``model``: the model's id and the server's model (a revision of another model dropped)."""
    if model is None:
        return
    if not model.strip():
        raise InvalidInputError("model='' is empty: give a model id, or leave it empty for the base's model")
    spec = dict(data["model"])
    if spec["id"] != model:
        spec.pop("revision", None)
    spec["id"] = model
    data["model"] = spec
    data["server"] = {**data["server"], "model": model}


def _on_server(data: dict[str, Any], preset: ServerPreset | None, model_id: str) -> None:
    """The preset's server and placement instead of the base's (serving the base's ``model_id``)."""
    if preset is None:
        return
    data["server"] = {**preset.server.model_dump(), "model": model_id}
    data["placement"] = preset.placement.model_dump()


def _no_base(flow: str) -> InvalidInputError:
    return InvalidInputError(
        f"{flow}: no configuration: give preset (a server preset, e.g. sim) or params (the full configuration)"
    )


def _shared(preset: ServerPreset) -> dict[str, Any]:
    """The fields M1 and M2 take from a preset alike."""
    return {
        "model": preset.model.model_dump(),
        "method": preset.method,
        "draft_model": preset.draft_model,
        "k": preset.k,
        "thinking": preset.thinking,
        "server": preset.server.model_dump(),
        "placement": preset.placement.model_dump(),
        "reference_path": preset.reference_path,
        "reference_model": preset.reference_model,
    }


def benchmark_params(
    *,
    preset: ServerPreset | None = None,
    model: str | None = None,
    k: int | None = None,
    target_al: float | None = None,
    concurrencies: Sequence[int] | None = None,
    params: BenchmarkParams | None = None,
) -> BenchmarkParams:
    """M2's full parameters from its short form (see the module docstring for the rules)."""
    if params is not None:
        data = params.model_dump()
        _on_server(data, preset, data["model"]["id"])
    elif preset is not None:
        data = {
            **_shared(preset),
            "workload": preset.benchmark.workload.model_dump(),
            "concurrencies": preset.benchmark.concurrencies,
        }
        if preset.benchmark.target_al is not None:
            data.update(target_al=preset.benchmark.target_al, reference_path=None)
    else:
        raise _no_base("m2-benchmark")
    _with_model(data, model)
    if k is not None:
        data["k"] = k
    if target_al is not None:
        data.update(target_al=target_al, reference_path=None)
    if concurrencies is not None:
        data["concurrencies"] = tuple(concurrencies)
    if data.get("target_al") is None and data.get("reference_path") is None:
        raise InvalidInputError(
            "target_al: the preset names no reference table to take the target AL from: give target_al"
        )
    return _validated(BenchmarkParams, data, "m2-benchmark's parameters")


def gate_params(
    *,
    preset: ServerPreset | None = None,
    model: str | None = None,
    k: int | None = None,
    thinking: ThinkingMode | None = None,
    params: GateParams | None = None,
) -> GateParams:
    """M1's full parameters from its short form (see the module docstring for the rules)."""
    if params is not None:
        data = params.model_dump()
        _on_server(data, preset, data["model"]["id"])
    elif preset is not None:
        if preset.reference_path is None:
            raise InvalidInputError(
                "preset: it names no reference_path, which M1 gates against: give params with a reference_path"
            )
        data = {
            **_shared(preset),
            "workload": preset.gate.workload.model_dump(),
            "load": preset.gate.load.model_dump(),
            "tolerances": preset.gate.tolerances.model_dump(),
            "gsm8k": preset.gate.gsm8k.model_dump(),
        }
    else:
        raise _no_base("m1-gate")
    _with_model(data, model)
    if k is not None:
        data["k"] = k
    if thinking is not None:
        data["thinking"] = thinking
    return _validated(GateParams, data, "m1-gate's parameters")


def calibrate_params(
    *,
    preset: ServerPreset | None = None,
    models: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    params: CalibrateParams | None = None,
) -> CalibrateParams:
    """M0's full parameters from its short form.

    ``models`` are model ids: one already in the base keeps its sampling; another gets the base's first
    model's settings (sampling, reasoning) under its own id.
    """
    if params is not None:
        data = params.model_dump()
        _on_server(data, preset, data["models"][0]["id"])
    elif preset is not None:
        data = {
            "models": (preset.model.model_dump(),),
            "method": preset.method,
            "draft_model": preset.draft_model,
            "ks": preset.calibrate.ks,
            "thinking": preset.calibrate.thinking,
            "server": preset.server.model_dump(),
            "placement": preset.placement.model_dump(),
            "workload": preset.calibrate.workload.model_dump(),
            "load": preset.calibrate.load.model_dump(),
            "reference_path": preset.calibrate.reference_path,
        }
    else:
        raise _no_base("m0-calibrate")
    if models is not None:
        if not models:
            raise InvalidInputError("models=[] is empty: give at least one model id, or leave it empty")
        known = {m["id"]: m for m in data["models"]}
        template = {k: v for k, v in data["models"][0].items() if k not in ("id", "revision")}
        data["models"] = tuple(known.get(m) or {**template, "id": m} for m in models)
        data["server"] = {**data["server"], "model": models[0]}
    if ks is not None:
        data["ks"] = tuple(ks)
    return _validated(CalibrateParams, data, "m0-calibrate's parameters")


def sweep_params(
    *,
    preset: ServerPreset | None = None,
    model: str | None = None,
    ks: Sequence[int] | None = None,
    target_al: float | None = None,
    concurrencies: Sequence[int] | None = None,
    params: SweepParams | None = None,
) -> SweepParams:
    """The sweep's full parameters from its short form (the rules above).

    The base is ``params`` (its M1 and M2 templates) when given, else the preset; every value given
    here wins: ``model`` in both templates, ``ks``, ``target_al`` and ``concurrencies`` in M2's.
    """
    if params is None and preset is None:
        raise _no_base("sweep")
    gate = gate_params(preset=preset, model=model, params=None if params is None else params.gate)
    bench = benchmark_params(
        preset=preset,
        model=model,
        target_al=target_al,
        concurrencies=concurrencies,
        params=None if params is None else params.benchmark,
    )
    data: dict[str, Any] = {} if params is None else params.model_dump()
    data.update(gate=gate.model_dump(), benchmark=bench.model_dump())
    if ks is not None:
        data["ks"] = tuple(ks)
    return _validated(SweepParams, data, "sweep's parameters")
