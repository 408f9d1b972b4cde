"""Synthetic-acceptance knobs per framework: what to pass a server so it realises a target.

One renderer class per framework: a framework plugin's ``knobs`` (:mod:`alflow.plugins`; vLLM's, SGLang's and
TensorRT-LLM's are here, a plugin may bring its own); a recipe asks the framework's renderer and never branches on
the framework name itself. Each rendering carries the exact
distribution the framework will produce (through its scheme), and any warning a reviewer of the run
should see.

- vLLM: a fragment of ``--speculative-config``: ``"rejection_sample_method": "synthetic"`` and
  exactly one of ``synthetic_acceptance_length`` or ``synthetic_acceptance_rates``.
- SGLang: ``SGLANG_SIMULATE_ACC_LEN=L``, ``SGLANG_SIMULATE_ACC_METHOD=match-expected`` and
  ``SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token`` by default (the token-mode variable is read
  only from v0.5.16; the recipe checks the image). ``multinomial`` is allowed with a warning: it is
  biased near the bounds.
- TensorRT-LLM: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS = L - 1`` (it counts draft tokens).
  The two-model path (a separate drafter: draft_model, ngram, or eagle3 in two-model mode) parses
  the value as an integer and turns the feature off for a fractional one: refused here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from alflow.acceptance.synthetic import (
    AcceptanceDistribution,
    SyntheticAcceptanceError,
    SyntheticTarget,
    get_scheme,
    min_variance_al,
)
from alflow.plugins import frameworks

SGLANG_LEN_ENV = "SGLANG_SIMULATE_ACC_LEN"
SGLANG_METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"
SGLANG_TOKEN_MODE_ENV = "SGLANG_SIMULATE_ACC_TOKEN_MODE"  # noqa: S105 (not a secret)
SGLANG_TOKEN_MODE = "real-draft-token"  # noqa: S105 (not a secret)
TRTLLM_ENV = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"
TWO_MODEL_METHODS = frozenset({"draft_model", "ngram"})


@dataclass(frozen=True)
class KnobRequest:
    """What a recipe asks for: K, a target (AL or rates), and optional framework details.

    ``scheme`` overrides the framework's default scheme where the framework offers a choice
    (SGLang: ``sglang-multinomial``). ``method`` and ``two_model`` tell TensorRT-LLM whether the
    two-model path (integer values only) is in use; ``two_model=None`` derives it from the method.
    """

    k: int
    al: float | None = None
    rates: tuple[float, ...] | None = None
    scheme: str | None = None
    method: str | None = None
    two_model: bool | None = None

    def target(self) -> SyntheticTarget:
        """The validated target."""
        return SyntheticTarget.of(self.k, al=self.al, rates=self.rates)


@dataclass(frozen=True)
class SyntheticKnobs:
    """A rendered setting for one framework, with the distribution it will produce."""

    framework: str
    k: int
    scheme: str
    env: dict[str, str] = field(default_factory=dict)
    speculative_config: dict[str, object] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    """Command-line arguments that carry the knobs (ATOM's ``--spec-decode-acceptance-length``)."""
    warnings: tuple[str, ...] = ()
    distribution: AcceptanceDistribution | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: the knobs plus the expected distribution."""
        out: dict[str, object] = {
            "framework": self.framework,
            "k": self.k,
            "scheme": self.scheme,
            "env": dict(self.env),
            "speculative_config": dict(self.speculative_config),
            "warnings": list(self.warnings),
        }
        if self.args:
            out["args"] = list(self.args)
        if self.distribution is not None:
            dist = self.distribution.to_dict()
            out["expected"] = {
                key: dist[key] for key in ("mean_al", "bias", "variance", "granularity", "pmf")
            }
            out["rates"] = dist["per_position_rates"]
        return out


class KnobRenderer(Protocol):
    """Turns a :class:`KnobRequest` into one framework's synthetic-acceptance setting."""

    @property
    def framework(self) -> str:
        """The framework this renderer serves."""
        ...

    @property
    def default_scheme(self) -> str:
        """The scheme the framework uses unless asked otherwise."""
        ...

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """The setting for ``request``; raises a clear error when the framework cannot honour it."""
        ...


def _num(x: float) -> float | int:
    """A number as the shortest JSON value: 2 for 2.0, 1.78 for 1.7799999999999998."""
    r = round(x, 12) + 0.0
    return int(r) if r.is_integer() else r


def _text(x: float) -> str:
    """A number as environment-variable text: '1.78', '2'."""
    return json.dumps(_num(x))


@dataclass(frozen=True)
class VllmKnobs:
    """vLLM: the synthetic keys of ``--speculative-config``."""

    framework: str = "vllm"
    default_scheme: str = "vllm"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """``synthetic_acceptance_length`` for a target AL, ``synthetic_acceptance_rates`` for rates."""
        _only_scheme(self, request, ("vllm",))
        target = request.target()
        fragment: dict[str, object] = {"rejection_sample_method": "synthetic"}
        if target.al is not None:
            fragment["synthetic_acceptance_length"] = _num(target.al)
        else:
            assert target.rates is not None
            fragment["synthetic_acceptance_rates"] = [_num(r) for r in target.rates]
        return SyntheticKnobs(
            "vllm",
            target.k,
            "vllm",
            speculative_config=fragment,
            distribution=get_scheme("vllm").distribution(target),
        )


@dataclass(frozen=True)
class SglangKnobs:
    """SGLang: the ``SGLANG_SIMULATE_ACC_*`` environment variables."""

    framework: str = "sglang"
    default_scheme: str = "sglang-match-expected"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """match-expected and real-draft-token by default; multinomial only with a bias warning."""
        scheme = _only_scheme(self, request, ("sglang-match-expected", "sglang-multinomial"))
        target = request.target()
        if target.rates is not None:
            al = min_variance_al(target.rates)
            if al is None:
                raise SyntheticAcceptanceError(
                    f"SGLang takes one acceptance length, not per-position rates; rates "
                    f"{list(target.rates)} are not a minimum-variance schedule, so no SGLANG_SIMULATE_ACC_LEN "
                    "reproduces them"
                )
            target = SyntheticTarget.of(target.k, al=al)
        assert target.al is not None
        dist = get_scheme(scheme).distribution(target)
        warnings: list[str] = []
        method = "match-expected"
        if scheme == "sglang-multinomial":
            method = "multinomial"
            warnings.append(
                f"SGLang multinomial draws round(clamp(Normal(L, 1), 1, K+1)): for L={_text(target.al)}, "
                f"K={target.k} the mean AL is {dist.mean:.4f}, not {_text(target.al)} "
                f"(bias {dist.bias:+.4f}); use match-expected for a fair benchmark"
            )
        warnings.append(
            "SGLang draws one accept length per verify step for the whole batch: the same mean as a "
            "per-request draw, but batch-level variance does not average out"
        )
        env = {
            SGLANG_LEN_ENV: _text(target.al),
            SGLANG_METHOD_ENV: method,
            SGLANG_TOKEN_MODE_ENV: SGLANG_TOKEN_MODE,
        }
        return SyntheticKnobs(
            "sglang", target.k, scheme, env=env, warnings=tuple(warnings), distribution=dist
        )


@dataclass(frozen=True)
class TrtllmKnobs:
    """TensorRT-LLM: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` = AL - 1."""

    framework: str = "trtllm"
    default_scheme: str = "trtllm"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """The draft-token count ``L - 1``; a fractional value on the two-model path is an error."""
        _only_scheme(self, request, ("trtllm",))
        target = request.target()
        if target.rates is not None:
            al = min_variance_al(target.rates)
            if al is None:
                raise SyntheticAcceptanceError(
                    f"TensorRT-LLM takes one accepted-draft count, not per-position rates; rates "
                    f"{list(target.rates)} are not a minimum-variance schedule"
                )
            target = SyntheticTarget.of(target.k, al=al)
        assert target.al is not None
        value = round(target.al - 1.0, 12) + 0.0
        if value == 0.0:
            raise SyntheticAcceptanceError(
                f"TensorRT-LLM cannot force AL 1: {TRTLLM_ENV} counts accepted draft tokens (AL - 1 = 0 here), "
                "and TensorRT-LLM reads 0 as 'off' (`if force_num_accepted_tokens != 0`), so the run would measure "
                "real acceptance and call it synthetic. Use a target AL above 1 (e.g. 1.01 on the one-model "
                "path), or benchmark the server with speculative decoding off for the no-acceptance baseline"
            )
        two_model = (
            request.two_model if request.two_model is not None else request.method in TWO_MODEL_METHODS
        )
        if two_model and not value.is_integer():
            path = ", ".join(
                part
                for part in (
                    f"method {request.method}" if request.method else "",
                    "two-model mode requested" if request.two_model else "",
                )
                if part
            )
            raise SyntheticAcceptanceError(
                f"TensorRT-LLM's two-model path ({path}) parses {TRTLLM_ENV} as an integer: the value "
                f"{_text(value)} (AL {_text(target.al)} - 1) would log a warning and switch synthetic "
                f"acceptance off. Use a whole AL (1..{target.k + 1}) or a one-model method (mtp, eagle3 one-model)"
            )
        return SyntheticKnobs(
            "trtllm",
            target.k,
            "trtllm",
            env={TRTLLM_ENV: _text(value)},
            distribution=get_scheme("trtllm").distribution(target),
        )


def _only_scheme(renderer: KnobRenderer, request: KnobRequest, allowed: Sequence[str]) -> str:
    scheme = request.scheme or renderer.default_scheme
    get_scheme(scheme)
    if scheme not in allowed:
        raise SyntheticAcceptanceError(
            f"framework {renderer.framework!r} cannot realise scheme {scheme!r}; it offers: {', '.join(allowed)}"
        )
    return scheme


def get_renderer(framework: str) -> KnobRenderer:
    """The knob renderer of ``framework``, with an error listing the known frameworks."""
    renderers = {f.name: f.knobs for f in frameworks() if f.knobs is not None}
    try:
        return renderers[framework]
    except KeyError:
        raise SyntheticAcceptanceError(
            f"unknown framework {framework!r}; known: {', '.join(renderers)}"
        ) from None


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
    return get_renderer(framework).render(request)
