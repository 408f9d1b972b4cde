"""ATOM's synthetic (forced) acceptance: ``--spec-decode-acceptance-length L`` on its command line.

ATOM (ROCm/ATOM PR #1948, fc31863878, merged 2026-08-20; ``atom/config.py:1093-1146``) resolves the length to the
minimum-variance schedule ``[1]*floor(L-1) + [frac(L-1)] + [0]*rest`` (``acceptance_length_to_rates`` in
``atom/model_ops/rejection_sampler.py``, "the schedule vLLM resolves ``synthetic_acceptance_length`` to") and draws
each position per sequence and step with the conditional rates, as vLLM does: alflow's ``vllm`` scheme is its
distribution. ``--spec-decode-acceptance-rate r`` (PR #1850) is the same curve as the length ``1 + K x r``; alflow
always renders the length. L must lie in [1, K + 1]; both flags are dropped silently without ``--method``
(``arg_utils.py:574-600``), so the recipe always sets the method with them.
"""

from __future__ import annotations

from alflow.acceptance.knobs import DRAWS_NOTE, KnobRequest, SyntheticKnobs, as_length, env_number
from alflow.acceptance.synthetic import SyntheticAcceptanceError, SyntheticTarget, get_scheme

LENGTH_FLAG = "--spec-decode-acceptance-length"
RATE_FLAG = "--spec-decode-acceptance-rate"
SCHEME = "vllm"
"""The minimum-variance schedule drawn per sequence and position (alflow's name for it is vLLM's)."""
FIXED_SEED = (
    "ATOM re-seeds the generator of its synthetic uniforms to 0x5EED + step on every forward, so the accept "
    "pattern repeats across runs and restarts for the same schedule: repeated ATOM points are one draw, not "
    "independent ones (a sweep counts them as one); and its first rejection always emits the target's argmax, at "
    "any temperature (ATOM's synthetic rejection kernel, atom/model_ops/rejection_sampler.py; DOMAIN.md section 10)"
)
"""Why ATOM's repeats of a point share one synthetic draw (the plugin's ``repeated_draws``)."""


class AtomKnobs:
    """ATOM: ``--spec-decode-acceptance-length`` from a target AL, or from rates that are a min-variance schedule."""

    framework = "atom"
    default_scheme = SCHEME

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """The length flag for ``request``; other schemes and non-schedule rates are refused, naming why."""
        scheme = request.scheme or SCHEME
        get_scheme(scheme)
        if scheme != SCHEME:
            raise SyntheticAcceptanceError(
                f"framework 'atom' cannot realise scheme {scheme!r}; it offers: {SCHEME} (the minimum-variance "
                "schedule per sequence and position)"
            )
        target = SyntheticTarget.of(*as_length(request.target(), f"ATOM ({LENGTH_FLAG})"))
        assert target.al is not None
        return SyntheticKnobs(
            "atom",
            target.k,
            SCHEME,
            args=(LENGTH_FLAG, env_number(target.al)),
            warnings=(DRAWS_NOTE + FIXED_SEED,),
            distribution=get_scheme(SCHEME).distribution(target),
        )
