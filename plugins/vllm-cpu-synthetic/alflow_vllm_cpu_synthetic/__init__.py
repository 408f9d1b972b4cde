"""alflow's vLLM plugin: synthetic acceptance on vLLM's CPU build.

vLLM 0.32.0's CPU platform replaces its Triton kernels with C++ fallbacks
(``CpuPlatform.register_triton_kernel_overrides``, ``vllm/platforms/cpu.py`` lines 669-721, through
``vllm.triton_utils.dispatcher.register_kernels``). Its two rejection-sampling fallbacks
(``vllm/utils/cpu_triton_utils.py`` lines 313-387) assert "Synthetic acceptance not supported with CPU
sampling": synthetic mode is "not yet implemented in the C++ CPU kernel". This plugin registers, through the
same ``register_kernels`` and right after the platform's own registration, CPU ports of those two kernels
that honour ``SYNTHETIC_MODE`` exactly as the Triton kernels do (:mod:`alflow_vllm_cpu_synthetic.kernels`)
and hand every other call to vLLM's C++ fallbacks unchanged.

It is a ``vllm.general_plugins`` entry point: vLLM calls :func:`register` in the API server, the engine
core and every worker (``vllm/plugins/__init__.py`` ``load_general_plugins``;
``vllm/v1/worker/worker_base.py`` lines 274-282 load plugins, then register the platform's kernel
overrides). It does nothing unless the environment sets ``ALFLOW_VLLM_CPU_SYNTHETIC=1`` (alflow's vLLM
recipe sets it only for a synthetic-acceptance launch on the CPU build), so real acceptance never runs
through it. When enabled it refuses any vLLM other than the one its port was read from.
"""

from __future__ import annotations

import logging
import os

__version__ = "0.1.0"
PINNED_VLLM = "0.32.0"
"""The vLLM release whose Triton kernels this port transcribes (``vllm/v1/sample/rejection_sampler.py``)."""
ENABLE_ENV = "ALFLOW_VLLM_CPU_SYNTHETIC"
"""Set to ``1`` to enable the port (alflow's vLLM recipe does, for synthetic acceptance on the CPU build)."""
GREEDY_KERNEL = "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"
RANDOM_KERNEL = "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"
LABEL = f"synthetic sampling by alflow's port of vLLM's kernel rule (alflow-vllm-cpu-synthetic {__version__})"
"""What a server using the port says it is (logged at registration)."""

log = logging.getLogger(__name__)
_HOOKED = "_alflow_cpu_synthetic_hooked"


class VersionMismatchError(RuntimeError):
    """The installed vLLM is not the release the port was read from."""


def release_of(version: str) -> str:
    """The release part of a vLLM version string (``0.32.0+cpu`` -> ``0.32.0``)."""
    return version.split("+", 1)[0].strip()


def check_version(installed: str) -> None:
    """Refuse a vLLM other than :data:`PINNED_VLLM`, naming both."""
    if release_of(installed) != PINNED_VLLM:
        raise VersionMismatchError(
            f"alflow-vllm-cpu-synthetic {__version__} ports the rejection kernels of vLLM {PINNED_VLLM}, but this "
            f"is vLLM {installed}: refusing to load (the Triton rule may differ in this release). Unset "
            f"{ENABLE_ENV}, install vLLM {PINNED_VLLM} (bash scripts/setup.sh --vllm), or port the kernels of "
            f"vLLM {installed}"
        )


def enabled() -> bool:
    """True when the environment asks for the port (``ALFLOW_VLLM_CPU_SYNTHETIC=1``)."""
    return os.environ.get(ENABLE_ENV, "") == "1"


def register() -> None:
    """Entry point called by vLLM: when enabled, hook the CPU platform's kernel registration (idempotent)."""
    if not enabled():
        log.debug("%s is not 1: alflow's synthetic CPU port stays off", ENABLE_ENV)
        return
    import vllm
    from vllm.platforms.cpu import CpuPlatform

    check_version(str(vllm.__version__))
    if getattr(CpuPlatform, _HOOKED, False):
        return
    original = CpuPlatform.register_triton_kernel_overrides  # bound to CpuPlatform

    def register_triton_kernel_overrides(cls: type) -> None:  # noqa: ARG001 (a classmethod's class)
        original()
        register_port()

    CpuPlatform.register_triton_kernel_overrides = classmethod(register_triton_kernel_overrides)  # type: ignore[method-assign,assignment]
    setattr(CpuPlatform, _HOOKED, True)


def register_port() -> bool:
    """Register the two ported kernels with vLLM's dispatcher; False where Triton runs them natively."""
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        # a Triton with a CPU backend runs vLLM's own kernels, synthetic mode included: nothing to port
        log.info("Triton runs vLLM's rejection kernels on this CPU: alflow's synthetic port not registered")
        return False
    from vllm.triton_utils.dispatcher import register_kernels
    from vllm.utils import cpu_triton_utils

    from alflow_vllm_cpu_synthetic.kernels import make_greedy, make_random

    register_kernels(
        {
            GREEDY_KERNEL: make_greedy(cpu_triton_utils._rejection_greedy_sample_kernel_impl),
            RANDOM_KERNEL: make_random(cpu_triton_utils._rejection_random_sample_kernel_impl),
        }
    )
    from vllm.logger import init_logger

    # vLLM configures its own logger tree ("vllm"): a child of it reaches the server log in vLLM's format
    init_logger("vllm.alflow_cpu_synthetic").info("vLLM %s on CPU: %s", PINNED_VLLM, LABEL)
    return True
