"""Custom prompts: the JSONL format ``vllm bench serve --dataset-name custom`` reads.

One JSON object per line with a non-empty ``prompt`` string and, optionally, ``output_tokens`` (a
positive integer: that row's output cap); other fields are ignored, as vLLM does. The same file drives both clients, so a comparison with
``vllm bench serve`` sends the very same texts::

    {"prompt": "Write a Python function that reverses a list.", "output_tokens": 128}
    {"prompt": "What is the capital of Iran?"}

Rows keep the file's order (``vllm bench serve`` shuffles them by its seed unless given
``--disable-shuffle``). The text goes as it is: on the completions endpoint as the raw prompt (vLLM's
``--skip-chat-template``), on the chat endpoint as the user message, which the server wraps in the
model's chat template.
"""

from __future__ import annotations

import os
from pathlib import Path

from alflow.datasets.types import Session, Turn, jsonl_rows, refuse_large
from alflow.errors import InvalidInputError
from alflow.util.fsutil import open_regular

DEFAULT_MAX_TOKENS = 256
"""The output cap of a row without ``output_tokens`` (``vllm bench serve``'s ``--custom-output-len`` default)."""


def load_custom(
    path: str | Path, *, max_tokens: int | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> list[Session]:
    """Sessions of a custom prompt file.

    The output cap is ``max_tokens`` when given (it overrides the rows, as ``--custom-output-len``
    does in vLLM), else the row's ``output_tokens``, else ``default_max_tokens``. Errors name the
    file, the line and the field.
    """
    file = Path(path)
    try:
        fh = open_regular(file)  # a FIFO waits, /dev/zero streams for ever: regular files only
    except FileNotFoundError:
        raise InvalidInputError(f"custom prompt file {file} does not exist") from None
    except OSError as exc:
        raise InvalidInputError(f"custom prompt file {file}: {exc.strerror or exc}") from None
    try:
        with fh:
            refuse_large(file, "custom prompt", size=os.fstat(fh.fileno()).st_size)
            sessions: list[Session] = []
            for line_no, row in jsonl_rows(fh, f"{file}:"):
                where = f"{file}:{line_no}"
                if not isinstance(row, dict):
                    raise InvalidInputError(f"{where}: a row must be a JSON object with a 'prompt' string")
                prompt = row.get("prompt")
                if not isinstance(prompt, str) or not prompt.strip():
                    raise InvalidInputError(f"{where}: field 'prompt' is missing or not a non-empty string")
                given = row.get("output_tokens", default_max_tokens)
                if isinstance(given, bool) or not isinstance(given, int) or given < 1:
                    raise InvalidInputError(
                        f"{where}: field 'output_tokens' is {row['output_tokens']!r}; give a positive integer"
                    )
                sessions.append(
                    Session(
                        session_id=f"custom-{line_no}",
                        turns=(Turn(prompt=prompt, max_tokens=given if max_tokens is None else max_tokens),),
                        category="custom",
                        meta={"line": str(line_no)},
                    )
                )
            if not sessions:
                raise InvalidInputError(f"custom prompt file {file} holds no rows")
            return sessions
    except OSError as exc:  # /proc/self/mem is a regular file that cannot be read
        raise InvalidInputError(
            f"custom prompt file {file}: cannot be read ({exc.strerror or exc})"
        ) from None
