"""Greedy decoding and token picking, the strategies beside runtime.decode.beam.BeamSearch. Torch-free.

Each decides the next ids of its rows from one decoder step (runtime.decode.loop.StepView) and keeps
what they generated; runtime.decode.loop.decode drives them for direct calls and runtime.inflight for
the server's rows, so every rule below holds in both.

- `Greedy`: plain greedy decoding on the graph's own argmax (`next_ids`: the logits never cross). It
  is where the forced first token lives (forced_bos_token_id: a multilingual model's target language)
  for greedy decoding; the other strategies get it from runtime.decode.processors.
- `TokenPicker`: greedy with processors, or seeded sampling, from the logits on the host; its rows
  carry scores (transformers' order of processors).
"""

from __future__ import annotations

import numpy as np

from ...config import TransformerConfig
from .beam import BeamSearch
from .loop import StepView
from ..options.generation import GenerationConfig, Hypothesis
from .processors import log_softmax, process
from .sampling import row_generators, sample, warp
from ..sources import trim


class Greedy:
    """The ids chosen so far by batched greedy decoding over the decoder's next_ids.

    With `stop_at_eos`, a row that has emitted EOS gets the padding id from then on, and decoding
    stops once every row has ended. `forced_bos`: the first step's ids (forced_bos_token_id).
    """

    def __init__(self, rows: int, steps: int, cfg: TransformerConfig, stop_at_eos: bool = True,
                 forced_bos: int | None = None):
        self.rows, self.steps, self.bos_id = rows, steps, cfg.bos_id
        self.eos_id, self.pad_id, self.stop_at_eos, self.forced_bos = cfg.eos_id, cfg.tgt_pad_id, stop_at_eos, forced_bos
        self.ids = np.empty((rows, steps), dtype=np.int64)  # (rows, steps)
        self.done = np.zeros(rows, dtype=bool)
        self.step, self.finished = 0, False

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        if self.step == 0 and self.forced_bos is not None:
            chosen = np.full(self.rows, self.forced_bos, dtype=np.int64)  # the argmax is not read
        else:
            chosen = np.array(view.next_ids(), dtype=np.int64)  # a copy: the state reuses its buffer
        if self.stop_at_eos:
            chosen = np.where(self.done, self.pad_id, chosen)
            self.done |= chosen == self.eos_id
        self.ids[:, self.step] = chosen
        self.step += 1
        self.finished = (self.stop_at_eos and bool(self.done.all())) or self.step == self.steps
        return chosen, None

    def generated(self) -> list[list[int]]:
        """Each row's ids as generated (EOS kept; padded after it)."""
        return self.ids[:, : self.step].tolist()

    def results(self) -> list[list[Hypothesis]]:
        """Per row, its ids up to EOS; plain greedy decoding computes no score (nan)."""
        return [[Hypothesis(trim(row, self.eos_id), float("nan"))] for row in self.generated()]


class TokenPicker:
    """Greedy or sampled ids for rows = batch * num_return_sequences (source i: rows i*n .. i*n + n-1).

    Processors run on the logits (transformers' greedy and sampling order); a row's score is the sum
    of log_softmax(processed logits) at its ids, before temperature/top-k/top-p.
    """

    def __init__(self, batch: int, steps: int, config: GenerationConfig, cfg: TransformerConfig, first_row: int = 0):
        """`first_row`: this call's rows are rows first_row.. of a larger call (their sampling generators)."""
        self.config, self.steps, self.cfg, self.bos_id = config, steps, cfg, cfg.bos_id
        self.rows = batch * config.num_return_sequences
        self.ids = np.full((self.rows, steps), cfg.tgt_pad_id, dtype=np.int64)  # (rows, steps)
        self.scores = np.zeros(self.rows)
        self.done = np.zeros(self.rows, dtype=bool)
        self.generators = row_generators(config.seed, first_row + self.rows)[first_row:] if config.do_sample else []
        self.step, self.finished = 0, False

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        cfg, step = self.config, self.step
        history = np.concatenate([np.full((self.rows, 1), self.cfg.bos_id), self.ids[:, :step]], axis=1)
        scores = process(view.logits().astype(np.float64), history, step, self.steps - 1, cfg, self.cfg.eos_id,
                         self.cfg.suppress_ids)
        if cfg.do_sample:
            chosen = np.array([sample(warp(row, cfg.temperature, cfg.top_k, cfg.top_p), gen)
                               for row, gen in zip(scores, self.generators)], dtype=np.int64)
        else:
            chosen = scores.argmax(axis=1)  # ties: the lower id
        picked = log_softmax(scores)[np.arange(self.rows), chosen]
        chosen = np.where(self.done, self.cfg.tgt_pad_id, chosen)
        self.scores += np.where(self.done, 0.0, picked)
        self.ids[:, step] = chosen
        self.done |= chosen == self.cfg.eos_id
        self.step += 1
        self.finished = bool(self.done.all()) or self.step == self.steps
        return chosen, None

    def results(self) -> list[list[Hypothesis]]:
        n, eos = self.config.num_return_sequences, self.cfg.eos_id
        rows = [trim(r, eos) for r in self.ids[:, : self.step].tolist()]
        hyps = [Hypothesis(ids, float(s)) for ids, s in zip(rows, self.scores)]
        return [hyps[i:i + n] for i in range(0, len(hyps), n)]


Picker = Greedy | TokenPicker | BeamSearch


def strategy_for(batch: int, steps: int, config: GenerationConfig, cfg: TransformerConfig, first_row: int = 0,
                 scored: bool = True) -> Picker:
    """The strategy of `config`: beam search, token picking (scores, processors, sampling), or, for
    plain greedy decoding when no score is asked for (`scored=False`), `Greedy` on the device's argmax."""
    if config.num_beams > 1:
        return BeamSearch(batch, steps, config, cfg.bos_id, cfg.eos_id, cfg.tgt_pad_id, cfg.suppress_ids,
                          cfg.tgt_vocab_size)
    if config.is_greedy and not scored:
        return Greedy(batch, steps, cfg, forced_bos=config.forced_bos_token_id)
    return TokenPicker(batch, steps, config, cfg, first_row)
