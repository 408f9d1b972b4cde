"""Prompt-lookup (n-gram) drafting, as vLLM's ``ngram`` method does it.

The proposer sees the whole token history of the sequence (prompt and output). To propose up to K
drafts it takes the last ``n`` tokens, for ``n`` from ``ngram_max`` down to ``ngram_min`` (longest
match first), finds the most recent earlier occurrence of that n-gram in the history and proposes the
up to K tokens that followed it. No match at any size: no drafts (a plain decode step).

An index from each n-gram to the start of its most recent occurrence is updated as tokens arrive,
so a proposal costs O(ngram_max) dictionary look-ups, not a scan of the history. The index only holds
n-grams that have at least one following token, so the current suffix never matches itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from alflow.errors import InvalidInputError


class NgramProposer:
    """Drafts by n-gram lookup over a growing token history."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        if isinstance(ngram_min, bool) or not isinstance(ngram_min, int) or ngram_min < 1:
            raise InvalidInputError(f"ngram_min={ngram_min!r} must be an integer >= 1")
        if isinstance(ngram_max, bool) or not isinstance(ngram_max, int) or ngram_max < ngram_min:
            raise InvalidInputError(f"ngram_max={ngram_max!r} must be an integer >= ngram_min ({ngram_min})")
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.history: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(ngram_min, ngram_max + 1)}

    def extend(self, tokens: Iterable[int]) -> None:
        """Append tokens to the history and index the n-grams that now have a following token."""
        hist, index = self.history, self._index
        for token in tokens:
            end = len(hist)  # the n-grams ending at end-1 now have a follower (this token)
            for n, table in index.items():
                if end >= n:
                    table[tuple(hist[end - n : end])] = end - n
            hist.append(int(token))

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` draft tokens: what followed the most recent earlier match of the longest suffix."""
        hist = self.history
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(hist) <= n:
                continue
            start = self._index[n].get(tuple(hist[-n:]))
            if start is not None:
                follow = start + n
                return hist[follow : follow + k]
        return []
