"""Speculative sampling: drafted ids checked so that the output keeps the model's distribution. Torch-free.

The rule is transformers' `_speculative_sampling` (assisted generation with do_sample; Leviathan et al. 2023,
algorithm 1). A proposer drafts d_1..d_k, each d_i drawn from its distribution q_i (a draft model sampling
under the same processors and warpers as the model), and one decoder step gives the model's distributions
p_1..p_{k+1} after each prefix (runtime.decode.speculative). Then, for i = 1..k in order:

- d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)) (a uniform u < the ratio);
- at the first rejection the step emits one id drawn from the residual norm(max(0, p_i - q_i)) and stops;
- when all k are accepted it emits a bonus id drawn from p_{k+1}.

Each emitted id is then distributed exactly as p at its position (given the ids before it), whatever q is:
P(x) = min(q(x), p(x)) + (1 - sum_y min(q(y), p(y))) * max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y)) = p(x).
A deterministic proposer (prompt lookup, or a draft that argmaxes) has q_i one-hot at d_i (`q` None): d_i is
accepted with probability p_i(d_i), and a rejection draws from p_i with d_i removed. transformers samples
every position from p and keeps the drafts while they match, which is the same distribution.

p and q are what our sampling strategy draws from (runtime.decode.strategies.TokenPicker): the generic
processors (runtime.decode.processors.process: bans, min_new_tokens, forced ids, repetition penalty, n-gram
bans) on the position's own history, then temperature, top_k and top_p (runtime.decode.sampling.warp), then
softmax. The random numbers are the row's SplitMix64 (runtime.decode.sampling): one per drafted id, one per
acceptance test, one per emitted residual or bonus id, in that order, so a seeded decode is reproducible as
long as the draft lengths are (`sample_sources` keeps transformers' schedule alone, without the timing
switch-off of runtime.decode.draft_length, fresh for every row).
They are not plain sampling's draws: the same seed gives other ids than plain sampling (and Node), from the
same distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import TransformerConfig
from ..options.generation import GenerationConfig, Hypothesis
from . import speculative
from .draft_length import DraftLength
from .processors import log_softmax, process
from .proposers import DraftModel
from .sampling import SplitMix64, draw, row_generators, warp


def acceptance(p_d: float, q_d: float) -> float:
    """The probability of keeping a drafted id that the model gives p_d and the draft gave q_d."""
    if q_d <= 0.0:  # an id its own q cannot draw (a proposer that misreports): kept where the model allows it
        return 1.0 if p_d > 0.0 else 0.0
    return min(1.0, p_d / q_d)


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """max(0, p - q) (unnormalised), what a rejected position draws from; p where it vanishes (p == q up to
    rounding: a rejection is then almost impossible)."""
    rest = np.maximum(p - q, 0.0)
    return rest if rest.sum() > np.finfo(np.float64).tiny else p


def accept(draft: list[int], p: np.ndarray, q: np.ndarray | None, generator: SplitMix64) -> tuple[list[int], int]:
    """The ids a step emits and how many drafted ids it accepted. `draft` d_1..d_k; `p` (k + 1, vocab) the
    model's probabilities after each prefix; `q` (k, vocab) the draft's, or None for a deterministic draft
    (one-hot at d_i). See the module docstring."""
    for i, token in enumerate(draft):
        q_i = np.zeros_like(p[i]) if q is None else q[i]
        if q is None:
            q_i[token] = 1.0
        if generator.uniform() >= acceptance(float(p[i, token]), float(q_i[token])):
            return draft[:i] + [draw(residual(p[i], q_i), generator)], i
    return draft + [draw(p[len(draft)], generator)], len(draft)


def distribution(scores: np.ndarray, config: GenerationConfig) -> np.ndarray:
    """(vocab,) float64 processed scores -> the probabilities sampling draws from (warped, normalised)."""
    warped = warp(scores, config.temperature, config.top_k, config.top_p)
    probs = np.exp(warped - warped.max())
    return probs / probs.sum()


@dataclass
class Sampler:
    """One sampled row's processors, warpers and generator, shared by the model's check and a draft model's
    proposals (runtime.decode.proposers.DraftModel), so that q is formed as p is."""

    config: GenerationConfig
    eos_id: int
    banned: tuple[int, ...]  # the model's suppress_ids
    last_step: int  # the step at which the row reaches its last id (forced_eos)
    generator: SplitMix64
    prompt: int = 1  # decoder input ids before the first generated one (BOS)

    @classmethod
    def of(cls, config: GenerationConfig, cfg: TransformerConfig, steps: int, generator: SplitMix64) -> "Sampler":
        """The sampler of a row of at most `steps` ids decoded under `config` by a model of `cfg`."""
        return cls(config, cfg.eos_id, tuple(cfg.suppress_ids), steps - 1, generator)

    def processed(self, logits: np.ndarray, ids: list[int]) -> np.ndarray:
        """(n, vocab) logits of the last n positions of decoder input `ids` (row j: after ids[:len(ids) - n + 1
        + j]) -> (n, vocab) float64 scores, each processed on its own history and step."""
        n, base = logits.shape[0], len(ids) - logits.shape[0] + 1
        out = np.empty(logits.shape, dtype=np.float64)
        for j in range(n):
            prefix = np.array([ids[:base + j]], dtype=np.int64)  # (1, length)
            out[j] = process(logits[j:j + 1].astype(np.float64), prefix, prefix.shape[1] - self.prompt,
                             self.last_step, self.config, self.eos_id, self.banned)[0]
        return out

    def probabilities(self, logits: np.ndarray, ids: list[int]) -> np.ndarray:
        """`processed`'s rows -> (n, vocab) float64 probabilities, what sampling draws from."""
        return np.stack([distribution(row, self.config) for row in self.processed(logits, ids)])

    def draft(self, logits: np.ndarray, ids: list[int]) -> tuple[int, np.ndarray]:
        """A draft model's next id after decoder input `ids`, from its last position's logits (1, vocab), and
        the (vocab,) q it was drawn from."""
        q = self.probabilities(logits, ids)[0]
        return draw(q, self.generator), q


class SamplingCheck:
    """The check of a sampled speculative step (runtime.decode.checking.Check): its picks are the ids the step
    emits, the accepted drafted ids then one drawn id (a residual's, or the bonus from p_{k+1}), which
    runtime.decode.speculative.speculate keeps as it keeps a greedy check's matching picks. A rejected id's
    residual gives it no probability, so the drawn id differs from the draft where the draft was rejected.
    `proposer`: the step's, whose `probabilities` are the draft's q (None: one-hot). `logprobs`: each emitted
    id's log_softmax of its processed scores (before the warpers, EOS included), as TokenPicker scores a
    sampled row."""

    def __init__(self, sampler: Sampler, proposer: Any):
        self.sampler, self.proposer, self.eos_id = sampler, proposer, sampler.eos_id
        self.logprobs: list[float] = []
        self.pending: list[float] = []

    def forced(self, step: int) -> int | None:
        return None  # `process` forces forced_bos_token_id and forced EOS itself: one-hot p

    def picks(self, state: Any, history: list[int], draft: list[int], step: int) -> list[int]:
        logits = state.position_logits()[0]  # (fed, vocab): the last len(draft) + 1 are the checked positions
        q = getattr(self.proposer, "probabilities", None) if draft else None
        scores = self.sampler.processed(logits[logits.shape[0] - len(draft) - 1:], history + draft)
        p = np.stack([distribution(row, self.sampler.config) for row in scores])
        emitted = accept(draft, p, q, self.sampler.generator)[0]
        logp = log_softmax(scores[:len(emitted)])  # (emitted, vocab)
        self.pending = [float(logp[j, token]) for j, token in enumerate(emitted)]
        return emitted

    def keep(self, count: int) -> None:
        self.logprobs += self.pending[:count]


def sample_sources(cache: Any, sources: list[np.ndarray], config: GenerationConfig, cfg: TransformerConfig,
                   tokenizer: dict | None, assistant: Any | None, steps: int, timings: Any = None,
                   samples: int = 1, first_row: int = 0) -> list[list[int]]:
    """`sample_hypotheses`' ids."""
    return [h.ids for h in sample_hypotheses(cache, sources, config, cfg, tokenizer, assistant, steps, timings,
                                             samples, first_row)]


def sample_hypotheses(cache: Any, sources: list[np.ndarray], config: GenerationConfig, cfg: TransformerConfig,
                      tokenizer: dict | None, assistant: Any | None, steps: int, timings: Any = None,
                      samples: int = 1, first_row: int = 0) -> list[Hypothesis]:
    """Sampled rows of each source (1, src_len), one source at a time, speculatively (prompt lookup or the
    `assistant`, as runtime.decode.speculative.proposal picks): `samples` rows per source, row j of source i
    drawing from the generator of decoder row first_row + i * num_return_sequences + j, as plain sampling's
    rows (runtime.decode.sampling.row_generators), at most `steps` ids each (EOS not returned), each scored as
    TokenPicker scores a sampled row (SamplingCheck's `logprobs`). A draft model samples with the row's
    sampler; the draft length follows transformers' schedule alone, from its start for every row (no timing
    switch-off: the random numbers a row draws depend on its draft lengths)."""
    stride = config.num_return_sequences
    generators = row_generators(config.seed, first_row + len(sources) * stride)[first_row:]
    rows = []
    for i, src in enumerate(sources):
        for j in range(samples):
            sampler = Sampler.of(config, cfg, steps, generators[i * stride + j])
            proposer, policy = speculative.proposal(config, cfg, tokenizer, assistant)
            if isinstance(proposer, DraftModel):
                proposer.sampler = sampler
            policy = DraftLength(policy.start, policy.cap, switch_off=False)
            rows.append(speculative.scored(cache, src, proposer, policy, steps, cfg, config, timings,
                                           check=SamplingCheck(sampler, proposer)))
    return rows

