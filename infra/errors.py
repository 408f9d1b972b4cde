"""Errors raised by the server-lifecycle layer (recipes and runners)."""

from __future__ import annotations

from alflow.errors import InvalidInputError, RecipeError, RunnerError

__all__ = [
    "FrameworkInstallError",
    "RecipeError",
    "RunnerError",
    "ServerRefusedError",
    "ServerStartError",
]


class ServerStartError(RunnerError):
    """The server did not become healthy: it exited, crashed or timed out; carries its log tail."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        text = message if not log_tail else f"{message}\n--- last log lines ---\n{log_tail.rstrip()}"
        super().__init__(text)


class ServerRefusedError(ServerStartError):
    """The server exited before it was ready: a deterministic refusal (a bad flag, an unsupported feature).

    Never retried: starting the same launch again gives the same refusal.
    """


class FrameworkInstallError(InvalidInputError):
    """The framework environment or executable a runner was told to use is not there."""
