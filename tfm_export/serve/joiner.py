"""Joins encoded ahead, beside the decode loop: the in-flight engine's second thread.

Encoding a joining source cost about 28 % of the in-flight engine's time at saturation when the
decode thread did it between two steps (transformer-base, 2 CPU cores: ~10 ms a source, while no
row advanced). While every row is busy, the `Joiner` takes the next jobs from its engine's queue and
encodes each on its own thread, into a session with half the decoder's threads, while the rows
step; when a row frees, the decode loop only copies the ready encoder outputs into it
(runtime.states.rows.RowBatch.write). ORT releases the GIL while it runs, so the two threads overlap.

It stays at most AHEAD jobs ahead (a job it holds is out of the queue but not yet decoding), and it
takes nothing while the next job fits the free rows (a beam search takes one row per beam): then
the decode loop encodes it itself, at once, with all threads, so a request that arrives while
others decode still starts at the next step (a second thread would wait for the GIL, which a small
model's Python-bound decode loop seldom lets go).

Each source is encoded alone: no padding, and the encoder is compute-bound at one source already.
Torch-free; no web framework here.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from typing import Callable

import numpy as np

from .jobs import Engine, Job

log = logging.getLogger(__name__)

Encode = Callable[[np.ndarray], list[np.ndarray]]  # src (1, L) -> the encoder outputs, in RowBatch.write's order
AHEAD = 2  # jobs encoded ahead while every row is busy: one binds when a row frees, one more is on its way


class Joiner:
    """Encodes `engine`'s queued jobs on a thread of its own; `ready` hands them to the decode loop."""

    def __init__(self, engine: Engine, encode: Encode, aside: Callable[[list[Job]], None],
                 rows_for: Callable[[Job], int]):
        """`rows_for(job)`: the rows `job` takes in the batch (0: it goes `aside`, to the search lane);
        `engine.free_rows()`: the rows free now."""
        self.engine, self._encode, self._aside, self._rows_for = engine, encode, aside, rows_for
        self._ready: deque[tuple[Job, list[np.ndarray]]] = deque()  # encoded, waiting for a free row
        self._changed = threading.Condition()  # `_ready` grew or shrank, the rows changed, or stop
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="tfm-export-joiner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def waiting(self) -> list[Job]:
        """Jobs encoded and not yet handed over (the engine answers them if it fails)."""
        with self._changed:
            return [job for job, _ in self._ready]

    def ready(self, free: int) -> list[tuple[Job, list[np.ndarray]]]:
        """Encoded jobs, oldest first, as many as fit `free` rows (the decode loop binds them)."""
        with self._changed:
            taken = []
            while self._ready and self._rows_for(self._ready[0][0]) <= free:
                free -= self._rows_for(self._ready[0][0])
                taken.append(self._ready.popleft())
            if taken:
                self._changed.notify_all()  # room to encode ahead again
        return taken

    def has_ready(self) -> bool:
        with self._changed:
            return bool(self._ready)

    def stop(self) -> None:
        """The engine has closed: end the thread."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def poke(self) -> None:
        """The rows changed (they may all be busy now): look again whether to encode ahead."""
        with self._changed:
            self._changed.notify_all()

    def _loop(self) -> None:
        try:
            self._join_all()
        except Exception as exc:  # a bug: answer everyone instead of hanging them
            log.exception("joiner failed")
            self.engine.fail_all(f"joining failed: {type(exc).__name__}: {exc}")

    def _join_all(self) -> None:
        from ..runtime.sources import source_batch

        while True:
            with self._changed:
                # the next job fits the free rows (the decode loop takes it itself) or enough are encoded ahead
                while not self._stopped and (self._next_fits() or len(self._ready) >= AHEAD):
                    self._changed.wait()
                if self._stopped:
                    return
            jobs = self.engine.take(1, wait=None, hold=True)  # until a job comes or the engine closes
            if not jobs:
                if self.engine.drained:
                    return
                continue
            job = jobs[0]
            if not self._rows_for(job):  # wider than the batch or longer than its slots: the side lane
                self._aside([job])
                self.engine.release(1)
                continue
            try:
                encoded = self._encode(source_batch([job.ids], self.engine.model.config))  # (1, ..., L, ...)
            except Exception as exc:  # noqa: BLE001 - answer this job and keep serving the others
                log.exception("encoding a joining source failed")
                job.emit("error", f"encoding failed: {type(exc).__name__}: {exc}")
                self.engine.release(1)
                continue
            self.engine.announce(functools.partial(self._add_ready, job, encoded))  # see Engine.take's other_work

    def _next_fits(self) -> bool:
        """Whether the decode loop will take the next queued job itself: free rows for it (with none
        queued: any free row), or it goes to the side lane."""
        free, head = len(self.engine.free_rows()), self.engine.head()
        if head is None:
            return free > 0
        return free >= self._rows_for(head)

    def _add_ready(self, job: Job, encoded: list[np.ndarray]) -> None:
        with self._changed:
            self._ready.append((job, encoded))
            self._changed.notify_all()

