"""The general decoding loop: greedy with processors, seeded sampling, beam search; streamable. Torch-free.

`search_steps` drives a `SearchCache` (runtime.cache.GrowingCache, the eager model's EagerCache):
each step a strategy picks the next ids (`TokenPicker` for greedy and sampling, runtime.beam.BeamSearch)
from the decoder's logits on the host, or, for beam search on a state with `top` (ONNX Runtime) and
no processor needing whole rows, from each row's best candidates picked on the device
(runtime.head: only ids and scores cross). Beam search then reorders the cache rows on the device
(`state.reorder(beam_idx)`: only the (rows,) index crosses, never the caches).
Plain greedy decoding without processors keeps the faster runtime.decoding.greedy_loop.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Iterator, Protocol

import numpy as np

from ..config import TransformerConfig
from .beam import BeamSearch
from .decoding import DecodeTimings
from .generation import GenerationConfig, Hypothesis
from .processors import log_softmax, process
from .sampling import row_generators, sample, warp


class SearchState(Protocol):
    """One call's decoder state, encoded with every source repeated `expand` times (its rows)."""

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """Feed (rows, 1) int64 ids; returns the step's logits (rows, tgt_vocab) on the host."""
        ...

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Row r of the cache becomes row beam_idx[r] (rows,), on the device."""
        ...

    # Optional (ONNX Runtime): `top(tokens, bias, width)` -> each row's `width` best log-probabilities
    # + bias and their ids, the logits kept on the device (runtime.cache._GrowingState.top).


class SearchCache(Protocol):
    lock: AbstractContextManager[Any]

    def start_search(self, src: Any, expand: int) -> SearchState:
        """Encode (batch, src_len) ids once; each source's encoder outputs repeated `expand` times."""
        ...


class TokenPicker:
    """Greedy or sampled ids for rows = batch * num_return_sequences (source i: rows i*n .. i*n + n-1).

    Processors run on the logits (transformers' greedy and sampling order); a row's score is the sum
    of log_softmax(processed logits) at its ids, before temperature/top-k/top-p.
    """

    def __init__(self, batch: int, steps: int, config: GenerationConfig, cfg: TransformerConfig, first_row: int = 0):
        """`first_row`: this call's rows are rows first_row.. of a larger call (their sampling generators)."""
        self.config, self.steps, self.cfg = config, steps, cfg
        self.rows = batch * config.num_return_sequences
        self.ids = np.full((self.rows, steps), cfg.tgt_pad_id, dtype=np.int64)  # (rows, steps)
        self.scores = np.zeros(self.rows)
        self.done = np.zeros(self.rows, dtype=bool)
        self.generators = row_generators(config.seed, first_row + self.rows)[first_row:] if config.do_sample else []
        self.step, self.finished = 0, False

    def advance(self, logits: np.ndarray) -> tuple[np.ndarray, None]:
        cfg, step = self.config, self.step
        history = np.concatenate([np.full((self.rows, 1), self.cfg.bos_id), self.ids[:, :step]], axis=1)
        scores = process(logits.astype(np.float64), history, step, self.steps - 1, cfg, self.cfg.eos_id,
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
        rows = [r[: r.index(eos)] if eos in r else r for r in self.ids[:, : self.step].tolist()]
        hyps = [Hypothesis(ids, float(s)) for ids, s in zip(rows, self.scores)]
        return [hyps[i:i + n] for i in range(0, len(hyps), n)]


def strategy_for(batch: int, steps: int, config: GenerationConfig, cfg: TransformerConfig, first_row: int = 0
                 ) -> TokenPicker | BeamSearch:
    if config.num_beams > 1:
        return BeamSearch(batch, steps, config, cfg.bos_id, cfg.eos_id, cfg.tgt_pad_id, cfg.suppress_ids)
    return TokenPicker(batch, steps, config, cfg, first_row)


def search_steps(cache: SearchCache, src: Any, steps: int, config: GenerationConfig, cfg: TransformerConfig,
                 timings: DecodeTimings | None = None, first_row: int = 0) -> Iterator[TokenPicker | BeamSearch]:
    """Decode `src` (batch, src_len); yields the strategy after each step (its `ids`/`run_ids` grow),
    which holds the results when the iterator ends. `first_row`: see TokenPicker."""
    strategy = strategy_for(src.shape[0], steps, config, cfg, first_row)
    with cache.lock:
        start = time.perf_counter()
        state = cache.start_search(src, strategy.rows // src.shape[0])
        if timings is not None:
            timings.encoder_s = time.perf_counter() - start
        tokens = np.full((strategy.rows, 1), cfg.bos_id, dtype=np.int64)  # (rows, tgt_len=1)
        while not strategy.finished:
            start = time.perf_counter()
            next_ids, beam_idx = _advance(strategy, state, tokens, cfg.tgt_vocab_size)
            if beam_idx is not None and not strategy.finished and np.any(beam_idx != np.arange(len(beam_idx))):
                state.reorder(beam_idx)
            if timings is not None:
                timings.steps_s.append(time.perf_counter() - start)
            yield strategy
            tokens = next_ids.reshape(-1, 1).astype(np.int64)


def _advance(strategy: TokenPicker | BeamSearch, state: SearchState, tokens: np.ndarray, vocab: int
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """One step: beam search from the device's candidates when the state and the processors allow."""
    top = getattr(state, "top", None)
    if isinstance(strategy, BeamSearch) and top is not None:
        bias = strategy.head_bias(vocab)
        if bias is not None:
            renormalize = strategy.config.renormalize_logits
            return strategy.advance_top(*top(tokens, bias, strategy.width, renormalize), vocab)
    return strategy.advance(state.logits(tokens))


def search(cache: SearchCache, src: Any, steps: int, config: GenerationConfig, cfg: TransformerConfig,
           timings: DecodeTimings | None = None, first_row: int = 0) -> list[list[Hypothesis]]:
    """`search_steps` run to the end: per source, its hypotheses best first."""
    strategy = None
    for strategy in search_steps(cache, src, steps, config, cfg, timings, first_row):
        pass
    assert strategy is not None  # steps >= 1: at least one step runs
    return strategy.results()
