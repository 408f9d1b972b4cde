"""Per-request speculative counts: the typed result, the checks every framework's reader shares, the record fill.

A framework whose responses carry one request's speculative counts (vLLM's ``metrics.speculative_decoding``,
SGLang's ``sglext.spec_tokens_details``) declares a :class:`CountsReader` in its plugin: the top-level key of the
event or body that holds them and the function that reads them into a :class:`RequestSpec`. The client is handed the
readers of the run's dialect (:attr:`alflow.loadgen.spec.Target.counts`) and calls :func:`fill_spec_counts` on
every streamed event without output choices (and a non-streamed body); it knows no framework. Each object is checked
before it is used and dropped (the record's counts stay None) when it does not hold together: a server's bad
numbers never fail a request or stop a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from alflow.loadgen.records import RequestRecord


class RequestSpec(NamedTuple):
    """One request's speculative counts, as a framework's reader finds them (all None: not usable)."""

    steps: int | None
    accepted_drafts: int | None
    draft_tokens: int | None
    histogram: list[int] | None
    full_k_histogram: list[int] | None = None
    """The histogram over the steps that carried all K drafts (from ``detailed``'s per-step arrays)."""


NO_REQUEST_SPEC: Final = RequestSpec(None, None, None, None)


def nonneg_int(value: object) -> int | None:
    """``value`` when it is a non-negative integer (a bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def int_list(value: object) -> list[int] | None:
    """``value`` when it is a list of non-negative integers (possibly empty), else None."""
    if isinstance(value, list) and all(
        type(item) is int and item >= 0 for item in value
    ):  # a bool is no count
        return value
    return None


def consistent(steps: int, accepted: int, drafts: int, hist: list[int]) -> bool:
    """A histogram (index j = steps that accepted j drafts) that agrees with the counts it comes with."""
    return sum(hist) == steps and sum(j * c for j, c in enumerate(hist)) == accepted and accepted <= drafts


@dataclass(frozen=True)
class CountsReader:
    """How one framework's responses carry per-request counts: the top-level ``key`` and the ``read`` function."""

    key: str
    """The top-level key of a streamed event (one without output choices) or of a body that holds the counts."""
    read: Callable[[Mapping[str, object]], RequestSpec]
    """The event or body -> its counts (:data:`NO_REQUEST_SPEC` when they are absent or do not hold together)."""


def fill_spec_counts(
    record: RequestRecord, body: Mapping[str, object], readers: Sequence[CountsReader]
) -> None:
    """Set ``record``'s per-request speculative counts from ``body`` by the first reader that finds usable ones.

    Fills ``spec_verify_ct``, ``spec_accepted_drafts``, ``spec_draft_tokens``, ``spec_accept_hist`` and
    ``spec_full_k_hist``. A reader whose key the body holds but whose object does not hold together gives way to the
    next (a body may carry another framework's unrelated ``metrics``); a body none can read leaves the record's
    counts as they were (None for a fresh record).
    """
    for reader in readers:
        if reader.key in body:
            got = reader.read(body)
            if got.steps is not None:
                record.spec_verify_ct, record.spec_accepted_drafts = got.steps, got.accepted_drafts
                record.spec_draft_tokens, record.spec_accept_hist = got.draft_tokens, got.histogram
                record.spec_full_k_hist = got.full_k_histogram
                return
