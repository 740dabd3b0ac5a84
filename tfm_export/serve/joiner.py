"""Joins encoded beside the decode loop: the in-flight engine's second thread.

Encoding a joining source cost about 28 % of the in-flight engine's time when the decode thread did
it between two steps (transformer-base, 2 CPU cores: ~10 ms a source, while no row advanced). The
`Joiner` takes jobs from its engine's queue and encodes each on its own thread, into a session with
half the decoder's threads, while the rows step; the decode loop only copies the ready encoder
outputs into the rows that are free (runtime.static.RowBatch.write). ORT releases the GIL while it
runs, so the two threads overlap. It stays at most a few jobs ahead of the free rows: a job it holds
is out of the queue but not yet decoding.

Each source is encoded alone: no padding, and the encoder is compute-bound at one source already.
Torch-free; no web framework here.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable

import numpy as np

from .jobs import Engine, Job

log = logging.getLogger(__name__)

Encode = Callable[[np.ndarray], list[np.ndarray]]  # src (1, L) -> the encoder outputs, in RowBatch.write's order
AHEAD = 2  # jobs encoded ahead of a free row: one binds at once when a row frees, one more is on its way


class Joiner:
    """Encodes `engine`'s queued jobs on a thread of its own; `ready` hands them to the decode loop."""

    def __init__(self, engine: Engine, encode: Encode, aside: Callable[[list[Job]], None],
                 free_rows: Callable[[], int]):
        self.engine, self._encode, self._aside, self._free_rows = engine, encode, aside, free_rows
        self._ready: deque[tuple[Job, list[np.ndarray]]] = deque()  # encoded, waiting for a free row
        self._changed = threading.Condition()  # `_ready` grew or shrank
        self._thread = threading.Thread(target=self._loop, name="tfm-export-joiner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def waiting(self) -> list[Job]:
        """Jobs encoded and not yet handed over (the engine answers them if it fails)."""
        with self._changed:
            return [job for job, _ in self._ready]

    def ready(self, limit: int, wait: float | None) -> list[tuple[Job, list[np.ndarray]]]:
        """Up to `limit` encoded jobs, oldest first; waits up to `wait` s for one when none is ready."""
        with self._changed:
            if not self._ready and wait:
                self._changed.wait(wait)
            taken = [self._ready.popleft() for _ in range(min(limit, len(self._ready)))]
            if taken:
                self._changed.notify_all()  # room to encode ahead again
        return taken

    def _loop(self) -> None:
        try:
            self._join_all()
        except Exception as exc:  # a bug: answer everyone instead of hanging them
            log.exception("joiner failed")
            self.engine._fail_all(f"joining failed: {type(exc).__name__}: {exc}")

    def _join_all(self) -> None:
        from ..runtime.decoding import source_batch

        while True:
            with self._changed:
                while len(self._ready) >= self._free_rows() + AHEAD:
                    self._changed.wait()
            jobs = self.engine._take(1, wait=None, hold=True)  # blocks until a job comes or the engine closes
            if not jobs:
                if self.engine.drained:
                    break
                continue
            job = jobs[0]
            if not job.in_rows:  # beam search and n-best: the engine's side lane decodes them
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
            with self._changed:
                self._ready.append((job, encoded))
                self._changed.notify_all()

