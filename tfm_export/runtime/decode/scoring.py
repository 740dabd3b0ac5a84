"""CTranslate2's `score_batch`: the log-probabilities of given target sequences, teacher-forced. Torch-free.

Each target (ids, without the decoder start; EOS is appended as CTranslate2 and transformers' labels have it)
is fed to the decoder one token a step after the decoder start, every row of the batch at once, and each step
reads the model's log_softmax at the row's next target token: transformers' per-token log-probabilities of
`labels` (its loss is minus their mean). A row shorter than the batch's longest is fed padding after its EOS,
which a causal decoder's earlier positions never see, and its log-probabilities stop at its EOS. No processor
runs (the model's raw distribution, as both libraries score). `TeacherForced` is a runtime.decode.loop.Strategy,
so scoring runs on any DecoderCache (ONNX Runtime's caches, the eager model) under the one loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ...errors import InputError
from ..options.generation import GREEDY
from .loop import StepView, run
from .processors import log_softmax

SCORE_BATCH = 32  # targets scored together (`score`): as wide as a document's batch of sentences


@dataclass(frozen=True)
class ScoreResult:
    """One target's scores: `tokens` the scored ids (the target and EOS), `log_probs` one per token."""

    tokens: list[int]
    log_probs: list[float]

    @property
    def score(self) -> float:
        """The sum of the log-probabilities: log P(target | source)."""
        return float(sum(self.log_probs))

    @property
    def normalized(self) -> float:
        """The mean log-probability per token (minus transformers' loss of these labels)."""
        return self.score / len(self.log_probs)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "log_probs": self.log_probs, "score": self.score,
                "normalized_score": self.normalized}


class TeacherForced:
    """Feeds each row's target (rows of `targets`, each with EOS) and keeps the log-probability of every token."""

    def __init__(self, targets: Sequence[Sequence[int]], bos_id: int, pad_id: int):
        self.targets = [list(t) for t in targets]
        self.rows, self.bos_id = len(self.targets), bos_id
        width = max(len(t) for t in self.targets)
        self.ids = np.full((self.rows, width), pad_id, dtype=np.int64)  # (rows, longest target)
        for r, t in enumerate(self.targets):
            self.ids[r, : len(t)] = t
        self.lengths = np.array([len(t) for t in self.targets])
        self.log_probs = np.zeros((self.rows, width))
        self.step, self.finished = 0, width == 0

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        logp = log_softmax(view.logits())  # (rows, vocab): the distribution of target position `step`
        self.log_probs[:, self.step] = logp[np.arange(self.rows), self.ids[:, self.step]]
        tokens = self.ids[:, self.step].copy()  # the next input: the target itself
        self.step += 1
        self.finished = self.step == self.ids.shape[1]
        return tokens, None

    def results(self) -> list[ScoreResult]:
        return [ScoreResult(t, self.log_probs[r, : len(t)].tolist()) for r, t in enumerate(self.targets)]


def score(model: Any, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> list[ScoreResult]:
    """Each target's ScoreResult given its source (a runtime.api.GenerateMixin `model`), SCORE_BATCH at a time.
    Targets are ids without the decoder start and without EOS (it is appended)."""
    if len(sources) != len(targets):
        raise InputError(f"{len(sources)} sources and {len(targets)} targets: score needs one target per source")
    cfg, limit = model.config, model._step_limit(GREEDY)[0]
    eos, vocab = cfg.eos_id, cfg.tgt_vocab_size
    full = [[int(i) for i in t] + [eos] for t in targets]
    for n, t in enumerate(full, 1):
        if len(t) > limit:
            raise InputError(f"target {n} has {len(t)} tokens with EOS, more than the model's limit of {limit}",
                             options={"targets": n})
        if any(not 0 <= i < vocab for i in t):
            raise InputError(f"target {n} has an id out of range for a vocabulary of {vocab} ids",
                             options={"targets": n})
    out: list[ScoreResult] = []
    for start in range(0, len(full), SCORE_BATCH):
        rows = full[start:start + SCORE_BATCH]
        strategy = TeacherForced(rows, cfg.bos_id, cfg.tgt_pad_id)
        src = model.source_input(sources[start:start + SCORE_BATCH])
        out += run(model.cache_for(GREEDY, max(len(t) for t in rows)), src, strategy)
    return out
