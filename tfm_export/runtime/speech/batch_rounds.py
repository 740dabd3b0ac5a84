"""Windows of several transcriptions decoded together, in rounds (issue #60). Torch-free.

A transcription runs window by window (runtime.speech.longform), each window's prompt depending on the
windows before it, so the windows of several recordings (the VAD chunks of one, or several files) cannot be
known up front. Each transcription therefore runs its own loop on a worker thread, as the server's do
(serve.windows), with `WindowRounds.run_window` as its WindowRunner: a worker hands its window and strategy
over and waits. Once every live worker waits, the round's windows are decoded together on the thread that
came last: their encoder in one batch (batch, n_mels, frames), then every window's strategy over its own
rows of one decoder state (`decode_together`, runtime.decode.together: each strategy reads its rows of each step, forces its own
prompt, ends on its own), the rows of the windows that end idling until the longest is done. So a round
of n windows costs one encoder call and the decoder steps of its longest window, each of batch n; and a
window's tokens are those of the window decoded alone (its rows see only its own tokens and features).

`run_jobs` runs the transcriptions on up to `workers` threads, their answers in order; the first error
stops the rest and is raised.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..decode.loop import DecoderCache, Strategy, run
from ..decode.together import Together
from .longform import WindowRunner

__all__ = ["WindowRounds", "decode_together", "run_jobs"]


def decode_together(cache: DecoderCache, windows: Sequence[np.ndarray], strategies: Sequence[Strategy]) -> None:
    """Decode each window with its strategy (one source each, all of the same rows per source), in one
    decoder state through the one loop (runtime.decode.together): its rows i*rows .. i*rows + rows-1 are
    window i's. The strategies hold the results."""
    run(cache, np.stack([np.asarray(w, np.float32) for w in windows]), Together(strategies))


class _Waiting:
    def __init__(self, window: np.ndarray, strategy: Strategy):
        self.window, self.strategy = window, strategy
        self.done, self.error = False, None  # type: bool, BaseException | None


class WindowRounds:
    """The WindowRunner shared by `workers` threads (the module docstring): a round is decoded once every
    live worker waits; `leave()` when a worker has no more work."""

    def __init__(self, cache: DecoderCache, workers: int):
        self.cache = cache
        self._live = workers
        self._waiting: list[_Waiting] = []
        self._cond = threading.Condition()
        self.rounds = 0  # decoded so far (tests and logs)

    def run_window(self, window: np.ndarray, strategy: Strategy) -> Any:
        if strategy.finished:
            return strategy.results()
        waiting = _Waiting(window, strategy)
        with self._cond:
            self._waiting.append(waiting)
            self._flush()
            while not waiting.done:
                self._cond.wait()
        if waiting.error is not None:
            raise waiting.error
        return strategy.results()

    def leave(self) -> None:
        with self._cond:
            self._live -= 1
            self._flush()

    def _flush(self) -> None:
        """With the lock held: decode the round once no live worker is still working."""
        if not self._waiting or len(self._waiting) < self._live:
            return
        batch, self._waiting = self._waiting, []
        try:
            by_width: dict[int, list[_Waiting]] = {}
            for waiting in batch:  # language detection (one row) and beam searches (k rows) apart
                by_width.setdefault(waiting.strategy.rows, []).append(waiting)
            for group in by_width.values():
                decode_together(self.cache, [w.window for w in group], [w.strategy for w in group])
            self.rounds += 1
        except BaseException as exc:  # every waiting worker raises it
            for waiting in batch:
                waiting.error = exc
        for waiting in batch:
            waiting.done = True
        self._cond.notify_all()


def run_jobs(jobs: Sequence[Callable[[WindowRunner], Any]], workers: int, cache: DecoderCache | None = None,
             runner: WindowRunner | None = None) -> list[Any]:
    """Each job(runner) on one of up to `workers` threads, the answers in the jobs' order. The runner is
    `runner` when given (a thread-safe one: the server's in-flight windows), else the threads' WindowRounds
    over `cache`. The first job to raise stops the others (at their next job) and its error is raised."""
    workers = max(1, min(workers, len(jobs)))
    rounds = None if runner is not None else WindowRounds(cache, workers)  # type: ignore[arg-type]
    run_window = runner if rounds is None else rounds.run_window
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    pending = iter(range(len(jobs)))
    lock = threading.Lock()

    def work() -> None:
        try:
            while not errors:
                with lock:
                    index = next(pending, None)
                if index is None:
                    return
                try:
                    results[index] = jobs[index](run_window)
                except BaseException as exc:
                    errors.append(exc)
        finally:
            if rounds is not None:
                rounds.leave()

    threads = [threading.Thread(target=work, name=f"transcribe-batch-{n}", daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
