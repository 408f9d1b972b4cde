"""User configuration: pydantic models of everything a user of alflow configures, one module per subject.

- :mod:`~alflow.config.base`: :class:`StrictModel`, the base of every model;
- :mod:`~alflow.config.speculative`: the model, sampling, thinking mode, speculative method and K,
  synthetic acceptance, the M1 tolerances;
- :mod:`~alflow.config.server`: the serving engine's configuration;
- :mod:`~alflow.config.runners`: where a server runs (process, docker, external, Slurm);
- :mod:`~alflow.config.workloads`: load shapes and workloads;
- :mod:`~alflow.config.flows`: the flows' parameters (the Prefect UI's forms) and the M0 model catalogue;
- :mod:`~alflow.config.presets`: named server presets (``presets/*.yaml``) and the flows' short forms over them.

Every model is frozen and forbids unknown fields, and every field has a description (it becomes the
Prefect UI form and the ``--help`` of the command line). The package imports nothing of alflow above it:
only the acceptance math (K bounds, schemes), the redaction rules, paths and two client defaults.
Everything public is importable from ``alflow.config`` itself.
"""

from alflow.config.base import StrictModel
from alflow.config.flows import (
    REMOTE_REFERENCES,
    BenchmarkParams,
    CalibrateParams,
    CalibrationCatalogue,
    CalibrationModel,
    DemoParams,
    FanOut,
    GateParams,
    ReferenceVariantChoice,
    ServerPlacement,
    SweepNode,
    SweepParams,
)
from alflow.config.presets import (
    PresetBenchmark,
    PresetCalibrate,
    PresetGate,
    ServerPreset,
    benchmark_params,
    calibrate_params,
    gate_params,
    load_preset,
    preset_names,
    presets_root,
)
from alflow.config.regression import RegressionSettings
from alflow.config.runners import DockerOptions, ExternalServer, ProcessOptions, RunnerOptions, SlurmOptions
from alflow.config.server import (
    DisaggregatedRole,
    Disaggregation,
    Parallelism,
    ServerBase,
    ServerConfig,
    ServerDialect,
    ServerFramework,
    server_config,
)
from alflow.config.speculative import (
    BLOCK_DRAFTERS,
    GateTolerances,
    ModelSpec,
    NumSpecTokens,
    SamplingParams,
    SpecMethod,
    SpeculativeConfig,
    SyntheticAcceptance,
    ThinkingMode,
    ThinkingToggle,
)
from alflow.config.workloads import Gsm8kSettings, LoadConfig, RandomWorkload, SpeedBenchWorkload

__all__ = [
    "BLOCK_DRAFTERS",
    "REMOTE_REFERENCES",
    "BenchmarkParams",
    "CalibrateParams",
    "CalibrationCatalogue",
    "CalibrationModel",
    "DemoParams",
    "DisaggregatedRole",
    "Disaggregation",
    "DockerOptions",
    "ExternalServer",
    "FanOut",
    "GateParams",
    "GateTolerances",
    "Gsm8kSettings",
    "LoadConfig",
    "ModelSpec",
    "NumSpecTokens",
    "Parallelism",
    "PresetBenchmark",
    "PresetCalibrate",
    "PresetGate",
    "ProcessOptions",
    "RandomWorkload",
    "ReferenceVariantChoice",
    "RegressionSettings",
    "RunnerOptions",
    "SamplingParams",
    "ServerBase",
    "ServerConfig",
    "ServerDialect",
    "ServerFramework",
    "ServerPlacement",
    "ServerPreset",
    "SlurmOptions",
    "SpecMethod",
    "SpeculativeConfig",
    "SpeedBenchWorkload",
    "StrictModel",
    "SweepNode",
    "SweepParams",
    "SyntheticAcceptance",
    "ThinkingMode",
    "ThinkingToggle",
    "benchmark_params",
    "calibrate_params",
    "gate_params",
    "load_preset",
    "preset_names",
    "presets_root",
    "server_config",
]
