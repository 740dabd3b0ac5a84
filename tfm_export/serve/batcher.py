"""Decode engines behind the server: in-flight batching, and request-level batching to compare with.

Every engine owns one decode thread and a bounded queue. `submit` hands it `Job`s (one source each,
with its GenerationConfig); the thread calls each job's `emit` with ("token", id) per generated token
(EOS is not emitted), then ("done", hypotheses) or ("error", message). `hypotheses` is None for plain
greedy jobs (no score is computed) and the job's `num_return_sequences` Hypothesis (ids, score) else.
Tokens equal the runner's `generate` of the job's request decoded directly (`Job.row`: the source's
index in its request, which seeds its sampling generators as in a direct call).

- `InflightBatcher`: one running batch of `max_batch` rows over the static-cache decoder
  (runtime.static.RowBatch). Between two decoder steps, waiting jobs are encoded into free rows and
  join at the next step; a row that emits EOS or reaches its `max_new_tokens` leaves at once and its
  row is reused. A job that arrives while others decode starts within one step. Greedy rows take the
  decoder's own next ids; rows that sample or use processors pick from the step's logits with their
  own runtime.search.TokenPicker. Beam search and n-best jobs need several cache rows reordered
  between steps: they go to a side thread (`SearchLane`) that decodes each with `generate`.
- `RequestBatcher`: collect jobs for `window_ms` (up to `max_batch`), decode that batch to its end
  with `generate_ids`, repeat. `max_batch=1` is one request at a time. The baselines of
  benchmarks/load.py; they work with any export (no static decoder needed). Jobs that are not plain
  greedy are decoded one at a time with `generate`.

Torch-free; no web framework here (serve.app puts HTTP around an engine).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import InputError, TfmExportError
from ..runtime.generation import GenerationConfig, Hypothesis
from ..runtime.search import TokenPicker

log = logging.getLogger(__name__)

Emit = Callable[[str, Any], None]  # ("token", id) | ("done", list[Hypothesis] | None) | ("error", message)
GREEDY = GenerationConfig()


class QueueFull(TfmExportError):
    """The engine's queue holds max_queue jobs already (HTTP 429: retry later)."""


class Closed(TfmExportError):
    """The engine is shutting down and takes no new jobs (HTTP 503)."""


@dataclass(frozen=True)
class EngineConfig:
    """How an engine batches."""

    max_batch: int = 8  # rows decoded together (in-flight: the bound rows of the static cache)
    max_queue: int = 64  # jobs waiting for a row; more are refused with QueueFull
    window_ms: float = 5.0  # request-level batching only: how long the first job waits for others
    # Longest source accepted (None: the model's max_len). In-flight rows are sized to it: every
    # step's cross attention spans it, so a server whose sources are short runs faster with less.
    max_src_len: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_src_len"):
            if (getattr(self, name) or 1) < 1:
                raise InputError(f"{{{name}}} must be at least 1, got {getattr(self, name)}",
                                 options={name: None})


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

    @property
    def in_rows(self) -> bool:
        return one_row(self.config)

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
        self.tokens_total = 0  # tokens emitted since start
        self._thread = threading.Thread(target=self._loop, name=f"tfm-export-{self.name}", daemon=True)

    def start(self) -> "Engine":
        self._thread.start()
        return self

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def submit(self, jobs: list[Job]) -> None:
        """Queue jobs, all or none: QueueFull when they do not fit, Closed when shutting down."""
        with self._wake:
            if not self._accepting:
                raise Closed("the server is shutting down; send the request to another replica")
            if len(self._queue) + len(jobs) > self.config.max_queue:
                raise QueueFull(f"the queue is full ({{max_queue}} = {self.config.max_queue} waiting sources); "
                                f"retry later", options={"max_queue": None})
            self._queue.extend(jobs)
            self._wake.notify()

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting, finish every queued and running job, then stop the thread."""
        with self._wake:
            self._accepting = False
            self._wake.notify()
        self._thread.join(timeout)

    def _take(self, limit: int, wait: float | None) -> list[Job]:
        """Up to `limit` queued jobs that are still wanted; waits up to `wait` s (None: until one comes)."""
        with self._wake:
            if not self._queue and self._accepting and wait != 0:
                self._wake.wait(wait)
            jobs = []
            while self._queue and len(jobs) < limit:
                job = self._queue.popleft()
                if not job.cancelled:
                    jobs.append(job)
            return jobs

    def _idle_and_closed(self) -> bool:
        with self._wake:
            return not self._accepting and not self._queue and self.active == 0

    def _loop(self) -> None:
        try:
            while not self._idle_and_closed():
                self._run_once()
        except Exception as exc:  # a bug or an ORT failure: answer everyone instead of hanging them
            log.exception("decode loop failed")
            self._fail_all(f"decoding failed: {type(exc).__name__}: {exc}")

    def _fail_all(self, message: str) -> None:
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


class InflightBatcher(Engine):
    """In-flight (continuous) batching over runtime.static.RowBatch; see the module docstring."""

    name = "inflight"

    def __init__(self, model: Any, config: EngineConfig = EngineConfig()):
        from ..runtime.rows import open_rows
        from ..runtime.static import StaticCache

        if not isinstance(model.cache, StaticCache):
            raise InputError(f"{model.folder} is not opened with its static-cache decoder; in-flight batching "
                             f"needs decoder_static.onnx: re-export with --cuda-graph, or use request-level "
                             f"{{batching}}", options={"batching": "request"})
        super().__init__(model, config)
        cfg = model.config
        width = min(config.max_src_len or cfg.max_len, cfg.max_len)
        self.rows = open_rows(model.cache, config.max_batch, width)  # every row holds up to `width` source tokens
        self.jobs: list[Job | None] = [None] * config.max_batch  # (batch,): the job in each row
        self.pickers: list[TokenPicker | None] = [None] * config.max_batch  # rows that pick from logits
        self.lane = SearchLane(model, config)  # beam search and n-best jobs, decoded beside the rows
        self.tokens = np.full(config.max_batch, cfg.tgt_pad_id, dtype=np.int64)  # (batch,) next input ids
        self.cache_len = np.zeros(config.max_batch, dtype=np.int64)  # (batch,) slots each row has filled

    def start(self) -> "Engine":
        self.lane.start()
        return super().start()

    def close(self, timeout: float | None = None) -> None:
        super().close(timeout)
        self.lane.close(timeout)

    def _running(self) -> list[Job]:
        return [job for job in self.jobs if job is not None]

    def _run_once(self) -> None:
        free = [row for row, job in enumerate(self.jobs) if job is None]
        # Idle: block until a job arrives; busy: only pick up what is already waiting.
        taken = self._take(len(free), wait=None if self.active == 0 else 0) if free else []
        joined = [job for job in taken if job.in_rows]
        if len(joined) < len(taken):
            self.lane.submit([job for job in taken if not job.in_rows])
        if joined:
            self._bind(free[: len(joined)], joined)
        if self.active:
            self._step()

    def _bind(self, rows: list[int], jobs: list[Job]) -> None:
        from ..runtime.decoding import source_batch

        cfg = self.model.config
        self.rows.bind(rows, source_batch([job.ids for job in jobs], cfg))
        for row, job in zip(rows, jobs):
            self.jobs[row] = job
            self.pickers[row] = None if job.config.is_greedy else TokenPicker(
                1, job.max_new_tokens, job.config, cfg, first_row=job.row)
        self.tokens[rows], self.cache_len[rows] = cfg.bos_id, 0
        self.active += len(jobs)

    def _step(self) -> None:
        next_ids = self.rows.step(self.tokens, self.cache_len)  # (batch,)
        # (batch, tgt_vocab) to the host only when a row samples or runs processors
        logits = self.rows.logits() if any(self.pickers) else None
        for row, job in enumerate(self.jobs):
            if job is None:
                continue
            picker = self.pickers[row]
            token = int(next_ids[row]) if picker is None else int(picker.advance(logits[row: row + 1])[0][0])
            if self._token(job, token):
                self._finish(job, None if picker is None else picker.results()[0])
                self._leave(row)
            else:
                self.tokens[row], self.cache_len[row] = token, self.cache_len[row] + 1

    def _leave(self, row: int) -> None:
        """Free a row at once: it idles (pad at slot 0) until the next job is bound into it."""
        self.jobs[row], self.pickers[row] = None, None
        self.tokens[row], self.cache_len[row] = self.model.config.tgt_pad_id, 0
        self.active -= 1


class SearchLane(Engine):
    """Beside the in-flight rows: beam search and n-best jobs, each decoded alone with `generate`
    (growing cache, rows reordered on the device) on a thread of its own."""

    name = "search-lane"

    def __init__(self, model: Any, config: EngineConfig):
        # its jobs were admitted by the batcher's bounded queue already
        super().__init__(model, dataclasses.replace(config, max_queue=sys.maxsize))

    def _run_once(self) -> None:
        for job in self._take(1, wait=None):
            self.active = 1
            self._decode_alone(job)
            self.active = 0


class RequestBatcher(Engine):
    """Request-level batching: collect for window_ms, decode the batch to its end, repeat."""

    name = "request"

    def _run_once(self) -> None:
        jobs = self._take(self.config.max_batch, wait=None)
        deadline = time.perf_counter() + self.config.window_ms / 1000
        while jobs and len(jobs) < self.config.max_batch and (left := deadline - time.perf_counter()) > 0:
            jobs += self._take(self.config.max_batch - len(jobs), wait=left)
        for job in [job for job in jobs if not job.config.is_greedy]:
            self._decode_alone(job)
        jobs = [job for job in jobs if job.config.is_greedy]
        if not jobs:
            return
        self.active = len(jobs)
        try:
            # generate_ids decodes every row for the longest budget; each row is cut at its own below
            rows = self.model.generate_ids([job.ids for job in jobs], max(job.max_new_tokens for job in jobs))
        except TfmExportError as exc:
            for job in jobs:
                job.emit("error", str(exc))
            rows = []
        for job, row in zip(jobs, rows):
            for token in row[: job.max_new_tokens]:
                if self._token(job, token):
                    break
            self._finish(job)
        self.active = 0


ENGINES = {"inflight": InflightBatcher, "request": RequestBatcher}
