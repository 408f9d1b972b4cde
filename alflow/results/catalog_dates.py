"""A run's start and end as the catalogue reads them: parsed, checked for being possible, put in UTC."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Final

from alflow.errors import AlflowError

EARLIEST: Final = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
"""No run of alflow started before this: an earlier start (the epoch...) is a damaged manifest, not history."""


def timestamp_of(iso: str) -> float:
    """Seconds since the epoch of an ISO 8601 time (naive: UTC); 0 when it does not parse."""
    try:
        when = datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return 0.0
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def possible_start(rel: str, iso: str, finished: str | None) -> str:
    """A run's start in UTC (naive: UTC), as sorted and shown.

    One that is no time at all (a leap second's ``:60``, a month 13: round 17 called it "impossible"), before
    :data:`EARLIEST`, a day ahead or after the run's end is no run's (:class:`AlflowError`, naming the run).
    """
    try:
        parsed = datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        raise AlflowError(f"{rel}: its manifest's start {iso[:40]!r} is no ISO 8601 date and time") from None
    when = timestamp_of(iso)
    if not EARLIEST <= when <= time.time() + 86_400:
        raise AlflowError(
            f"{rel}: its manifest's start {iso[:40]!r} is impossible (before 2024 or in the future)"
        )
    if finished is not None and timestamp_of(finished) < when:
        raise AlflowError(f"{rel}: its manifest's end {finished[:40]!r} is before its start {iso[:40]!r}")
    return iso if parsed.utcoffset() in (None, timedelta(0)) else parsed.astimezone(UTC).isoformat()
