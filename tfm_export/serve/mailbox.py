"""Hand-offs from the decode thread to the server's event loop, one loop wake-up per burst.

Every generated token is an event for the request that owns it. Waking the event loop once per
event (`loop.call_soon_threadsafe`: a write to its self-pipe, a GIL hand-over) cost the in-flight
server a large share of its CPU at 16 rows; a `Mailbox` queues the calls and wakes the loop only
when none is pending, so a decoder step's tokens for all rows arrive in one wake-up.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any, Callable


class Mailbox:
    """Calls made from other threads, run on `loop` in order, with one wake-up per burst."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a drain is queued on the loop and has not started yet

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) on the loop soon (thread-safe)."""
        with self._lock:
            self._calls.append((fn, args))
            if self._scheduled:
                return
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls, self._scheduled = self._calls, deque(), False
        for fn, args in calls:
            fn(*args)
