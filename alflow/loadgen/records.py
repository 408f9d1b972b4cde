"""What the client saw of one request, filled while streaming (:class:`RequestRecord`).

Plain Python data with no frame library behind it, so that the load generator (and each client process of
``--client-processes``) never imports polars or numpy; :mod:`alflow.loadgen.frames` turns records into the stored
records frame and documents its columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request (filled while streaming; plain data afterwards)."""

    request_id: int
    session_id: str
    turn: int = 0
    category: str | None = None
    warmup: bool = False
    start_ns: int = 0
    first_token_ns: int | None = None
    end_ns: int | None = None
    done_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    http_status: int | None = None
    error: str | None = None
    text: str | None = None
    # per-request speculative counts (None: not reported) and the timestamps' source: the columns of the same
    # names, documented in alflow.loadgen.frames (which server field fills which)
    spec_verify_ct: int | None = None
    spec_accepted_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accept_hist: list[int] | None = None
    spec_full_k_hist: list[int] | None = None
    stamp_source: str | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed without an error."""
        return self.error is None
