"""How a speculative step reads the model's own ids after a draft (runtime.decode.speculative). Torch-free.

A speculative step feeds the row's last id and the draft d_1..d_k in one decoder call; a `Check` then says
which id the model itself would pick after each of them, up to the first position where the draft is wrong:
the draft is accepted while d_{i+1} equals that id. Two checks, one per kind of core strategy:

- `ArgmaxCheck`: runtime.decode.strategies.Greedy's picking, the argmax under the model's static bans, every
  position picked on the device (`position_ids`: only ids cross to the host); the forced first id
  (forced_bos_token_id) is Greedy's, in place of the first step's argmax, and rides with the first check
  (runtime.decode.speculative: no call of its own).
- `ProcessorCheck`: runtime.decode.strategies.TokenPicker's greedy picking, the argmax of the scores after
  runtime.decode.processors.process: the generic processors (repetition_penalty, no_repeat_ngram_size,
  min_new_tokens, forced ids, the bans) and a caller's `processors` list, the one TokenPicker and BeamSearch
  take (Whisper's suppress and timestamp rules: runtime.speech.rules.whisper_processors). Those rules read the
  ids so far, so position i is processed with the history extended by d_1..d_i (what plain decoding would
  have fed by then), one position after the other, and the check stops at the first position whose pick
  differs from the draft (or is EOS): the logits of every position cross to the host once
  (`position_logits`), the processors run on the positions that decide. Each kept id's log-probability
  (log_softmax of its processed scores) is kept as TokenPicker keeps it (`logprobs`: Whisper's
  avg_logprob, the temperature fallback's test).

Either way the ids are the core strategy's, id for id, whatever was drafted. `check_for` picks the one whose
picks are runtime.decode.strategies.strategy_for's (the server's rows in flight: runtime.inflight.Speculating).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...config import TransformerConfig
from ..options.generation import GenerationConfig
from .processors import Processors, bias_array, log_softmax, process


class Check(Protocol):
    """The model's picks at the positions a speculative step fed (see the module docstring)."""

    eos_id: int

    def forced(self, step: int) -> int | None:
        """The id the strategy forces after `step` generated ids without reading the model (None: it reads it)."""
        ...

    def picks(self, state: Any, history: list[int], draft: list[int], step: int) -> list[int]:
        """The model's id after history + draft[:i] for i = 0, 1, ..., at least up to the first i where it is
        not draft[i] (or is EOS); `state` was just fed the draft; `step`: the ids generated before it."""
        ...

    def keep(self, count: int) -> None:
        """The step emitted the first `count` of its picks' positions."""
        ...


class ArgmaxCheck:
    """Greedy's picks: the argmax under the model's suppress_ids at every position, on the device."""

    def __init__(self, cfg: TransformerConfig, forced_bos: int | None = None):
        self.eos_id, self.forced_bos = cfg.eos_id, forced_bos
        self.bias = bias_array(cfg.tgt_vocab_size, (tuple(cfg.suppress_ids), None))  # model.pick's ban

    def forced(self, step: int) -> int | None:
        return self.forced_bos if step == 0 else None

    def picks(self, state: Any, history: list[int], draft: list[int], step: int) -> list[int]:
        # the last len(draft) + 1 positions: the state may have been fed more (a forced id before the draft)
        return state.position_ids(self.bias)[0, -len(draft) - 1:].tolist() if draft else [int(state.next_ids()[0])]

    def keep(self, count: int) -> None:
        pass


class ProcessorCheck:
    """TokenPicker's greedy picks: the argmax of the processed scores at each position (the module docstring).

    `config`: the decode's GenerationConfig (greedy: num_beams 1, no sampling); `steps`: its budget of
    generated ids (forced EOS comes at the last); `banned`: the model's suppress_ids as TokenPicker takes them;
    `processors`: a caller's LogitsProcessor list. The history the processors read is the speculative decode's
    (its prompt, BOS or Whisper's forced one, then the ids kept), as TokenPicker's `prompt` and ids."""

    def __init__(self, config: GenerationConfig, eos_id: int, steps: int, banned: tuple[int, ...] = (),
                 processors: Processors = ()):
        self.config, self.eos_id, self.steps = config, eos_id, steps
        self.banned, self.processors = banned, tuple(processors)
        self.logprobs: list[float] = []  # each emitted id's log-probability, EOS included
        self.pending: list[float] = []
        self.first: np.ndarray | None = None  # (fed, vocab) the first call's logits: the prompt's positions too

    def forced(self, step: int) -> int | None:
        return None  # `process` forces forced_bos_token_id and forced EOS itself, as TokenPicker's scores

    def picks(self, state: Any, history: list[int], draft: list[int], step: int) -> list[int]:
        logits = state.position_logits()[0]  # (fed, vocab): the last len(draft) + 1 are the checked positions
        if self.first is None:
            self.first = logits
        checked = logits[logits.shape[0] - len(draft) - 1:]
        out: list[int] = []
        self.pending = []
        for i, row in enumerate(checked):
            seen = np.array([history + draft[:i]], dtype=np.int64)  # (1, length): what plain decoding fed by then
            scores = process(row[None].astype(np.float64), seen, step + i, self.steps - 1, self.config, self.eos_id,
                             self.banned, self.processors)
            pick = int(scores[0].argmax())  # ties: the lower id, as TokenPicker
            out.append(pick)
            self.pending.append(float(log_softmax(scores)[0, pick]))
            if i == len(draft) or pick != draft[i] or pick == self.eos_id:
                break
        return out

    def keep(self, count: int) -> None:
        self.logprobs += self.pending[:count]


def check_for(config: GenerationConfig, cfg: TransformerConfig, steps: int, scored: bool = True) -> Check:
    """The check of strategy_for's greedy strategy for `config` (greedy: num_beams 1, no sampling): for plain
    greedy decoding when no score is asked for (`scored=False`) Greedy's, ArgmaxCheck (only ids cross to the
    host), else TokenPicker's, ProcessorCheck (whose `logprobs` give generate's score)."""
    if config.is_greedy and not scored:
        return ArgmaxCheck(cfg, config.forced_bos_token_id)
    return ProcessorCheck(config, cfg.eos_id, steps, tuple(cfg.suppress_ids))
