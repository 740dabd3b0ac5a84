"""Greedy decoding and token picking, the strategies beside runtime.decode.beam.BeamSearch. Torch-free.

Each decides the next ids of its rows from one decoder step (runtime.decode.loop.StepView) and keeps
what they generated; runtime.decode.loop.decode drives them for direct calls and runtime.inflight for
the server's rows, so every rule below holds in both.

- `Greedy`: plain greedy decoding on the graph's own argmax (`next_ids`: the logits never cross). It
  is where the forced first token lives (forced_bos_token_id: a multilingual model's target language)
  for greedy decoding; the other strategies get it from runtime.decode.processors.
- `TokenPicker`: greedy with processors, or seeded sampling, from the logits on the host; its rows
  carry scores (transformers' order of processors).

TokenPicker and BeamSearch take a list of runtime.decode.processors.LogitsProcessor (`processors=`), run after
the generic ones, and a `prompt` (each row's decoder input before its first generated id, the processors'
history): a model's own decoding rules plug in there, not in a copy of a strategy. Whisper's are a wrapper
(runtime.speech.search.WhisperStrategy: the forced prompt, language detection) over either strategy with
Whisper's processors in the list; temperature fallback, a prompt on every window, or a draft model's proposals
belong in such a list or wrapper too.
"""

from __future__ import annotations

import numpy as np

from ...config import TransformerConfig
from .beam import BeamSearch
from .loop import StepView
from ..options.generation import GenerationConfig, Hypothesis
from .processors import Processors, log_softmax, process
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

    Processors run on the logits (transformers' greedy and sampling order: the generic ones, then
    `processors`, runtime.decode.processors.process); a row's score is the sum of log_softmax(processed
    logits) at its ids, before temperature/top-k/top-p. `logprobs` sums the log-probabilities of the scores
    transformers outputs (sampling: the warped ones with the temperature undone), `lengths` counts the
    generated ids with EOS: transformers' avg_logprob, which a temperature fallback judges.
    """

    def __init__(self, batch: int, steps: int, config: GenerationConfig, bos_id: int, eos_id: int, pad_id: int,
                 banned: tuple[int, ...] = (), first_row: int = 0, *, processors: Processors = (),
                 prompt: np.ndarray | None = None):
        """`first_row`: this call's rows are rows first_row.. of a larger call (their sampling generators).
        `prompt`: (rows, length) each row's decoder input before its first generated id, the head of the
        processors' history (default: BOS; a wrapper that forces a prompt, runtime.speech.search, sets it)."""
        self.config, self.steps, self.bos_id, self.eos_id, self.pad_id = config, steps, bos_id, eos_id, pad_id
        self.banned, self.processors = banned, tuple(processors)
        self.rows = batch * config.num_return_sequences
        self.prompt = np.full((self.rows, 1), bos_id, dtype=np.int64) if prompt is None else prompt
        self.ids = np.full((self.rows, steps), pad_id, dtype=np.int64)  # (rows, steps)
        self.scores, self.logprobs = np.zeros(self.rows), np.zeros(self.rows)
        self.lengths = np.zeros(self.rows, dtype=np.int64)  # ids generated, EOS included
        self.done = np.zeros(self.rows, dtype=bool)
        self.generators = row_generators(config.seed, first_row + self.rows)[first_row:] if config.do_sample else []
        self.step, self.finished = 0, False

    def history(self) -> np.ndarray:
        """(rows, prompt + step) each row's decoder input so far (for the processors)."""
        return np.concatenate([self.prompt, self.ids[:, : self.step]], axis=1)

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        cfg, step = self.config, self.step
        scores = process(view.logits().astype(np.float64), self.history(), step, self.steps - 1, cfg, self.eos_id,
                         self.banned, self.processors)
        rows, live = np.arange(self.rows), ~self.done
        if cfg.do_sample:
            warped = [warp(row, cfg.temperature, cfg.top_k, cfg.top_p) for row in scores]
            chosen = np.array([sample(w, g) for w, g in zip(warped, self.generators)], dtype=np.int64)
            # transformers' output scores are the warped ones; its avg logprob undoes the temperature. Only
            # the chosen ids' log-probabilities are formed (no second (rows, vocab) log_softmax per step).
            output = np.array([_logprob_at(w * cfg.temperature, c) for w, c in zip(warped, chosen)])
            picked = log_softmax(scores)[rows, chosen]
        else:
            chosen = scores.argmax(axis=1)  # ties: the lower id
            picked = output = log_softmax(scores)[rows, chosen]
        self.scores += np.where(live, picked, 0.0)
        self.logprobs += np.where(live, output, 0.0)
        chosen = np.where(self.done, self.pad_id, chosen)
        self.ids[:, step] = chosen
        self.lengths += live
        self.done |= chosen == self.eos_id
        self.step += 1
        self.finished = bool(self.done.all()) or self.step == self.steps
        return chosen, None

    def results(self) -> list[list[Hypothesis]]:
        n, eos = self.config.num_return_sequences, self.eos_id
        rows = [trim(r, eos) for r in self.ids[:, : self.step].tolist()]
        hyps = [Hypothesis(ids, float(s)) for ids, s in zip(rows, self.scores)]
        return [hyps[i:i + n] for i in range(0, len(hyps), n)]


def _logprob_at(z: np.ndarray, index: int) -> float:
    """log_softmax(z)[index] without forming the whole row (-inf scores contribute nothing)."""
    top = z.max()
    return float(z[index] - top - np.log(np.exp(z - top).sum()))


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
    return TokenPicker(batch, steps, config, cfg.bos_id, cfg.eos_id, cfg.tgt_pad_id, cfg.suppress_ids, first_row)
