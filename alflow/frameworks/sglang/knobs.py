"""SGLang's synthetic-acceptance knobs.

``SGLANG_SIMULATE_ACC_LEN=L``, ``SGLANG_SIMULATE_ACC_METHOD=match-expected`` and
``SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token`` by default (the token-mode variable is read
only from v0.5.16; the recipe checks the image). ``multinomial`` is allowed with a warning: it is
biased near the bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from alflow.acceptance.knobs import KnobRequest, SyntheticKnobs, as_length, env_number, only_scheme
from alflow.acceptance.synthetic import (
    SyntheticTarget,
    get_scheme,
)

SGLANG_LEN_ENV = "SGLANG_SIMULATE_ACC_LEN"
SGLANG_METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"
SGLANG_TOKEN_MODE_ENV = "SGLANG_SIMULATE_ACC_TOKEN_MODE"  # noqa: S105 (not a secret)
SGLANG_TOKEN_MODE = "real-draft-token"  # noqa: S105 (not a secret)


@dataclass(frozen=True)
class SglangKnobs:
    """SGLang: the ``SGLANG_SIMULATE_ACC_*`` environment variables."""

    framework: str = "sglang"
    default_scheme: str = "sglang-match-expected"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """match-expected and real-draft-token by default; multinomial only with a bias warning."""
        scheme = only_scheme(self, request, ("sglang-match-expected", "sglang-multinomial"))
        target = SyntheticTarget.of(*as_length(request.target(), f"SGLang ({SGLANG_LEN_ENV})"))
        assert target.al is not None
        dist = get_scheme(scheme).distribution(target)
        warnings: list[str] = []
        method = "match-expected"
        if scheme == "sglang-multinomial":
            method = "multinomial"
            warnings.append(
                f"SGLang multinomial draws round(clamp(Normal(L, 1), 1, K+1)): for L={env_number(target.al)}, "
                f"K={target.k} the mean AL is {dist.mean:.4f}, not {env_number(target.al)} "
                f"(bias {dist.bias:+.4f}); use match-expected for a fair benchmark"
            )
        warnings.append(
            "SGLang draws one accept length per verify step for the whole batch: the same mean as a "
            "per-request draw, but batch-level variance does not average out"
        )
        env = {
            SGLANG_LEN_ENV: env_number(target.al),
            SGLANG_METHOD_ENV: method,
            SGLANG_TOKEN_MODE_ENV: SGLANG_TOKEN_MODE,
        }
        return SyntheticKnobs(
            "sglang", target.k, scheme, env=env, warnings=tuple(warnings), distribution=dist
        )
