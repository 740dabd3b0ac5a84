"""In-flight batching of Whisper windows: the windows of many recordings share every decoder step.

A recording is transcribed window by window, each window's prompt and start depending on the last one's
tokens (runtime.speech.longform), so a recording cannot be one job: each *window* is. A recording still
runs its long-form loop on a worker thread of its own (serve.transcriber), but its `WindowRunner` is
`WindowBatcher.runner`: the worker encodes the window itself (the encoder of a 30 s window is the costly
part of a window on CPU, and the workers' encodes overlap the decoder's steps), hands the encoder outputs
and the window's Whisper strategy to the batcher as a `WindowJob`, and waits for the strategy's results.
The batcher's one thread binds waiting jobs into free rows of the static-cache decoder between two steps
and steps all bound rows at once with runtime.inflight's loop, each group advancing by its own strategy
(greedy or beam search, the language detection's one step too) as a direct call's would: so the tokens
equal a direct `transcribe`. A window ends (EOS, its budget, its search done) and its rows free at once.

Windows of one recording run in order (the worker waits for each); recordings run in parallel, as many as
there are workers. A window whose prompt and budget do not fit the rows' slots (an export made with
fewer --static-slots than the decoder's max_target_positions) is decoded on the worker alone, on the
growing cache. Torch-free; no web framework here.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..runtime.decode.loop import run
from ..runtime.inflight import InflightRows, RowGroup
from ..runtime.speech.longform import WindowRunner
from .jobs import Cancelled, DecodeFailed, Engine, EngineConfig

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting worker looks whether its client went away


@dataclass(eq=False)
class WindowJob:
    """One window of one recording: its encoder outputs (1, ...) and the strategy that decodes it."""

    encoded: list[np.ndarray]
    strategy: Any  # a runtime.decode.loop.Strategy (Whisper's); the batcher advances it, the worker reads it
    gone: Callable[[], bool] = lambda: False  # the recording's client went away
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    @property
    def cancelled(self) -> bool:
        return self.gone()

    def emit(self, kind: str, value: Any) -> None:
        """Engine's answer: ("done", None) or ("error", message); the worker wakes either way."""
        if kind == "error":
            self.error = value
        self.done.set()


def positions(strategy: Any) -> int:
    """Cache slots a window's strategy may fill: its forced prompt, then its budget of new tokens (the last
    one chosen is never fed). transformers' budget is the folder's max_length past the prompt, up to
    max_target_positions: so an export with --static-slots max_target_positions fits every window."""
    return getattr(strategy, "begin_index", 1) + getattr(strategy, "steps", 1) - 1


class WindowBatcher(Engine):
    """In-flight rows of Whisper windows over the export's static-cache decoder; see the module docstring."""

    name = "inflight"

    def __init__(self, model: Any, config: EngineConfig = EngineConfig()):
        from ..runtime.states.host_rows import open_rows, side_encoder

        # its windows were admitted by the transcriber's bounded queue already (a worker waits for each)
        super().__init__(model, dataclasses.replace(config, max_queue=sys.maxsize))
        static = model.static_cache
        self.batch = InflightRows(open_rows(static, config.max_batch, model.config.src_len), model.config)
        self.slots = static.slots
        self._encoder = side_encoder(static)  # the workers' encodes run beside the decoder's steps
        self._prepared = threading.Event()
        self._warned = False  # _alone has said why a window decodes alone

    def runner(self, gone: Callable[[], bool] = lambda: False) -> WindowRunner:
        """One recording's WindowRunner (call it on the recording's worker thread); `gone()` True stops the
        window it waits for (Cancelled) and frees its rows. Equal consecutive windows (the language
        detection's and the first window's; a fallback's retry) are encoded once."""
        seen = threading.local()  # each thread's last window and its encoder outputs (a recording's VAD
        # chunks run on several threads with one runner: runtime.speech.batch)

        def run_window(window: np.ndarray, strategy: Any) -> Any:
            if strategy.finished:
                return strategy.results()
            if positions(strategy) > self.slots or strategy.rows > self.config.max_batch:
                self._alone(strategy)
                return run(self.model.growing, window[None], strategy)
            last = getattr(seen, "last", None)
            if last is None or not np.array_equal(last[0], window):
                seen.last = last = window, self.batch.rows.encode(np.ascontiguousarray(window[None]), self._encoder)
            return self._wait(WindowJob(last[1], strategy, gone))

        return run_window

    def _alone(self, strategy: Any) -> None:
        """Say once why windows decode alone (a server that never batches would look merely slow)."""
        if not self._warned:
            self._warned = True
            log.warning("a window needs %d cache slots and %d rows, the in-flight rows have %d slots and %d rows: "
                        "such windows decode alone (re-export with --static-slots %d, or raise --max-batch)",
                        positions(strategy), strategy.rows, self.slots, self.config.max_batch,
                        self.model.config.max_len)

    def _wait(self, job: WindowJob) -> Any:
        self.submit([job])  # type: ignore[list-item]
        while not job.done.wait(POLL_S):
            if job.cancelled:
                raise Cancelled("the client went away")
        if job.error is not None:
            raise DecodeFailed(job.error)
        if job.cancelled:
            raise Cancelled("the client went away")
        return job.strategy.results()

    def start(self) -> "Engine":
        super().start()
        self._prepared.wait()  # CUDA graphs are captured before any worker encodes (runtime.states.rows)
        return self

    def _prepare(self) -> None:
        try:
            self.batch.rows.capture()
        finally:
            self._prepared.set()

    def _running(self) -> list[Any]:
        return [group.owner for group in self.batch.bound_groups()]

    def _run_once(self) -> None:
        free = self.batch.free_rows()
        # idle: wait for a window; else take what fits now and step
        taken = self.take(len(free), None if self.active == 0 else 0, width=lambda job: job.strategy.rows)
        for job in taken:
            rows = [free.pop(0) for _ in range(job.strategy.rows)]
            self.batch.join(RowGroup(job, rows, job.strategy), job.encoded)
            self.active += len(rows)
        if self.active:
            self.batch.step(self._ended)

    def _ended(self, group: RowGroup, chosen: np.ndarray) -> bool:
        """True when the window leaves its rows: its strategy finished (the worker reads the results), or
        its client went away."""
        job = group.owner
        if not (group.finished or job.cancelled):
            return False
        self.active -= len(group.rows)
        job.emit("done", None)
        return True
