"""The base of every configuration model (:class:`StrictModel`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown fields rejected, defaults validated.

    Validation errors never echo the input (``hide_input_in_errors``): a refused value may be a secret,
    and Prefect stores the text of a failed parameter validation. No NaN or infinity anywhere; config
    files are validated in strict mode as well (:func:`alflow.yamlfile.load_yaml_model`).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, hide_input_in_errors=True, allow_inf_nan=False
    )


# --- upper bounds of the size fields (issue #35): what a real run could use, and no more ----------------------

MAX_CONCURRENCY = 65_536
"""Requests in flight at one point: 64 Ki streams is far beyond what one server batches (vLLM's max_num_seqs
is 256-1024; 64 client processes of about a thousand streams each); more exhausts the client's sockets."""

MAX_SEQUENCE_TOKENS = 1_048_576
"""Input or output length in tokens (ISL, OSL, output caps): 1 Mi tokens, the longest context windows served
today; a longer prompt cannot be served, and generating it would only exhaust memory."""

MAX_CONTEXT_TOKENS = 16_777_216
"""A server's max_model_len: 16 Mi tokens, above the longest context any model advertises (10 M)."""

MAX_PROMPTS = 1_000_000
"""Prompts or warm-up requests of one point or dataset subset: a million requests is a day at 10 per second."""

MAX_PER_CONCURRENCY = 10_000
"""M2's measured (or warm-up) prompts per unit of concurrency; the product must stay within MAX_PROMPTS."""


def check_unique(values: tuple[object, ...], name: str) -> None:
    """Raise ``ValueError`` (one line) when ``values`` names a value twice: it would be measured twice."""
    seen: set[object] = set()
    for value in values:
        if value in seen:
            shown = [str(v) for v in values]
            raise ValueError(f"{name} [{', '.join(shown)}] names {value} twice: give each once")
        seen.add(value)


def check_local_path(value: str, *, remote: tuple[str, ...] = (), why: str = "") -> str:
    """``value`` when it is a non-empty local path (or a URL of a scheme in ``remote``); else one line.

    An empty path would write into the current folder; ``file://`` is refused too (some writers would take
    it literally and make a ``file:`` folder): give the plain path. ``why`` says why other URLs do not work.
    The caller's error names the field.
    """
    if not value.strip():
        raise ValueError("the path is empty (it would be the current folder): give a path")
    if "://" not in value:
        return value
    scheme = value.split("://", 1)[0]
    if scheme in remote:
        return value
    if scheme == "file":
        raise ValueError(f"{value!r} is a file:// URL: give the plain local path, without file://")
    allowed = " or ".join(f"{r}://" for r in remote)
    other = f"give a local path or an {allowed} URL" if allowed else "only local paths are supported"
    raise ValueError(f"{value!r} is a {scheme}:// URL, which is not supported here: {why or other}")
