"""A job's rows in the in-flight batch: one for greedy decoding and one sample, k for a beam search
of k beams (or for k samples of one source). Torch-free.

Every row of every group takes the same decoder step (serve.batcher.InflightBatcher); a group turns
its rows' step output into the job's next tokens with the strategy a direct `generate` call of the
job would use (runtime.search.strategy_for, one source): greedy rows take the graph's own next ids,
the others pick from their rows' logits. A beam search says which row each beam continues
(`beam_idx`); the engine then gathers the group's cache rows in that order (RowBatch.reorder).
Greedy and single-sample groups stream each token as it is chosen; beam search and n-best groups
send their tokens when the search ends (a later step can overtake every running beam).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.beam import BeamSearch
from ..runtime.generation import GenerationConfig, Hypothesis
from ..runtime.search import TokenPicker, strategy_for
from .jobs import Job


def width(config: GenerationConfig) -> int:
    """Cache rows a job decodes in: its beams, or its samples (n-best of sampling), else one."""
    return config.num_beams if config.num_beams > 1 else config.num_return_sequences


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

    def advance(self, next_ids: np.ndarray, logits: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """This step's ids of the group's rows (len(rows),) and, for a beam search, the row each beam
        continues (indices into `rows`), from the step's next_ids (batch,) and logits (batch, vocab)."""
        if self.strategy is None:
            forced = self.job.config.forced_bos_token_id  # the greedy loops' first token (runtime.decoding)
            ids = next_ids[self.rows]
            return (np.full_like(ids, forced) if forced is not None and self.first_step else ids), None
        return self.strategy.advance(logits[self.rows])

    @property
    def finished(self) -> bool:
        return self.strategy is not None and self.strategy.finished

    def results(self) -> list[Hypothesis] | None:
        """The job's hypotheses (None for plain greedy: no score is computed)."""
        return None if self.strategy is None else self.strategy.results()[0]
