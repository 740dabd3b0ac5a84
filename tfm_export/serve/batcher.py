"""Decode engines behind the server: in-flight batching, and request-level batching to compare with.

Every engine (serve.jobs.Engine) owns one decode thread and a bounded queue of `Job`s. Tokens equal
the runner's `generate` of the job's request decoded directly (`Job.row`: the source's index in its
request, which seeds its sampling generators as in a direct call).

- `InflightBatcher`: one running batch of `max_batch` rows over the static-cache decoder
  (runtime.rows.open_rows). Between two decoder steps, waiting jobs are encoded into free rows and
  join at the next step; while every row is busy, a second thread encodes the next jobs ahead
  (serve.joiner), so a row that frees takes an encoded job at once. A row that emits EOS or reaches
  its `max_new_tokens` leaves at once and its row is reused. A job that arrives while others decode
  starts within one step. Greedy rows take the decoder's own next ids; rows that sample or use
  processors pick from the step's logits with their own runtime.search.TokenPicker. Beam search and
  n-best jobs need several cache rows reordered between steps: they go to a side thread
  (`SearchLane`) that decodes each with `generate`.
- `RequestBatcher`: collect jobs for `window_ms` (up to `max_batch`), decode that batch to its end
  with `generate_ids`, repeat. `max_batch=1` is one request at a time. The baselines of
  benchmarks/load.py; they work with any export (no static decoder needed). Jobs that are not plain
  greedy are decoded one at a time with `generate`.

Torch-free; no web framework here (serve.app puts HTTP around an engine).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

import numpy as np

from ..errors import InputError, TfmExportError
from ..runtime.decoding import source_batch
from ..runtime.search import TokenPicker
from ..runtime.generation import GREEDY
from .jobs import Closed, Engine, EngineConfig, Job, QueueFull, one_row
from .joiner import Joiner

__all__ = ["Closed", "ENGINES", "EngineConfig", "InflightBatcher", "Job", "QueueFull", "RequestBatcher", "one_row"]


class InflightBatcher(Engine):
    """In-flight (continuous) batching over runtime.static.RowBatch; see the module docstring."""

    name = "inflight"

    def __init__(self, model: Any, config: EngineConfig = EngineConfig()):
        from ..runtime.rows import open_rows, side_encoder
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
        side = side_encoder(model.cache)
        self.joiner = Joiner(self, lambda src: self.rows.encode(src, side), self.lane.submit,
                             lambda: self.config.max_batch - self.active)
        self.tokens = np.full(config.max_batch, cfg.tgt_pad_id, dtype=np.int64)  # (batch,) next input ids
        self.cache_len = np.zeros(config.max_batch, dtype=np.int64)  # (batch,) slots each row has filled

    def start(self) -> "Engine":
        self.lane.start()
        self.joiner.start()
        return super().start()

    def close(self, timeout: float | None = None) -> None:
        super().close(timeout)
        self.joiner.stop()
        self.lane.close(timeout)

    def _running(self) -> list[Job]:
        return [job for job in self.jobs if job is not None] + self.joiner.waiting()

    def fail_all(self, message: str) -> None:
        super().fail_all(message)
        self.joiner.stop()

    def _run_once(self) -> None:
        free = [row for row, job in enumerate(self.jobs) if job is None]
        was_full = not free
        ready = self.joiner.ready(len(free)) if free else []  # encoded by the joiner while every row was busy
        self.release(len(ready))
        for job, encoded in ready:
            if not job.cancelled:
                self._bind([free.pop(0)], [job], encoded)
        # Free rows take waiting jobs at once, encoded here (all threads): a job that arrives while
        # others decode starts at the next step. Idle: wait for one (or for the joiner's).
        wait = None if self.active == 0 else 0
        taken = self.take(len(free), wait, other_work=self.joiner.has_ready) if free else []
        joined = [job for job in taken if job.in_rows]
        if len(joined) < len(taken):
            self.lane.submit([job for job in taken if not job.in_rows])
        if joined:
            src = source_batch([job.ids for job in joined], self.model.config)  # (joined, src_len)
            self._bind(free[: len(joined)], joined, self.rows.encode(src))
        if not was_full and self.active == self.config.max_batch:
            self.joiner.poke()  # every row is busy now: time to encode ahead
        if self.active:
            self._step()

    def _bind(self, rows: list[int], jobs: list[Job], encoded: list[np.ndarray]) -> None:
        cfg = self.model.config
        self.rows.write(rows, encoded)
        for row, job in zip(rows, jobs):
            self.jobs[row] = job
            self.pickers[row] = None if job.config.is_greedy else TokenPicker(
                1, job.max_new_tokens, job.config, cfg, first_row=job.row)
            self.tokens[row], self.cache_len[row] = cfg.bos_id, 0
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
        self.rows.release(row)
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
        for job in self.take(1, wait=None):
            self.active = 1
            self._decode_alone(job)
            self.active = 0


class RequestBatcher(Engine):
    """Request-level batching: collect for window_ms, decode the batch to its end, repeat."""

    name = "request"

    def _run_once(self) -> None:
        jobs = self.take(self.config.max_batch, wait=None)
        deadline = time.perf_counter() + self.config.window_ms / 1000
        while jobs and len(jobs) < self.config.max_batch and (left := deadline - time.perf_counter()) > 0:
            jobs += self.take(self.config.max_batch - len(jobs), wait=left)
        for job in [job for job in jobs if not job.config.is_greedy]:
            self._decode_alone(job)
        jobs = [job for job in jobs if job.config.is_greedy]
        if not jobs:
            return
        self.active = len(jobs)
        try:
            # generate_ids decodes every row for the longest budget; each row is cut at its own below.
            # GREEDY by name: the export's defaults may be beam search, and these jobs are greedy.
            budget = max(job.max_new_tokens for job in jobs)
            rows = self.model.generate_ids([job.ids for job in jobs], config=GREEDY.replace(max_new_tokens=budget))
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
