"""Run a :class:`~alflow.tiny.server.TinyServer` on its own event loop in a daemon thread (tests, notebooks)."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from alflow.errors import AlflowError
from alflow.sim.process import new_event_loop
from alflow.tiny.server import TinyServer, serve


class TinyThread:
    """A tiny server in a thread; ``base_url`` once started; ``stop()`` (or ``with``) ends it."""

    def __init__(self, server: TinyServer) -> None:
        self.server = server
        self.host = server.settings.host
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="alflow-tiny-server", daemon=True)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def _main(self) -> None:
        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()

        def ready(_host: str, port: int) -> None:
            self.port = port
            self._ready.set()

        await serve(self.server, stop=self._stop, on_ready=ready)

    def start(self, timeout_s: float = 30.0) -> TinyThread:
        """Start the thread and wait until the server listens."""
        self._thread.start()
        if not self._ready.wait(timeout_s) or self.port == 0:
            raise AlflowError(f"tiny server did not start: {self._error or 'timeout'}")
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def __enter__(self) -> TinyThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
