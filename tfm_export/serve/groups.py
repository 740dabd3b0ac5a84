"""A job's rows in the in-flight batch: one for greedy decoding and one sample, k for a beam search
of k beams (or for k samples of one source). Torch-free.

Every row of every group takes the same decoder step (serve.batcher.InflightBatcher); a group turns
its rows' step output into the job's next tokens with the strategy a direct `generate` call of the
job would use (runtime.search.strategy_for, one source): greedy rows take the graph's own next ids,
the others pick from their rows' logits. A beam search says which row each beam continues
(`beam_idx`); the engine then gathers the group's cache rows in that order (RowBatch.reorder).
Greedy and single-sample groups stream each token as it is chosen; beam search and n-best groups
send their tokens when the search ends (a later step can overtake every running beam).

Beam groups pick their candidates on the device as a direct call does (runtime.head through
RowBatch.top): `device_tops` runs one head over the rows of every group that shares a bias, and only
each row's best ids and log-probabilities cross; the whole logits cross only for the groups that
sample or run whole-row processors (1.21x the engine's beam-4 throughput at 64 rows over each group's
log-softmax and top-k on the host: BENCHMARKS.md, "Serving beam search").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..runtime.beam import BeamSearch
from ..runtime.generation import GenerationConfig, Hypothesis
from ..runtime.processors import BiasKey
from ..runtime.search import TokenPicker, strategy_for
from .jobs import Job


def width(config: GenerationConfig) -> int:
    """Cache rows a job decodes in: its beams, or its samples (n-best of sampling), else one."""
    return config.num_beams if config.num_beams > 1 else config.num_return_sequences


Top = tuple[np.ndarray, np.ndarray, int]  # a group's rows' best log-probabilities, their ids, the vocab size


class TopRows(Protocol):
    """The rows' side of `device_tops` (runtime.row_batch.RowBatch, runtime.rows.HostRows)."""

    def top(self, rows: np.ndarray, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        ...


@dataclass(eq=False)
class RowGroup:
    """One job and its cache rows (beam b, or sample b, at rows[b])."""

    job: Job
    rows: list[int]
    strategy: TokenPicker | BeamSearch | None  # None: plain greedy, the graph's next ids
    first_step: bool = True  # no token chosen yet (the engine clears it after each step)

    @classmethod
    def start(cls, job: Job, rows: list[int], cfg: Any) -> "RowGroup":
        config = job.config
        if config.is_greedy and len(rows) == 1:
            return cls(job, rows, None)
        # first_row: the job's rows of its request (sampling generators), as Job.decode_alone's row_offset
        return cls(job, rows, strategy_for(1, job.max_new_tokens, config, cfg, job.row * config.num_return_sequences))

    @property
    def streams(self) -> bool:
        """Tokens go out as they are chosen (greedy, one sample); else when the search ends."""
        return self.strategy is None or (isinstance(self.strategy, TokenPicker) and len(self.rows) == 1)

    def head_run(self) -> tuple[BiasKey, bool] | None:
        """For a beam search whose processors allow it: the (bias, renormalize) of its device-side head
        this step; groups with equal ones share a run. None: the group needs its logits on the host."""
        if not isinstance(self.strategy, BeamSearch):
            return None
        key = self.strategy.head_key()
        return None if key is None else (key, self.job.config.renormalize_logits)

    def advance(self, next_ids: np.ndarray, logits: np.ndarray | None, top: Top | None = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """This step's ids of the group's rows (len(rows),) and, for a beam search, the row each beam
        continues (indices into `rows`), from the step's next_ids (batch,), and either its rows' `top`
        candidates (device_tops) or the step's logits (batch, vocab)."""
        if self.strategy is None:
            forced = self.job.config.forced_bos_token_id  # the greedy loops' first token (runtime.decoding)
            ids = next_ids[self.rows]
            return (np.full_like(ids, forced) if forced is not None and self.first_step else ids), None
        if top is not None:
            assert isinstance(self.strategy, BeamSearch)
            return self.strategy.advance_top(*top)
        return self.strategy.advance(logits[self.rows])

    @property
    def finished(self) -> bool:
        return self.strategy is not None and self.strategy.finished

    def results(self) -> list[Hypothesis] | None:
        """The job's hypotheses (None for plain greedy: no score is computed)."""
        return None if self.strategy is None else self.strategy.results()[0]


def device_tops(groups: list[RowGroup], rows: TopRows, vocab: int) -> dict[int, Top]:
    """Each beam group's candidates for this step by id(group), picked on the device: one head run per
    (bias, renormalize) over the rows of all the groups that share it, as wide as the widest of them
    (a group of fewer beams takes the first columns: the head's top-k is sorted, ties by id)."""
    runs: dict[tuple[BiasKey, bool], list[RowGroup]] = {}
    for group in groups:
        if (run := group.head_run()) is not None:
            runs.setdefault(run, []).append(group)
    tops: dict[int, Top] = {}
    for (bias, renormalize), members in runs.items():
        widths = [group.strategy.width for group in members]  # type: ignore[union-attr]
        logp, ids = rows.top(np.concatenate([group.rows for group in members]), bias, max(widths), renormalize)
        start = 0
        for group, width in zip(members, widths):  # (n, max width) -> each group's (rows, its width)
            end = start + len(group.rows)
            tops[id(group)] = (logp[start:end, :width], ids[start:end, :width], vocab)
            start = end
    return tops
