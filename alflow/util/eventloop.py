"""The one event loop factory of alflow's clients and servers: uvloop's when installed, else asyncio's.

uvloop costs about 1.5x less CPU per streamed chunk than asyncio's default loop
(``benchmarks/client_overhead.py --loop asyncio`` measures the difference).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop: uvloop's when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop from :func:`new_event_loop` (closed afterwards)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
