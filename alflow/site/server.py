"""Running the site: bind, serve until SIGINT or SIGTERM, then stop cleanly (listener closed, threads joined).

The token check (:func:`alflow.site.guard.check_bind`) runs before the catalogue is read and before anything
binds; the catalogue is read before the port opens, so the first request finds it ready.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from aiohttp import web

from alflow.errors import InvalidInputError
from alflow.results.catalog import Catalog
from alflow.results.store import check_results_root, storage_for
from alflow.site.app import make_app
from alflow.site.guard import PathOnlyAccessLogger, check_bind
from alflow.util.fsutil import local_path_of
from alflow.util.redact import redact_url
from alflow.util.signals import stop_signals


def check_root(root: str) -> str:
    """``root`` as given when it is a folder or a URL; else an input error naming it (:func:`check_results_root`)."""
    return check_results_root(root, name="ROOT")


def _reachable(root: str) -> bool:
    """Whether the object store's root answers as existing (an unreachable host reads as missing)."""
    try:
        return storage_for(root).exists(root)
    except Exception:  # the back-end's own error: not reachable
        return False


async def run_site(
    app: web.Application,
    host: str,
    port: int,
    announce: Callable[[str], None],
    stop: asyncio.Event | None = None,
    *,
    signals: bool = True,
) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM (``signals``: main thread only) or ``stop`` is set.

    ``announce`` gets the URL once the port is open.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = stop_signals() if signals else ()  # SIGHUP too (a closed terminal), unless nohup ignores it
    for sig in handled:
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log_class=PathOnlyAccessLogger, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise InvalidInputError(
                f"--host {host!r} --port {port}: cannot listen there ({exc.strerror or exc})"
            ) from None
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
        announce(f"http://{shown}:{bound[1]}/")
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await runner.cleanup()


def serve(
    root: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token_env: str | None = None,
    refresh_s: float = 2.0,
    cache_dir: str | os.PathLike[str] | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Check the options, read the catalogue, serve until a signal; every bad input is refused before binding."""
    token = check_bind(host, token_env)
    root = check_root(root)
    catalog = Catalog(root, min_refresh_s=refresh_s, cache_dir=cache_dir)
    app = make_app(catalog, token=token, refresh_s=refresh_s)
    announce(f"{len(catalog.entries())} runs in {redact_url(root)}")
    if not catalog.entries() and local_path_of(root) is None and not _reachable(root):
        announce(
            f"warning: {redact_url(root)} does not exist or cannot be reached now: the site shows its runs once it "
            "can read them (refreshed every few seconds)"
        )
    asyncio.run(run_site(app, host, port, announce))
