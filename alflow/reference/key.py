"""The key of a reference value: (model, method, thinking, K) and its drafter variant (typed, frozen).

Kept apart from :mod:`alflow.reference.table` (which re-exports every name here) so the table module stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, cast, get_args

from alflow.config import SpecMethod, ThinkingMode
from alflow.errors import InvalidInputError

DraftSampleMethod = Literal["greedy", "probabilistic"]
"""vLLM's ``draft_sample_method`` values (``vllm/config/speculative.py``, ``DraftSampleMethod``, vLLM 0.32.0)."""
RejectionSampleMethod = Literal["standard", "block"]
"""vLLM's lossless ``rejection_sample_method`` values (same file, ``RejectionSampleMethod``, vLLM 0.32.0);
``synthetic`` forces acceptance and ``fly`` is lossy (DOMAIN.md section 9): neither measures a reference."""
TableKind = Literal["measured", "simulated", "example", "imported"]

VLLM_DEFAULT_DRAFT_SAMPLE_METHOD: DraftSampleMethod = "greedy"
"""vLLM's default: ``draft_sample_method: DraftSampleMethod = "greedy"`` in ``vllm/config/speculative.py``
(vLLM 0.32.0, the ``SpeculativeConfig`` dataclass)."""
VLLM_DEFAULT_REJECTION_SAMPLE_METHOD: RejectionSampleMethod = "standard"
"""vLLM's default: ``rejection_sample_method: RejectionSampleMethod = "standard"`` in the same file."""
V1_CONCURRENCY = 1
"""What a version-1 entry was collected with: M0's default load (``CalibrateParams.load`` =
``LoadConfig()``, ``concurrency: int = Field(1, ...)`` in ``alflow/config/workloads.py``)."""
V1_PREFIX_CACHING = False
"""What a version-1 entry was collected with, unless its command says otherwise: M0's server template
keeps ``ServerConfig.enable_prefix_caching`` at its default ``False`` (``alflow/config/server.py``), which
the vLLM recipe renders as ``--no-enable-prefix-caching`` (``alflow/frameworks/vllm/recipe.py``)."""
SELF_DRAFTING = frozenset({SpecMethod.MTP, SpecMethod.NGRAM})
"""Methods that draft with the target itself (its MTP head, n-gram lookup): no draft model."""


@dataclass(frozen=True)
class Variant:
    """The drafter variant of a reference value: what besides (model, method, thinking, K) sets its AL."""

    draft_model: str | None
    """Draft model id (None: the method drafts with the target itself, mtp and ngram)."""
    draft_sample_method: DraftSampleMethod
    rejection_sample_method: RejectionSampleMethod
    concurrency: int
    """Requests in flight while the value was collected."""
    prefix_caching: bool
    """Whether the server cached prefixes while the value was collected."""

    def label(self) -> str:
        """Every field spelled out, e.g. ``draft=self draft_sample=greedy rejection_sample=standard ...``."""
        return (
            f"draft={self.draft_model or 'self'} draft_sample={self.draft_sample_method} "
            f"rejection_sample={self.rejection_sample_method} concurrency={self.concurrency} "
            f"prefix_caching={'on' if self.prefix_caching else 'off'}"
        )

    def sort_key(self) -> tuple[str, str, str, int, bool]:
        """A total order (None draft model first)."""
        return (
            self.draft_model or "",
            self.draft_sample_method,
            self.rejection_sample_method,
            self.concurrency,
            self.prefix_caching,
        )


@dataclass(frozen=True)
class VariantQuery:
    """What a lookup says about the variant; a field left None matches any value."""

    draft_model: str | None = None
    draft_sample_method: DraftSampleMethod | None = None
    rejection_sample_method: RejectionSampleMethod | None = None
    concurrency: int | None = None
    prefix_caching: bool | None = None

    @classmethod
    def exact(cls, variant: Variant) -> VariantQuery:
        """A query for exactly ``variant`` (its draft model too, when it has one)."""
        return cls(**{f.name: getattr(variant, f.name) for f in fields(Variant)})

    def matches(self, variant: Variant) -> bool:
        """True when every field this query gives equals the variant's."""
        return all(
            getattr(self, f.name) is None or getattr(self, f.name) == getattr(variant, f.name)
            for f in fields(Variant)
        )

    def label(self) -> str:
        """The fields given, e.g. ``draft_sample=probabilistic``; empty when none."""
        names = {
            "draft_model": "draft",
            "draft_sample_method": "draft_sample",
            "rejection_sample_method": "rejection_sample",
        }
        parts = []
        for f in fields(Variant):
            value = getattr(self, f.name)
            if value is not None:
                shown = ("on" if value else "off") if isinstance(value, bool) else value
                parts.append(f"{names.get(f.name, f.name)}={shown}")
        return " ".join(parts)


def reference_rejection_method(value: str) -> RejectionSampleMethod:
    """``value`` as a reference's rejection sample method; a lossy or forced one is an error naming it."""
    for allowed in get_args(RejectionSampleMethod):
        if value == allowed:
            return cast(RejectionSampleMethod, allowed)
    raise InvalidInputError(
        f"rejection_sample_method {value!r}: a reference is measured with a lossless verification only "
        "(standard or block); 'synthetic' forces acceptance and 'fly' is lossy (DOMAIN.md section 9)"
    )


def server_variant_query(
    method: SpecMethod,
    draft_model: str | None,
    draft_sample_method: DraftSampleMethod | None,
    rejection_sample_method: str | None,
) -> VariantQuery:
    """The variant a server under test (M1, M2) asks for: its drafter and its sample methods where set.

    The draft model counts only for methods with one (not mtp, ngram); a sample method left None is the
    framework's default, which need not be vLLM's, so it matches any (a table with two variants that differ
    there then asks for it to be set in the server's speculative config). Concurrency and prefix caching are
    how the reference was collected, not a property of the server under test: any.
    """
    return VariantQuery(
        draft_model=None if method in SELF_DRAFTING else draft_model,
        draft_sample_method=draft_sample_method,
        rejection_sample_method=None
        if rejection_sample_method is None
        else reference_rejection_method(rejection_sample_method),
    )


@dataclass(frozen=True)
class Key:
    """The identity of one reference value: (model, method, thinking mode, K, drafter variant)."""

    model: str
    method: SpecMethod
    thinking: ThinkingMode
    k: int
    variant: Variant

    def sort_key(self) -> tuple[str, str, str, int, tuple[str, str, str, int, bool]]:
        """A total order: model, method, thinking, K, variant."""
        return (self.model, self.method.value, self.thinking.value, self.k, self.variant.sort_key())

    def label(self) -> str:
        """``model method thinking=.. K=.. [variant]``."""
        return f"{self.model} {self.method.value} thinking={self.thinking.value} K={self.k} [{self.variant.label()}]"
