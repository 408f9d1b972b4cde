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
    spec_verify_ct: int | None = None
    """SGLang ``meta_info.spec_verify_ct``, vLLM ``num_spec_steps``: this request's verify steps (None: not
    reported)."""
    spec_accepted_drafts: int | None = None
    """SGLang ``meta_info.spec_num_correct_drafts`` (or an older alias), vLLM ``num_accepted_draft_tokens``:
    accepted draft tokens."""
    spec_draft_tokens: int | None = None
    """vLLM ``num_draft_tokens``: draft tokens proposed for this request (None: not reported)."""
    spec_accept_hist: list[int] | None = None
    """vLLM ``acceptance_histogram``: this request's verify steps by drafts accepted (index j: exactly j)."""
    spec_full_k_hist: list[int] | None = None
    """The same over the steps that carried all K drafts (vLLM ``detailed``: per-step drafted == K)."""
    stamp_source: str | None = None
    """Where ``chunk_ns`` came from: ``kernel`` (each read's kernel receive stamp, :mod:`alflow.loadgen.rxstamp`)
    or ``clock`` (the process's clock when it read); None: no answer (or a run stored before the column)."""

    @property
    def ok(self) -> bool:
        """True when the request completed without an error."""
        return self.error is None
