"""The records frame (DESIGN.md section 2): one row per request (:class:`RequestRecord`), metrics computed afterwards.

Timestamps are integer ``time.perf_counter_ns()`` values taken on the client:

- ``start_ns``: just before the request is sent;
- ``chunk_ns``: one entry per SSE event that carried output (content, ``reasoning`` or
  ``reasoning_content``): the arrival time of the network read that brought it (events read
  together share a timestamp); ``first_token_ns`` is its first element and ``end_ns`` its last, so the
  trailing usage chunk and ``[DONE]`` never extend latency;
- ``done_ns``: when the stream ended (``[DONE]`` or an error);
- ``stamp_source``: ``kernel`` when every read of the answer carried a kernel receive stamp (``chunk_ns`` is
  then the arrival of each read's newest data, whatever the client's scheduling delay), ``clock`` when the
  process's clock dated the reads (:mod:`alflow.loadgen.rxstamp`).

Token counts come from the server's ``usage``; ``error`` is None for a successful request.

Per-request speculative counts (nullable; null when the server sends none: TensorRT-LLM, older SGLang, vLLM
before 0.32.0 or without the flag below, or an object that failed the client's consistency checks):

- ``spec_verify_ct`` (Int64): this request's verify steps that carried drafts;
- ``spec_accepted_drafts`` (Int64): its accepted draft tokens (the bonus token not counted);
- ``spec_draft_tokens`` (Int64): its proposed draft tokens (vLLM only);
- ``spec_accept_hist`` (List(Int64)): its verify steps by drafts accepted, index ``j`` = steps that accepted
  exactly ``j`` drafts, length K + 1 (vLLM only);
- ``spec_full_k_hist`` (List(Int64)): the same histogram over only the steps that carried all K drafts, from
  vLLM's ``detailed`` per-step arrays (``per_step_accepted`` / ``per_step_drafted``); null without them.

SGLang sends the first two in ``meta_info`` (``spec_verify_ct``, ``spec_num_correct_drafts``). vLLM (0.32.0+,
started with ``--per-request-spec-decode-metrics summary|detailed``) sends ``metrics.speculative_decoding``
(``vllm/v1/metrics/stats.py``, ``RequestSpecDecodeMetrics.to_dict``): ``num_spec_steps`` fills
``spec_verify_ct``, ``num_accepted_draft_tokens`` ``spec_accepted_drafts``, ``num_draft_tokens``
``spec_draft_tokens`` and ``acceptance_histogram`` ``spec_accept_hist``. Each is read by its plugin's reader from
the event that carries no output choices (:func:`alflow.loadgen.counts.fill_spec_counts`). A request's exact AL is
``1 + spec_accepted_drafts / spec_verify_ct``.

Frames stored before a column existed lack it: :func:`read_records` adds the missing columns as nulls
(:func:`with_record_columns` for other readers), so older runs load and count as reporting nothing.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Final

import polars as pl

from alflow.loadgen.records import RequestRecord

_DTYPES: Final[dict[str, pl.DataType]] = {
    "int": pl.Int64(),
    "str": pl.String(),
    "bool": pl.Boolean(),
    "list[int]": pl.List(pl.Int64()),
}
RECORD_SCHEMA: Final[dict[str, pl.DataType]] = {
    f.name: pl.Int32() if f.name in ("turn", "http_status") else _DTYPES[str(f.type).removesuffix(" | None")]
    for f in fields(RequestRecord)
}
"""The columns: :class:`RequestRecord`'s fields, in order, with their types (``turn`` and ``http_status`` 32-bit)."""


def records_frame(records: Iterable[RequestRecord]) -> pl.DataFrame:
    """Records as a polars DataFrame with the fixed :data:`RECORD_SCHEMA` (empty input allowed)."""
    recs = list(records)
    return pl.DataFrame(
        {name: [getattr(r, name) for r in recs] for name in RECORD_SCHEMA}, schema=RECORD_SCHEMA
    )


def write_records(path: str | Path, records: Sequence[RequestRecord] | pl.DataFrame) -> Path:
    """Write records as parquet (the directory is created), whole or not at all; returns the path.

    Written to a temporary file beside it, then renamed over it: a full disk gave polars' own ``ComputeError``
    traceback and left an empty ``records.parquet`` that looked like output (round 17, #49); now it is an
    ``OSError`` and no file. Never held whole in memory as bytes (a large run's records are hundreds of MB).
    """
    frame = records if isinstance(records, pl.DataFrame) else records_frame(records)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        frame.write_parquet(tmp)
        tmp.replace(target)
    except pl.exceptions.ComputeError as exc:  # polars' wrapping of the file system's error
        raise OSError(errno.EIO, " ".join(str(exc).split())[:300]) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def with_record_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every :data:`RECORD_SCHEMA` column it lacks added as nulls (frames stored by older alflow)."""
    missing = [name for name in RECORD_SCHEMA if name not in frame.columns]
    if not missing:
        return frame
    extra = [name for name in frame.columns if name not in RECORD_SCHEMA]  # e.g. a run's concurrency column
    filled = frame.with_columns(pl.lit(None, dtype=RECORD_SCHEMA[name]).alias(name) for name in missing)
    return filled.select([*RECORD_SCHEMA, *extra])


def read_records(path: str | Path) -> pl.DataFrame:
    """Read a records parquet file written by :func:`write_records` (older files get the newer columns as nulls)."""
    return with_record_columns(pl.read_parquet(path))
