"""Jobs and the engine every decode loop of the server runs on: a bounded queue and one thread.

`submit` hands an engine `Job`s (one source each, with its GenerationConfig); the thread calls each
job's `emit` with ("token", id) per generated token (EOS is not emitted), then ("done", hypotheses)
or ("error", message). `hypotheses` is None for plain greedy jobs (no score is computed) and the
job's `num_return_sequences` Hypothesis (ids, score) else. The engines themselves (how jobs are
batched) are serve.batcher's. Torch-free; no web framework here.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import InputError, TfmExportError
from ..runtime.options.generation import GREEDY, GenerationConfig, Hypothesis

log = logging.getLogger(__name__)

Emit = Callable[[str, Any], None]  # ("token", id) | ("done", list[Hypothesis] | None) | ("error", message)


class QueueFull(TfmExportError):
    """The engine's queue holds max_queue jobs already (HTTP 429: retry later)."""


class Closed(TfmExportError):
    """The engine is shutting down and takes no new jobs (HTTP 503)."""


class DecodeFailed(TfmExportError):
    """The decode loop failed (a bug or an ORT error) and answered every job with this (HTTP 500)."""


class Cancelled(TfmExportError):
    """The client went away: its work stops at the next step it can (a transcription's next window)."""


# Where speculating stops paying: each speculating request makes decoder calls of its own while plain rows share
# one step, so past some load a plain row's share of the step costs less per id than the request's checks. Measured
# (BENCHMARKS.md, "Speculative decoding", served: every prompt-lookup request speculating, the copy-heavy BART, 8
# rows, 2 CPU threads, a noisy shared machine): 2.07x plain rows with 2 requests at a time, 1.11x at 4, 1.01-1.40x
# at 6, 0.69-0.93x with 20 queued (8 speculating at once). On a GPU a step costs about the same at any n rows, so
# a row's share falls as 1 / n and the break-even should come sooner (not measured there): lower it with serve
# --speculate-below.
SPECULATE_BELOW = 6


@dataclass(frozen=True)
class EngineConfig:
    """How an engine batches."""

    max_batch: int = 8  # rows decoded together (in-flight: the bound rows of the static cache)
    max_queue: int = 64  # jobs waiting for a row; more are refused with QueueFull
    window_ms: float = 5.0  # request-level batching only: how long the first job waits for others
    # Longest source accepted (None: the model's max_len). In-flight rows are sized to it: every
    # step's cross attention spans it, so a server whose sources are short runs faster with less.
    max_src_len: int | None = None
    # In-flight only: a prompt-lookup request speculates when fewer rows than this are in flight or queued as
    # it joins (it included), else it decodes as a plain row (serve.batcher.InflightBatcher.speculating; 0: never).
    speculate_below: int = SPECULATE_BELOW

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_src_len"):
            if (getattr(self, name) or 1) < 1:
                raise InputError(f"{{{name}}} must be at least 1, got {getattr(self, name)}",
                                 options={name: None})
        if self.speculate_below < 0:
            raise InputError(f"{{speculate_below}} must be at least 0, got {self.speculate_below}",
                             options={"speculate_below": None})


def one_row(config: GenerationConfig) -> bool:
    """One cache row is enough: no beams to reorder, one sequence (greedy, sampling, processors)."""
    return config.num_beams == 1 and config.num_return_sequences == 1


@dataclass(eq=False)
class Job:
    """One source to decode: ids (no padding), its token budget and where its results go."""

    ids: list[int]
    max_new_tokens: int
    emit: Emit
    config: GenerationConfig = GREEDY  # how to decode (its max_new_tokens is ignored: the field above counts)
    row: int = 0  # the source's index in its request: sampling draws from that row's generators
    cancelled: bool = False  # set by the caller (client gone): the engine drops it at its next step
    submitted: float = field(default_factory=time.perf_counter)
    produced: int = 0  # tokens emitted so far

    def cancel(self) -> None:
        self.cancelled = True

    def decode_alone(self, model: Any) -> list[Hypothesis]:
        """This job's hypotheses from `generate`, exactly as in a direct call on its whole request."""
        config = dataclasses.replace(self.config, max_new_tokens=self.max_new_tokens)
        return model.generate([self.ids], config, row_offset=self.row * config.num_return_sequences)[0]


class Engine:
    """The queue, the thread and the counters shared by the engines; subclasses implement `_run_once`."""

    name = "engine"

    def __init__(self, model: Any, config: EngineConfig = EngineConfig()):
        self.model, self.config, self.eos = model, config, model.config.eos_id
        self._queue: deque[Job] = deque()
        self._wake = threading.Condition()
        self._accepting, self._stopped = True, False
        self.active = 0  # jobs being decoded now (batch occupancy = active / max_batch)
        self.held = 0  # jobs taken with hold=True (serve.joiner: being encoded) and not yet released
        self.tokens_total = 0  # tokens emitted since start
        self._thread = threading.Thread(target=self._loop, name=f"tfm-export-{self.name}", daemon=True)

    def start(self) -> "Engine":
        self._thread.start()
        return self

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def head(self) -> Job | None:
        """The next queued job that is still wanted (None: none)."""
        with self._wake:
            return next((job for job in self._queue if not job.cancelled), None)

    def free_rows(self) -> list[int]:
        """Batch rows free now (engines without rows: none)."""
        return []

    def submit(self, jobs: list[Job]) -> None:
        """Queue jobs, all or none: QueueFull when they do not fit, Closed when shutting down."""
        with self._wake:
            if not self._accepting:
                raise Closed("the server is shutting down; send the request to another replica")
            if len(self._queue) + len(jobs) > self.config.max_queue:
                raise QueueFull(f"the queue is full ({{max_queue}} = {self.config.max_queue} waiting sources); "
                                f"retry later", options={"max_queue": None})
            self._queue.extend(jobs)
            self._wake.notify_all()  # the decode loop or the in-flight engine's joiner may be waiting

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting, finish every queued and running job, then stop the thread."""
        with self._wake:
            self._accepting = False
            self._wake.notify_all()  # every thread that waits in take
        self._thread.join(timeout)

    @property
    def drained(self) -> bool:
        """Closing and nothing left in the queue: whoever takes jobs can stop."""
        with self._wake:
            return not self._accepting and not self._queue

    def announce(self, change: Callable[[], None]) -> None:
        """Run `change` (it makes some `take` caller's other_work True) under the queue's lock, then wake
        every waiter: a waiter checks other_work under that lock, so it cannot sleep through the change."""
        with self._wake:
            change()
            self._wake.notify_all()

    def release(self, count: int) -> None:
        """`count` held jobs are decoding now or answered (see `take`)."""
        with self._wake:
            self.held -= count

    def take(self, limit: int, wait: float | None, hold: bool = False,
             other_work: Callable[[], bool] | None = None, width: Callable[[Job], int] | None = None) -> list[Job]:
        """Queued jobs that are still wanted, in order, up to `limit` rows; waits up to `wait` s (None:
        until one comes). `width`: the rows a job takes (default 1; 0: none, taken whatever the limit).

        `hold`: the jobs count as held until `release`d, so the engine does not stop while a job is
        out of the queue but not yet decoding (taken on another thread than the decode loop's).
        `other_work`: no wait while it is True; whoever makes it True does so through `announce`."""
        width = width or (lambda job: 1)
        with self._wake:
            head = self._queue[0] if self._queue else None
            takeable = head is not None and (head.cancelled or width(head) <= limit)
            if not takeable and self._accepting and wait != 0 and not (other_work and other_work()):
                self._wake.wait(wait)
            jobs, rows = [], 0
            while self._queue:
                job = self._queue[0]
                if not job.cancelled and rows + width(job) > limit:
                    break  # first come, first served: a later, narrower job does not overtake it
                self._queue.popleft()
                if not job.cancelled:
                    jobs.append(job)
                    rows += width(job)
            self.held += len(jobs) if hold else 0
            return jobs

    def _idle_and_closed(self) -> bool:
        with self._wake:
            return not self._accepting and not self._queue and self.active == 0 and self.held == 0

    def _prepare(self) -> None:
        """First work of the decode thread, before any job (InflightBatcher: its CUDA graphs)."""

    def _loop(self) -> None:
        try:
            self._prepare()
            while not self._idle_and_closed():
                self._run_once()
        except Exception as exc:  # a bug or an ORT failure: answer everyone instead of hanging them
            log.exception("decode loop failed")
            self.fail_all(f"decoding failed: {type(exc).__name__}: {exc}")

    def fail_all(self, message: str) -> None:
        """Stop accepting and answer every queued and running job with an error (the engine is broken)."""
        with self._wake:
            self._accepting = False
            jobs, self._queue = [*self._queue, *self._running()], deque()
        for job in jobs:
            job.emit("error", message)

    def _running(self) -> list[Job]:
        return []

    def _run_once(self) -> None:
        raise NotImplementedError

    def _token(self, job: Job, token: int) -> bool:
        """Record one generated id; True when the job has ended (EOS, budget reached or cancelled)."""
        if job.cancelled or token == self.eos:
            return True
        job.produced += 1
        self.tokens_total += 1
        job.emit("token", token)
        return job.produced >= job.max_new_tokens

    @staticmethod
    def _finish(job: Job, hypotheses: list[Hypothesis] | None = None) -> None:
        if not job.cancelled:  # a cancelled job's client is gone
            job.emit("done", hypotheses)

    def _decode_alone(self, job: Job) -> None:
        """A job that is not decoded in a shared batch: `generate` on its own, tokens sent at the end."""
        try:
            hypotheses = job.decode_alone(self.model)
        except TfmExportError as exc:
            job.emit("error", str(exc))
            return
        for token in hypotheses[0].ids:
            if self._token(job, token):
                break
        self._finish(job, hypotheses)
