"""ATOM: ``python -m atom.entrypoints.openai_server --model M --server-port P ...`` on ROCm GPUs.

From ROCm/ATOM's source at ffdf3bb5dd (main, 2026-08-22):

- Entry point ``atom/entrypoints/openai_server.py`` (its default server, ``atom.entrypoints.openai.api_server``).
  HTTP port ``--server-port`` (default 8000; ``--port``, default 8006, is the engines' internal port:
  ``api_server.py:2016-2022``, ``arg_utils.py:157-162``), ``--host``, ``--served-model-name``.
- Parallelism ``-tp``, ``-pp``, ``-dp`` (data-parallel ranks are GPUs of their own), ``--enable-expert-parallel``;
  ``--max-model-len``; prefix caching is on by default and switched off with ``--no-enable_prefix_caching``
  (``arg_utils.py:151-155``, a ``BooleanOptionalAction``).
- Speculation ``--method {mtp,eagle3,dspark} --num-speculative-tokens K`` (``arg_utils.py:286-298``); EAGLE3 needs
  ``--draft-model`` and MTP refuses one (``arg_utils.py:580-586``). Without ``--method`` the synthetic flags are
  dropped silently (``arg_utils.py:574-600``).
- Synthetic acceptance: ``--spec-decode-acceptance-length`` (:mod:`.knobs`), since PR #1948 (fc31863878, merged
  2026-08-20 08:19 UTC). No release tag holds it (the newest, v0.1.6-rc0, is from 2026-07-02), and the server has
  no version endpoint (``/version`` is not a route; ``atom.__version__`` does not exist): the gate reads the nightly
  image's build stamp (``rocm/atom-dev:nightly_YYYYMMDDHHMM``, ``.github/workflows/docker-release.yaml``) or a
  release tag, and warns for a tag without either; the pre-flight then audits the knob on the live server.
- ``GET /health`` answers ``{"status": "ok"}`` only once the engines are up (uvicorn starts after them); Prometheus
  text at ``/metrics`` (:mod:`.metrics`).
- Multi-node serving is not wired here: ``nodes > 1`` is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alflow.acceptance.knobs import SyntheticKnobs
from alflow.config import ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.atom.knobs import LENGTH_FLAG, RATE_FLAG
from alflow.frameworks.atom.metrics import METRICS_PATH
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipe_kit import (
    LaunchRecipe,
    bind_host_of,
    check_extra_args,
    flag_value,
    gpus_per_node,
    image_tag,
    merge_env,
    method_name,
    parallel_args,
    render_synthetic,
    resolve_port,
)
from alflow.frameworks.sim_source import SimSource
from alflow.frameworks.versions import CapabilityError, FrameworkVersion, version
from alflow.util.rows import dump_row

ATOM_IMAGE = "rocm/atom:latest"
ATOM_MODULE = "atom.entrypoints.openai_server"
ATOM_METHODS = {SpecMethod.MTP: "mtp", SpecMethod.EAGLE3: "eagle3", SpecMethod.DSPARK: "dspark"}
"""alflow's methods ATOM has (``--method`` choices, ``arg_utils.py:286-292``)."""
ATOM_PARALLEL_FLAGS = ("-tp", "-pp", "-dp", "--enable-expert-parallel")
ATOM_MANAGED_FLAGS = frozenset(
    {
        "--model",
        "--served-model-name",
        "--host",
        "--server-port",
        *ATOM_PARALLEL_FLAGS,
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--max-model-len",
        "--method",
        "--num-speculative-tokens",
        "--draft-model",
        "--enable_prefix_caching",
        "--no-enable_prefix_caching",
        LENGTH_FLAG,
        RATE_FLAG,
    }
)
"""Flags the recipe sets from the config (``extra_args`` may not repeat them)."""
SYNTHETIC_SINCE = "ROCm/ATOM PR #1948 (fc31863878, merged 2026-08-20)"
SYNTHETIC_BUILD = "202608200819"
"""The first nightly build stamp (``nightly_YYYYMMDDHHMM``, UTC) that can hold PR #1948."""
NEWEST_TAG_WITHOUT = version("0.1.6")
"""The newest ATOM release tag (v0.1.6-rc0, 2026-07-02): no tag up to it holds the synthetic length flag."""
_NIGHTLY = re.compile(r"(?:^|[-_])nightly_(?P<stamp>\d{12})(?:$|[-_])")


def synthetic_gate(image: str | None) -> tuple[str, ...]:
    """Refuse an ATOM image too old for ``--spec-decode-acceptance-length``; warnings where its age is unknown."""
    tag = image_tag(image)
    flag = f"{LENGTH_FLAG} ({SYNTHETIC_SINCE})"
    if tag is not None:
        nightly = _NIGHTLY.search(tag)
        if nightly is not None:
            if nightly["stamp"] < SYNTHETIC_BUILD:
                raise CapabilityError(
                    f"ATOM image {image!r} was built at {nightly['stamp']} UTC, before {flag}: ATOM refuses the "
                    f"unknown flag at start. Use a nightly built after {SYNTHETIC_BUILD} (rocm/atom-dev:latest)"
                )
            return ()
        found = FrameworkVersion.parse(tag)
        if found is not None and found.release <= NEWEST_TAG_WITHOUT.release:
            raise CapabilityError(
                f"ATOM image {image!r} is release {found}, and no ATOM release up to v0.1.6 has {flag}: ATOM refuses "
                "the unknown flag at start. Use a nightly built after 2026-08-20 (rocm/atom-dev:nightly_YYYYMMDDHHMM)"
            )
    return (
        f"ATOM version unknown (image {image!r}): synthetic acceptance needs {flag}; ATOM has no version endpoint, "
        "so alflow cannot check the live server either. Pin a nightly tag (rocm/atom-dev:nightly_YYYYMMDDHHMM) to "
        "have this checked; the pre-flight audit still catches a knob the server ignores",
    )


@dataclass(frozen=True)
class AtomRecipe(LaunchRecipe):
    """The ATOM recipe."""

    framework: str = "atom"
    default_image: str | None = ATOM_IMAGE
    metrics_path: str = METRICS_PATH

    def speculative_args(self, config: ServerConfig) -> tuple[tuple[str, ...], SyntheticKnobs | None]:
        """``--method M --num-speculative-tokens K [--draft-model D]`` and the synthetic knobs (both empty: off)."""
        spec = config.speculative
        knobs = render_synthetic(config, self.framework)
        if spec is None:
            return (), knobs
        method = method_name("ATOM", ATOM_METHODS, spec.method, "--method, atom/model_engine/arg_utils.py")
        args = ["--method", method, "--num-speculative-tokens", str(spec.k)]
        if spec.method is SpecMethod.EAGLE3:
            args += ["--draft-model", str(spec.draft_model)]
        elif spec.draft_model:
            raise RecipeError(f"ATOM's {method} takes no draft_model (--draft-model is for eagle3 only)")
        lookup = (spec.prompt_lookup_min, spec.prompt_lookup_max)
        if lookup != (None, None) or spec.rejection_sample_method not in (None, "standard"):
            raise RecipeError(
                "ATOM has no n-gram lookup or alternative rejection sampling: leave prompt_lookup_* and "
                "rejection_sample_method unset"
            )
        return (*args, *(knobs.args if knobs is not None else ())), knobs

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Likely causes of a failed pre-flight on ATOM."""
        del config
        return (
            f"an ATOM built before {SYNTHETIC_SINCE} lacks {LENGTH_FLAG}",
            "the speculative flags did not reach the server: without --method ATOM drops the synthetic flag silently",
        )

    def build(self, config: ServerConfig) -> Launch:
        """``python -m atom.entrypoints.openai_server`` with speculation, parallelism and prefix caching off."""
        if config.nodes > 1:
            raise RecipeError(
                f"nodes={config.nodes}: multi-node ATOM is not wired into alflow; start it yourself and attach with "
                "the external runner (dialect atom)"
            )
        if config.revision:
            raise RecipeError("ATOM has no --revision: put the revision's local path in model instead")
        check_extra_args(self.framework, config.extra_args, ATOM_MANAGED_FLAGS)
        par = config.parallelism
        if par.ep > 1 and par.ep != par.tp * par.dp:
            raise RecipeError(
                f"ATOM's expert parallelism is a switch over TP x DP = {par.tp * par.dp} ranks; parallelism.ep="
                f"{par.ep} cannot be honoured (set ep to {par.tp * par.dp} for on, or 1 for off)"
            )
        spec_args, knobs = self.speculative_args(config)
        image = config.image or self.default_image
        warnings = (synthetic_gate(image) if knobs is not None else ()) + (knobs.warnings if knobs else ())
        port = resolve_port(config)
        argv = ["python", "-m", ATOM_MODULE, "--model", config.model, "--served-model-name", config.model]
        argv += ["--host", bind_host_of(config), "--server-port", str(port)]
        argv += parallel_args(par, *ATOM_PARALLEL_FLAGS, ep_switch=True)
        argv += flag_value("--max-model-len", config.max_model_len)
        argv.append(
            "--enable_prefix_caching" if config.enable_prefix_caching else "--no-enable_prefix_caching"
        )
        argv += [*spec_args, *config.extra_args]
        return self.launch(
            config,
            argv,
            port,
            env=merge_env({}, config.extra_env),
            warnings=warnings,
            synthetic=None if knobs is None else dump_row(knobs),
            gpus_per_node=gpus_per_node(config, par, 1),
            version_paths=(),
        )

    def sim_source(self, config: ServerConfig) -> SimSource:
        """For the simulator in the ATOM dialect: K and the synthetic flag as ATOM takes them.

        The method goes as the simulator's own ``--method``.
        """
        _, knobs = self.speculative_args(config)  # the same refusals as a launch
        spec = config.speculative
        args = () if spec is None else ("--num-speculative-tokens", str(spec.k))
        return SimSource(
            args=args + (knobs.args if knobs is not None else ()),
            warnings=knobs.warnings if knobs else (),
            synthetic=dump_row(knobs) if knobs else None,
            version_paths=(),
        )
