"""Windows of several transcriptions decoded together, in rounds (issue #60). Torch-free.

A transcription runs window by window (runtime.speech.longform), each window's prompt depending on the
windows before it, so the windows of several recordings (the VAD chunks of one, or several files) cannot be
known up front. Each transcription therefore runs its own loop on a worker thread, as the server's do
(serve.windows), with `WindowRounds.run_window` as its WindowRunner: a worker hands its window and strategy
over and waits. Once every live worker waits, the round's windows are decoded together on the thread that
came last: their encoder in one batch (batch, n_mels, frames), then every window's strategy over its own
rows of one decoder state (`decode_together`: each strategy reads its rows of each step, forces its own
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

from ..decode.loop import DecoderCache, Strategy, moved
from ..decode.processors import BiasKey
from .longform import WindowRunner

__all__ = ["WindowRounds", "decode_together", "run_jobs"]


class _Step:
    """One decoder step of the state, read once however many strategies read it."""

    def __init__(self, state: Any):
        self.state, self.device_top = state, state.device_top
        self._ids: np.ndarray | None = None
        self._logits: np.ndarray | None = None
        self._tops: dict[tuple[Any, int, bool], tuple[np.ndarray, np.ndarray]] = {}

    def next_ids(self) -> np.ndarray:
        if self._ids is None:
            self._ids = self.state.next_ids()
        return self._ids

    def logits(self) -> np.ndarray:
        if self._logits is None:
            self._logits = self.state.logits()
        return self._logits

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        key = (bias, width, renormalize)
        if key not in self._tops:
            self._tops[key] = self.state.top(bias, width, renormalize)
        return self._tops[key]


class _Rows:
    """A runtime.decode.loop.StepView of one strategy's rows [start, end) of a step."""

    def __init__(self, step: _Step, start: int, end: int):
        self.step, self.rows, self.device_top = step, slice(start, end), step.device_top

    def next_ids(self) -> np.ndarray:
        return self.step.next_ids()[self.rows]

    def logits(self) -> np.ndarray:
        return self.step.logits()[self.rows]

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        logp, ids = self.step.top(bias, width, renormalize)
        return logp[self.rows], ids[self.rows]


def decode_together(cache: DecoderCache, windows: Sequence[np.ndarray], strategies: Sequence[Strategy]) -> None:
    """Decode each window with its strategy (one source each, all of the same rows per source), in one
    decoder state: its rows i*rows .. i*rows + rows-1 are window i's. The strategies hold the results."""
    widths = {strategy.rows for strategy in strategies}
    assert len(widths) == 1, "decode_together: windows of one width (rows per source) only"
    width = widths.pop()
    starts = [i * width for i in range(len(strategies))]
    with cache.lock:
        state = cache.start(np.stack([np.asarray(w, np.float32) for w in windows]), width)
        tokens = np.concatenate([np.full(width, s.bos_id, dtype=np.int64) for s in strategies])
        while not all(s.finished for s in strategies):
            state.step(tokens)
            step, order = _Step(state), None
            for strategy, start in zip(strategies, starts):
                if strategy.finished:  # its rows idle on their last token
                    continue
                chosen, beam_idx = strategy.advance(_Rows(step, start, start + width))
                tokens[start:start + width] = chosen
                if not strategy.finished and moved(beam_idx):
                    order = np.arange(len(tokens)) if order is None else order
                    order[start:start + width] = np.asarray(beam_idx) + start
            if order is not None:
                state.reorder(order)


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
