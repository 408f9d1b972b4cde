"""Run a :class:`~alflow.tiny.server.TinyService` on its own event loop in a daemon thread (tests, notebooks)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Self

from alflow.serving.app import OnReady, ServerThread
from alflow.tiny.server import TinyService, TinyStartupError, serve


class TinyThread(ServerThread):
    """A tiny server in a thread; ``base_url`` once started; ``stop()`` (or ``with``) ends it."""

    def __init__(self, server: TinyService) -> None:
        self.server = server

        def run(stop: asyncio.Event, on_ready: OnReady) -> Awaitable[None]:
            return serve(server, stop=stop, on_ready=on_ready)

        super().__init__(run, server.settings.host, name="alflow-tiny-server", error=TinyStartupError)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop serving and join the thread."""
        super().stop(timeout_s)

    def __enter__(self) -> Self:
        return self.start()
