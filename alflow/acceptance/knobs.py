"""Synthetic-acceptance knobs per framework: what to pass a server so it realises a target.

The request, the rendering and the renderer protocol; each framework plugin's ``knobs`` is its renderer, in its
folder (``alflow/frameworks/<name>/knobs.py``), found through the registry (``render_knobs`` in
:mod:`alflow.frameworks.recipe_kit`). A recipe asks its framework's renderer and never branches on the framework name itself. Each rendering carries the exact
distribution the framework will produce (through its scheme), and any warning a reviewer of the run should see.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from alflow.acceptance.synthetic import (
    AcceptanceDistribution,
    SyntheticAcceptanceError,
    SyntheticTarget,
    get_scheme,
    min_variance_al,
)


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


DRAWS_NOTE = "Synthetic draws: "
"""The start of a knob warning about how the framework draws its synthetic acceptance (a fixed seed, a forced
correction token): every report of the run states it (``alflow.reports.content.base``)."""


@dataclass(frozen=True)
class SyntheticKnobs:
    """A rendered setting for one framework, with the distribution it will produce.

    Stored (the recipe's ``synthetic``) as pydantic serializes it: ``args`` only where there are some, and in place
    of the distribution its ``expected`` figures and per-position ``rates``.
    """

    framework: str
    k: int
    scheme: str
    env: dict[str, str] = field(default_factory=dict)
    speculative_config: dict[str, object] = field(default_factory=dict)
    args: Annotated[tuple[str, ...], Field(exclude_if=lambda args: not args)] = ()
    """Command-line arguments that carry the knobs (ATOM's ``--spec-decode-acceptance-length``)."""
    warnings: tuple[str, ...] = ()
    distribution: AcceptanceDistribution | None = None

    @model_serializer(mode="wrap")
    def _stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        row: dict[str, Any] = handler(self)
        dist = row.pop("distribution")
        if dist is not None:
            row["expected"] = {
                key: dist[key] for key in ("mean_al", "bias", "variance", "granularity", "pmf")
            }
            row["rates"] = dist["per_position_rates"]
        return row


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


def json_number(x: float) -> float | int:
    """A number as the shortest JSON value: 2 for 2.0, 1.78 for 1.7799999999999998."""
    r = round(x, 12) + 0.0
    return int(r) if r.is_integer() else r


def env_number(x: float) -> str:
    """A number as environment-variable text: '1.78', '2'."""
    return json.dumps(json_number(x))


def only_scheme(renderer: KnobRenderer, request: KnobRequest, allowed: Sequence[str]) -> str:
    """The scheme ``request`` asks of ``renderer`` (its default when none), refused unless in ``allowed``."""
    scheme = request.scheme or renderer.default_scheme
    get_scheme(scheme)
    if scheme not in allowed:
        raise SyntheticAcceptanceError(
            f"framework {renderer.framework!r} cannot realise scheme {scheme!r}; it offers: {', '.join(allowed)}"
        )
    return scheme


def as_length(target: SyntheticTarget, takes: str) -> tuple[int, float]:
    """K and the one acceptance length of ``target``, for a framework that takes only a length.

    Rates are accepted when they are the minimum-variance schedule of a length, refused otherwise (``takes`` names
    the framework's switch in the refusal).
    """
    if target.rates is None:
        assert target.al is not None
        return target.k, target.al
    al = min_variance_al(target.rates)
    if al is None:
        raise SyntheticAcceptanceError(
            f"{takes} takes one acceptance length, not per-position rates; rates {list(target.rates)} are not a "
            "minimum-variance schedule, so no length reproduces them"
        )
    return target.k, al
