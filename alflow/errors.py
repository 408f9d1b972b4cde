"""Exceptions shared by the core library.

Every error alflow raises for bad input names the input and says what is wrong with it, so the
command line can print it as one line.
"""

from __future__ import annotations


class AlflowError(Exception):
    """Base class of alflow's own errors (the CLI prints these as one line, exit code 2)."""


class InvalidInputError(AlflowError, ValueError):
    """A value given by the user is outside what is allowed; the message names it."""


class GateFailedError(AlflowError):
    """A gate or audit failed: the flow run ends Failed with this message."""


class RecipeError(InvalidInputError):
    """A server configuration a recipe refuses (unsupported, or a known silent no-op); says why."""


class RunnerError(AlflowError):
    """A runner could not do what it was asked (no Docker engine, image missing, ...)."""
