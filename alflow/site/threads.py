"""The results site's worker threads: every page, API answer and file read runs off the event loop, bounded.

A page or API answer is built in one of :data:`PAGE_THREADS` slots within :data:`PAGE_SECONDS` (:func:`bounded`,
:func:`off_loop`); a file's open and each part of a download in one of :data:`IO_THREADS` slots (:func:`file_io`). Each
call has a daemon thread of its own (:func:`in_thread`), so one that never returns (a file that blocks) never holds
the process at its exit; a build past its time answers 503 (:class:`PageTooSlowError`) and keeps its slot until it
ends, so at most :data:`PAGE_THREADS` builds can hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from aiohttp import web

T = TypeVar("T")

SLOTS: Final = web.AppKey("slots", asyncio.Semaphore)
IO_SLOTS: Final = web.AppKey("io_slots", asyncio.Semaphore)
PAGE_SECONDS: Final = 20.0
"""The longest a page or an API answer may take to build (in a worker thread): past it the request gets a 503 and
the site goes on answering others (a page built on the event loop once kept the whole site, and its SIGTERM, waiting)."""
PAGE_THREADS: Final = 8
"""Pages built at once; a build that never ends keeps its slot, so at most this many can hang, and later pages wait
for a slot within their :data:`PAGE_SECONDS`."""
IO_THREADS: Final = 16
"""File reads (a download's open and each of its parts) in threads at once, site-wide: a thousand downloads wait
their turn for a slot instead of holding a thousand threads."""


def add_slots(app: web.Application) -> None:
    """The app's page and file-read slots."""
    app[SLOTS] = asyncio.Semaphore(PAGE_THREADS)
    app[IO_SLOTS] = asyncio.Semaphore(IO_THREADS)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a daemon thread of its own, the event loop free meanwhile.

    Not the loop's pool: a call that never returns (a file that blocks) would hold the process at its exit, where the
    pool's threads are joined; a daemon thread does not.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if not done.done():
            done.set_result(result) if error is None else done.set_exception(error)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # delivered to the awaiting request, whatever it is
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=f"alflow-site-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return await done


async def file_io(request: web.Request, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (a file's open, read or next part) in a daemon thread, in one of :data:`IO_THREADS` slots.

    A slot is freed when its read ends (not when its request leaves: the thread is still reading), so at most
    :data:`IO_THREADS` reads run at once; a request that waits :data:`PAGE_SECONDS` for one (every slot held by reads
    that do not end: a hung network file system) gets a :class:`PageTooSlowError` (503, or a cut download).
    """
    slots = request.app[IO_SLOTS]
    try:
        async with asyncio.timeout(PAGE_SECONDS):
            await slots.acquire()
    except TimeoutError:
        raise PageTooSlowError(f"{request.path}: no file-read slot free within {PAGE_SECONDS:g} s") from None
    return await asyncio.shield(_in_slot(slots, fn, *args))


def _in_slot(slots: asyncio.Semaphore, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``fn(*args)`` started in a thread holding the slot just acquired, which its end frees (:func:`_settled`)."""
    try:
        work = asyncio.ensure_future(in_thread(fn, *args))
        work.add_done_callback(functools.partial(_settled, slots))
    except BaseException:
        slots.release()
        raise
    return work


class PageTooSlowError(Exception):
    """A page that took longer than :data:`PAGE_SECONDS` to build (the ``errors`` middleware answers 503)."""


def _settled(slots: asyncio.Semaphore, done: asyncio.Future[Any]) -> None:
    """A build ended: its slot is free; its outcome is read (a page that timed out has no one awaiting it)."""
    slots.release()
    if not done.cancelled():
        done.exception()


async def bounded(request: web.Request, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, in one of :data:`PAGE_THREADS` slots, within :data:`PAGE_SECONDS`."""
    slots = request.app[SLOTS]
    try:
        async with asyncio.timeout(PAGE_SECONDS) as bound:
            await slots.acquire()
            return await asyncio.shield(_in_slot(slots, fn, *args))
    except TimeoutError:
        if not bound.expired():  # the build's own timeout (a socket's, fsspec's): its error, not ours
            raise
        raise PageTooSlowError(f"{request.path} took longer than {PAGE_SECONDS:g} s to build") from None


def off_loop(
    build: Callable[[web.Request], web.Response],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler that builds its whole answer with ``build`` in a worker thread (:func:`bounded`)."""

    @functools.wraps(build)
    async def handler(request: web.Request) -> web.Response:
        return await bounded(request, build, request)

    return handler
