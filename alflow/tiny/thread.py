"""Run a :class:`~alflow.tiny.server.TinyService` on its own event loop in a daemon thread (tests, notebooks)."""

from __future__ import annotations

from functools import partial
from typing import Self

from alflow.serving.app import ServerThread
from alflow.tiny.server import TinyService, TinyStartupError, serve


class TinyThread(ServerThread):
    """A tiny server in a thread; ``base_url`` once started; ``stop()`` (or ``with``) ends it."""

    def __init__(self, server: TinyService) -> None:
        self.server = server
        super().__init__(
            partial(serve, server), server.settings.host, name="alflow-tiny-server", error=TinyStartupError
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop serving and join the thread."""
        super().stop(timeout_s)

    def __enter__(self) -> Self:
        return self.start()
