"""The tiny CPU engine: ``python -m alflow.tiny serve`` (a real small model, real n-gram drafting).

- The speculative config reaches the server in vLLM's form: the recipe renders
  ``--speculative-config`` JSON with :class:`~alflow.frameworks.vllm.recipe.VllmRecipe`'s own code (method,
  ``num_speculative_tokens``, ``prompt_lookup_min/max`` and the synthetic knobs of
  :mod:`alflow.acceptance.knobs`), so the knob path a vLLM server gets is the one exercised here.
  Metrics are vLLM's dialect at ``/metrics``; health at ``/health``.
- Only method ``ngram`` (the engine drafts by prompt lookup); no parallelism, one node, no prefix
  cache, no revision: each is refused with the reason.
- ``model``: a path ending in ``.gguf`` is loaded (``--model``) and served under that name; any other
  name serves the bundled Gemma 3 270M base model (the ``alflow[tiny]`` extra) under that name.
- ``max_model_len`` becomes the engine's context size (``--n-ctx``; default 2048).
- The interpreter is the one running alflow (``sys.executable``), which must have the ``alflow[tiny]``
  extra. For the docker runner the recipe names the local base image (:mod:`alflow_infra.images`): it
  bind-mounts the interpreter, its virtual environment and the project read-only, so the same argv
  runs inside it (the bundled model is assembled into the container's writable ``/tmp``).

Numbers from this engine are real measurements of a tiny model on CPU: they are not simulated, but
every run says "tiny CPU engine" (:data:`alflow.config.ENGINE_NOTES`), never a GPU server.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from alflow.config import ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipe_kit import LaunchRecipe, bind_host_of, check_extra_args, merge_env, resolve_port
from alflow.frameworks.sim.recipe import SIM_IMAGE
from alflow.frameworks.vllm.names import VLLM_METRICS_PATH
from alflow.frameworks.vllm.recipe import VllmRecipe

TINY_MANAGED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--model",
        "--served-model-name",
        "--k",
        "--ngram-min",
        "--ngram-max",
        "--speculative-config",
        "--synthetic-al",
        "--synthetic-rates",
        "--n-ctx",
    }
)
"""Flags the tiny recipe sets from the config (``--threads``, ``--seed``, ``--log-level`` are free)."""


@dataclass(frozen=True)
class TinyRecipe(LaunchRecipe):
    """The tiny CPU engine's recipe."""

    framework: str = "tiny"
    default_image: str | None = SIM_IMAGE
    process_image_label: bool = True
    """A process-run tiny engine is the program its image (the sim's) holds: the image name stays the run's label."""
    python: str = field(default_factory=lambda: sys.executable)
    metrics_path: str = VLLM_METRICS_PATH

    def build(self, config: ServerConfig) -> Launch:
        """``python -m alflow.tiny serve`` with vLLM's ``--speculative-config`` (method ngram)."""
        spec = config.speculative
        if spec is not None and spec.method is not SpecMethod.NGRAM:
            raise RecipeError(
                f"the tiny engine drafts by n-gram lookup only: speculative.method must be 'ngram', "
                f"not {spec.method.value!r}"
            )
        par = config.parallelism
        if (par.tp, par.pp, par.dp, par.ep) != (1, 1, 1, 1) or config.nodes != 1:
            raise RecipeError(
                "the tiny engine runs one model copy on one host's CPU: parallelism sizes and nodes must be 1"
            )
        if config.enable_prefix_caching:
            raise RecipeError("the tiny engine has no prefix cache: set enable_prefix_caching to false")
        if config.revision:
            raise RecipeError(
                f"revision={config.revision!r} cannot be honoured: the tiny engine loads a GGUF file "
                "(give its path as the model) or the bundled model"
            )
        check_extra_args(self.framework, config.extra_args, TINY_MANAGED_FLAGS)
        spec_json, warnings, synthetic = VllmRecipe().speculative_config(config)
        port = resolve_port(config)
        argv = [
            self.python,
            "-m",
            "alflow.tiny",
            "serve",
            "--host",
            bind_host_of(config),
            "--port",
            str(port),
        ]
        argv += ["--served-model-name", config.model]
        if config.model.endswith(".gguf"):
            argv += ["--model", config.model]
        if spec_json is None:
            argv += ["--k", "0"]
        else:
            argv += ["--speculative-config", json.dumps(spec_json, separators=(",", ":"))]
        if config.max_model_len is not None:
            argv += ["--n-ctx", str(config.max_model_len)]
        argv += config.extra_args
        return self.launch(
            config,
            argv,
            port,
            dialect="vllm",
            env={"PYTHONUNBUFFERED": "1", **merge_env({}, config.extra_env)},
            warnings=warnings,
            synthetic=synthetic,
        )
