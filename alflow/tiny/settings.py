"""How ``alflow tiny serve`` reads its speculative settings: its own flags, or vLLM's JSON.

The tiny engine drafts by n-gram lookup (vLLM's ``ngram`` method) and forces acceptance with vLLM's
synthetic semantics. Its settings can be given two ways, and the recipe uses the second so that
alflow's vLLM knob path (:mod:`alflow.acceptance.knobs`, :class:`alflow.frameworks.vllm.recipe.VllmRecipe`)
is exercised end to end:

- flags: ``--k``, ``--ngram-min``, ``--ngram-max``, ``--synthetic-al`` or ``--synthetic-rates``;
- vLLM's ``--speculative-config`` JSON: ``method`` (must be ``ngram``), ``num_speculative_tokens``,
  ``prompt_lookup_min``, ``prompt_lookup_max``, ``rejection_sample_method: "synthetic"`` with
  ``synthetic_acceptance_length`` or ``synthetic_acceptance_rates``.

A value given both ways must agree (an error names both). A synthetic AL ``L`` becomes vLLM's
minimum-variance rates ``[1]*floor(L-1) + [frac(L-1)] + [0]*rest`` (DOMAIN.md section 3); explicit
rates are validated (length K, non-increasing, in [0, 1]). K = 0 means no speculation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from alflow.acceptance.synthetic import SyntheticAcceptanceError, SyntheticTarget, VllmScheme
from alflow.errors import InvalidInputError
from alflow.frameworks.vllm.sim import read_vllm_speculative_config

DEFAULT_NGRAM_MIN = 1
DEFAULT_NGRAM_MAX = 4


@dataclass(frozen=True)
class TinySpec:
    """Resolved speculative settings of the tiny engine (``k == 0``: no speculation)."""

    k: int
    ngram_min: int = DEFAULT_NGRAM_MIN
    ngram_max: int = DEFAULT_NGRAM_MAX
    synthetic_rates: tuple[float, ...] | None = None
    synthetic_al: float | None = None

    @property
    def synthetic(self) -> dict[str, Any] | None:
        """The synthetic setting as ``/version`` reports it (None when acceptance is real)."""
        if self.synthetic_rates is None:
            return None
        return {"scheme": "vllm", "al": self.synthetic_al, "rates": list(self.synthetic_rates)}

    def speculative_config(self) -> dict[str, Any] | None:
        """The setting in vLLM's ``--speculative-config`` form (None without speculation)."""
        if self.k == 0:
            return None
        out: dict[str, Any] = {
            "method": "ngram",
            "num_speculative_tokens": self.k,
            "prompt_lookup_min": self.ngram_min,
            "prompt_lookup_max": self.ngram_max,
        }
        if self.synthetic_rates is not None:
            out["rejection_sample_method"] = "synthetic"
            if self.synthetic_al is not None:
                out["synthetic_acceptance_length"] = self.synthetic_al
            else:
                out["synthetic_acceptance_rates"] = list(self.synthetic_rates)
        return out


def _int_key(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"--speculative-config: {key} must be an integer, got {value!r}")
    return value


def _agree(name: str, flag: Any, from_json: Any) -> Any:
    if flag is not None and from_json is not None and flag != from_json:
        raise InvalidInputError(
            f"--{name.replace('_', '-')} {flag} disagrees with --speculative-config's value {from_json}; give one"
        )
    return flag if flag is not None else from_json


def resolve_spec(
    *,
    k: int | None = None,
    ngram_min: int | None = None,
    ngram_max: int | None = None,
    synthetic_al: float | None = None,
    synthetic_rates: tuple[float, ...] | None = None,
    speculative_config: str | None = None,
) -> TinySpec:
    """Combine the flags and vLLM's JSON into one validated :class:`TinySpec` (errors name the input)."""
    if speculative_config is not None:
        found = read_vllm_speculative_config(speculative_config)
        data: dict[str, Any] = json.loads(speculative_config)
        if found.method not in (None, "ngram"):
            raise InvalidInputError(
                f"--speculative-config: method {data.get('method')!r} is not served by the tiny engine; "
                "it drafts by n-gram lookup only (method 'ngram')"
            )
        k = _agree("k", k, found.k)
        ngram_min = _agree("ngram_min", ngram_min, _int_key(data, "prompt_lookup_min"))
        ngram_max = _agree("ngram_max", ngram_max, _int_key(data, "prompt_lookup_max"))
        synthetic_al = _agree("synthetic_al", synthetic_al, found.al)
        synthetic_rates = _agree("synthetic_rates", synthetic_rates, found.rates)
    k = 3 if k is None else k
    lo = DEFAULT_NGRAM_MIN if ngram_min is None else ngram_min
    hi = max(DEFAULT_NGRAM_MAX, lo) if ngram_max is None else ngram_max
    if not 0 <= k <= 16:
        raise InvalidInputError(f"--k {k} must be in [0, 16] (0: no speculation)")
    if lo < 1:
        raise InvalidInputError(f"--ngram-min {lo} must be at least 1")
    if hi < lo:
        raise InvalidInputError(f"--ngram-max {hi} must not be smaller than --ngram-min {lo}")
    if synthetic_al is None and synthetic_rates is None:
        return TinySpec(k=k, ngram_min=lo, ngram_max=hi)
    if k == 0:
        raise InvalidInputError("synthetic acceptance needs speculation: set --k to at least 1")
    try:
        target = SyntheticTarget.of(k, al=synthetic_al, rates=synthetic_rates)
    except SyntheticAcceptanceError as exc:
        raise InvalidInputError(f"synthetic acceptance: {exc}") from None
    return TinySpec(
        k=k,
        ngram_min=lo,
        ngram_max=hi,
        synthetic_rates=VllmScheme().rates(target),
        synthetic_al=target.al,
    )
