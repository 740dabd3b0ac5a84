"""Decode engines behind the server: in-flight batching, and request-level batching to compare with.

Every engine (serve.jobs.Engine) owns one decode thread and a bounded queue of `Job`s. Tokens equal
the runner's `generate` of the job's request decoded directly (`Job.row`: the source's index in its
request, which seeds its sampling generators as in a direct call).

- `InflightBatcher`: one running batch of `max_batch` rows over the static-cache decoder
  (runtime.states.host_rows.open_rows). Each job takes a group of rows (runtime.inflight, which steps them): one
  for greedy decoding and one sample, k for a beam search of k beams or k samples, whose strategies
  all share one decoder step; a beam group's cache rows are gathered in its beams' order. Between
  two steps, waiting jobs are encoded into free rows and join at the next step; while the next job
  does not fit, a second thread encodes it ahead (serve.joiner), so rows that free take it at once.
  A group that ends (EOS, its `max_new_tokens`, its search done) leaves at once and its rows are
  reused. Jobs wider than the batch or longer than its rows' slots go to a side thread
  (`SearchLane`) that decodes each with `generate`. A greedy job with prompt lookup speculates on a
  checking state of its own while the rows are not busy (`InflightBatcher.speculating`:
  EngineConfig.speculate_below), else it decodes as a plain row, with the same ids.
- `RequestBatcher`: collect jobs for `window_ms` (up to `max_batch`), decode that batch to its end,
  repeat: plain greedy jobs together with `generate_ids`, beam jobs of the same settings together
  with `generate`, others one at a time. `max_batch=1` is one request at a time. The baselines of
  `python -m benchmarks load`; they work with any export (no static decoder needed).

Torch-free; no web framework here (serve.app puts HTTP around an engine).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Any

import numpy as np

from ..errors import InputError, TfmExportError
from ..runtime.options.generation import GREEDY, GenerationConfig, Hypothesis
from ..runtime.inflight import InflightRows, RowGroup, group_width, speculates
from ..runtime.sources import source_batch
from .jobs import Closed, Engine, EngineConfig, Job, QueueFull, one_row
from .joiner import Joiner

__all__ = ["Closed", "ENGINES", "EngineConfig", "InflightBatcher", "Job", "QueueFull", "RequestBatcher", "one_row"]


class InflightBatcher(Engine):
    """In-flight (continuous) batching over runtime.inflight.InflightRows; see the module docstring."""

    name = "inflight"

    def __init__(self, model: Any, config: EngineConfig = EngineConfig()):
        from ..runtime.states.host_rows import open_rows, side_encoder

        static = model.static_cache
        if static is None:
            raise InputError(f"{model.folder} is not opened with its static-cache decoder; in-flight batching "
                             f"needs decoder_static.onnx: re-export with --static-slots N, or use request-level "
                             f"{{batching}}", options={"batching": "request"})
        super().__init__(model, config)
        cfg = model.config
        width = min(config.max_src_len or cfg.max_len, cfg.max_len)
        # every row holds up to `width` source tokens
        self.batch = InflightRows(open_rows(static, config.max_batch, width), cfg)
        self.slots = static.slots  # the longest output a row can hold
        self.checking = model.checking_cache()  # where prompt-lookup requests speculate (None: they decode plainly)
        self.declined = 0  # prompt-lookup requests bound as plain rows because the rows were busy (`speculating`)
        self.lane = SearchLane(model, config)  # jobs wider than the batch or longer than the rows' slots
        side = side_encoder(static)
        self.joiner = Joiner(self, lambda src: self.rows.encode(src, side), self.lane.submit, self.rows_for)
        self._prepared = threading.Event()  # set by the decode thread once its graphs are captured

    @property
    def rows(self) -> Any:
        """The decoder rows (runtime.states.rows.Rows) the groups are bound in."""
        return self.batch.rows

    @rows.setter
    def rows(self, rows: Any) -> None:
        self.batch.rows = rows

    def rows_for(self, job: Job) -> int:
        """Rows `job` takes in the batch; 0 when it does not fit (the search lane decodes it)."""
        rows, config = group_width(job.config), job.config
        if config.prompt_lookup_num_tokens and config.do_sample:  # speculative sampling: generate's own draws
            return 0
        return rows if rows <= self.config.max_batch and job.max_new_tokens <= self.slots else 0

    def free_rows(self) -> list[int]:
        """The rows no job holds now (the joiner asks, to encode the next job ahead while it does not fit)."""
        return self.batch.free_rows()

    def start(self) -> "Engine":
        super().start()
        # The helpers start once the decode thread has captured its CUDA graphs: a capture fails if
        # another thread of the process uses the GPU meanwhile (runtime.states.rows.RowBatch.capture).
        self._prepared.wait()
        self.lane.start()
        self.joiner.start()
        return self

    def _prepare(self) -> None:
        try:
            self.rows.capture()
        finally:
            self._prepared.set()  # on failure too: _loop answers every job with the error

    def close(self, timeout: float | None = None) -> None:
        super().close(timeout)
        self.joiner.stop()
        self.lane.close(timeout)

    def _running(self) -> list[Job]:
        return [group.owner for group in self.batch.bound_groups()] + self.joiner.waiting()

    def fail_all(self, message: str) -> None:
        super().fail_all(message)
        self.joiner.stop()

    def _run_once(self) -> None:
        free = self.batch.free_rows()
        ready = self.joiner.ready(len(free))  # encoded by the joiner while the next job did not fit
        self.release(len(ready))
        load = self._load(sum(self.rows_for(job) for job, _ in ready))
        for job, encoded in ready:
            if not job.cancelled:
                self._bind(free, job, encoded, load)
        # Free rows take waiting jobs at once, encoded here (all threads): a job that arrives while
        # others decode starts at the next step. Idle: wait for one (or for the joiner's).
        # Jobs the joiner holds came first: nothing newer is taken until they are bound (else narrower
        # jobs could keep taking the rows a beam group waits for).
        wait = None if self.active == 0 else 0
        taken = self.take(0 if self.held else len(free), wait, other_work=self.joiner.has_ready, width=self.rows_for)
        self.lane.submit([job for job in taken if not self.rows_for(job)])
        joined = [job for job in taken if self.rows_for(job)]
        if joined:
            src = source_batch([job.ids for job in joined], self.model.config)  # (joined, src_len)
            encoded = self.rows.encode(src)
            load = self._load(sum(self.rows_for(job) for job in joined))
            for n, job in enumerate(joined):
                self._bind(free, job, [value[n:n + 1] for value in encoded], load)
        self.joiner.poke()  # the rows changed: the joiner looks again whether to encode ahead
        if self.active:
            self.batch.step(self._ended)

    def speculation_counts(self) -> dict[str, int]:
        """/metrics' prompt-lookup counters (serve.metrics): ids drafted and accepted in the rows, and the
        requests decoded as plain rows because the rows were busy."""
        spec = self.batch.speculation
        return {"drafted": spec.drafted, "accepted": spec.accepted, "declined": self.declined}

    def _load(self, joining: int) -> int:
        """Rows in flight once `joining` rows are bound, plus the jobs waiting (queued, or encoded ahead)."""
        return self.active + joining + self.queue_depth + len(self.joiner.waiting())

    def speculating(self, job: Job, load: int) -> bool:
        """Whether `job` speculates (runtime.inflight.speculates) at this `load` (`_load`, counted once per round
        of joins, so jobs that join together decide alike). The rule: below config.speculate_below. Each
        speculating request makes decoder calls of its own, one after the other, while plain rows share one step;
        past the break-even (jobs.SPECULATE_BELOW) a plain row's share of the step costs less per id than the
        request's checks, and greedy's ids are the same either way. Decided once, as the job joins: its cache is
        then the growing decoder's or the rows', and moving a past between them is not clean."""
        if not speculates(job.config, self.checking):
            return False
        if load < self.config.speculate_below:
            return True
        self.declined += 1
        return False

    def _bind(self, free: list[int], job: Job, encoded: list[np.ndarray], load: int) -> None:
        """One job's encoder outputs (1, ...) into as many of the `free` rows as it takes; `load`: `_load`'s."""
        rows, cfg = [free.pop(0) for _ in range(self.rows_for(job))], self.model.config
        if self.speculating(job, load):  # its row decodes on a checking state (prompt lookup)
            src = self.model.source_input([job.ids])  # (1, src_len): what the proposer reads; encoded already
            state = self.batch.checking_state(self.checking, encoded, src.shape[1])
            group = RowGroup.speculating(job, rows, job.config, job.max_new_tokens, cfg, state, src,
                                         self.batch.speculation)
        else:
            group = RowGroup.start(job, rows, job.config, job.max_new_tokens, cfg, job.row)
        self.batch.join(group, encoded)
        self.active += len(rows)

    def _ended(self, group: RowGroup, chosen: np.ndarray) -> bool:
        """Send what the step decided; True when the job is over (EOS, budget, search ended, cancelled)."""
        job = group.owner
        if group.streams:  # one id, or a speculating group's accepted draft and the model's next id
            over = False
            for token in chosen:
                if over := self._token(job, int(token)):
                    break
            if over:
                self._finish(job, group.results())
        elif job.cancelled:
            over = True
        elif group.finished:
            hypotheses = group.results()
            for token in hypotheses[0].ids:
                if self._token(job, token):
                    break
            self._finish(job, hypotheses)
            over = True
        else:
            over = False
        if over:
            self.active -= len(group.rows)
        return over


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
        batches: dict[Any, list[Job]] = {}
        for job in jobs:
            batches.setdefault(_batch_key(job), []).append(job)
        for key, batch in batches.items():
            self.active = len(batch)
            if key is None:  # sampling: its generators follow the job's row of its own request
                for job in batch:
                    self._decode_alone(job)
            else:
                self._decode_together(batch, key[1])
        self.active = 0

    def _decode_together(self, jobs: list[Job], setting: Any) -> None:
        """Plain greedy jobs (setting: their forced first token) with generate_ids for the longest budget,
        each cut at its own; beam jobs of one GenerationConfig (setting) with generate."""
        try:
            if isinstance(setting, GenerationConfig):
                results = self.model.generate([job.ids for job in jobs], setting)
            else:  # GREEDY by name: the export's defaults may be beam search, and these jobs are greedy
                budget = max(job.max_new_tokens for job in jobs)
                rows = self.model.generate_ids([job.ids for job in jobs], config=GREEDY.replace(
                    max_new_tokens=budget, forced_bos_token_id=setting))
                results = [[Hypothesis(row, float("nan"))] for row in rows]
        except TfmExportError as exc:
            for job in jobs:
                job.emit("error", str(exc))
            return
        for job, hypotheses in zip(jobs, results):
            for token in hypotheses[0].ids[: job.max_new_tokens]:
                if self._token(job, token):
                    break
            self._finish(job, None if not isinstance(setting, GenerationConfig) else hypotheses)


def _batch_key(job: Job) -> tuple[str, Any] | None:
    """Jobs decoded together share a key: plain greedy ones their forced first token, deterministic
    searches their whole GenerationConfig (budget included); sampling jobs are decoded alone (None)."""
    config = job.config
    if config.is_greedy:
        return "greedy", config.forced_bos_token_id
    if config.do_sample:
        return None
    return "search", dataclasses.replace(config, max_new_tokens=job.max_new_tokens)


ENGINES = {"inflight": InflightBatcher, "request": RequestBatcher}
