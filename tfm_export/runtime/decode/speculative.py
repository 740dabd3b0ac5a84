"""Exact speculative greedy decoding: a proposer drafts k ids, the model checks them in one step. Torch-free.

At batch 1 a decoder step reads every weight once whatever the number of new ids, so checking k drafted ids
costs about one step where reading the weights dominates (a GPU; on a 2-core CPU 1.06-1.5x a step for k = 1-10 at
the base size: BENCHMARKS.md, "Speculative decoding"). Each step feeds the row's last id and the draft d_1..d_k (runtime.states.growing `feed`)
and reads the model's greedy id g_0..g_k after each (`position_ids`: the argmax of the decoder's
logits at every position under the model's bans, export.specs.EARLIER_LOGITS). The draft is accepted while
d_{i+1} == g_i; the step then emits the accepted ids and g_n, the model's own id after them, and the cache is cut
back to the ids kept (`truncate`). That is transformers' rule for greedy assisted generation (and
`prompt_lookup_num_tokens`): the output is plain greedy decoding's, id for id, only in fewer decoder calls.
(The checked positions' logits come from a call over k + 1 ids rather than one: the same arithmetic up to float
rounding, so a near-tie could in principle flip, as in transformers.)

Who reads the model's id at each position is a `check` (runtime.decode.checking): Greedy's argmax on the device
by default, or TokenPicker's greedy picking under processors that read the ids so far (repetition_penalty,
no_repeat_ngram_size, a caller's LogitsProcessor list: Whisper's timestamp rules, runtime.speech.assisted), each
position processed with the history extended by the draft before it, so that those decodes speculate exactly
too. A `prompt` (Whisper's forced decoder input) is fed whole in the first step. Sampling's check is
runtime.decode.speculative_sampling.SamplingCheck: its picks are the ids the rule emits (drafts kept with
probability min(1, p/q), then a draw from the residual or p), so the output keeps the model's distribution.

The draft length adapts, and speculation switches itself off where it does not pay (runtime.decode.draft_length:
transformers' heuristic schedule, +2 after a step that accepted every drafted id, -1 otherwise, and plain steps for
a while when speculative ones cost more per emitted id). Proposers: runtime.decode.proposers.
Only rows of one source (batch 1) speculate; runtime.api decodes a larger batch source by source.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...config import TransformerConfig
from ...errors import InputError
from .loop import DecodeTimings, DecoderCache, DecoderState
from ..options.generation import GenerationConfig, Hypothesis
from .checking import ArgmaxCheck, Check, ProcessorCheck
from .draft_length import DraftLength
from .proposers import DraftModel, PromptLookup, Proposer, check_draft

MAX_POLICIES = 16  # a runner's draft-length policies (`proposal`)


class CheckingState(DecoderState, Protocol):
    """A decoder state that takes several ids a step and can forget positions (runtime.states.growing)."""

    length: int

    def feed(self, tokens: np.ndarray) -> None:
        ...

    def position_ids(self, bias: np.ndarray) -> np.ndarray:
        ...

    def position_logits(self) -> np.ndarray:
        ...

    def truncate(self, length: int) -> None:
        ...


@dataclass
class Speculation:
    """What a speculative decode did: decoder calls, ids drafted and ids of the drafts accepted."""

    calls: int = 0
    drafted: int = 0
    accepted: int = 0
    ended: bool = False  # the last decode ended with EOS (not at its budget of ids)
    score: float = float("nan")  # the last decode's sum of log p (`scored`), nan under a check that keeps none

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def speculate(cache: DecoderCache, src: np.ndarray, proposer: Proposer, policy: DraftLength, steps: int,
              cfg: TransformerConfig, forced_bos: int | None = None, timings: DecodeTimings | None = None,
              stats: Speculation | None = None, check: Check | None = None, prompt: list[int] | None = None
              ) -> list[int]:
    """Greedy ids of one source (src (1, src_len)), at most `steps` with EOS (EOS not returned), drafted by
    `proposer`; equal to runtime.decode.strategies.Greedy's, or with a `check` (runtime.decode.checking:
    ProcessorCheck) to TokenPicker's greedy ids under its processors. `prompt`: the decoder's forced input
    (default: BOS), fed in the first step. `stats` and `timings` (a step per decoder call, and its
    drafted/accepted counts) are filled when given."""
    stats = stats if stats is not None else Speculation()
    check = check if check is not None else ArgmaxCheck(cfg, forced_bos)
    # the draft's cache may be the model's own (a self-draft): its lock is then held once
    with cache.lock, (nullcontext() if proposer.lock is cache.lock else proposer.lock):
        start = time.perf_counter()
        state: Any = cache.start(src, 1)
        proposer.start(src)
        if timings is not None:
            timings.encoder_s = time.perf_counter() - start
        row = SpeculativeRow(state, proposer, policy, steps, check, prompt or [cfg.bos_id], stats)
        try:
            while not row.finished:
                start = time.perf_counter()
                row.step()
                if timings is not None:
                    timings.steps_s.append(time.perf_counter() - start)
        finally:
            proposer.close()
    if timings is not None:
        timings.drafted, timings.accepted = timings.drafted + stats.drafted, timings.accepted + stats.accepted
    return row.result()


class SpeculativeRow:
    """One source's speculative decode, a step at a time (`speculate`'s loop; runtime.inflight steps it among
    the server's rows in flight): `state` was started on the source and the proposer too."""

    def __init__(self, state: Any, proposer: Proposer, policy: DraftLength, steps: int, check: Check,
                 prompt: list[int], stats: Speculation):
        self.state, self.proposer, self.policy, self.steps, self.check = state, proposer, policy, steps, check
        self.stats = stats
        self.history, self.out = list(prompt), []  # history: the decoder's input; from state.length on not fed

    @property
    def finished(self) -> bool:
        return len(self.out) >= self.steps or (bool(self.out) and self.out[-1] == self.check.eos_id)

    def step(self) -> list[int]:
        """One decoder call: feed the unfed ids and a draft, keep what the model agrees with; the ids emitted
        (a forced id, the accepted draft and the model's next id, cut at EOS)."""
        start, check, state, stats = time.perf_counter(), self.check, self.state, self.stats
        forced = check.forced(len(self.out))
        # A forced id (forced_bos_token_id) is known without the model: plain decoding spends a decoder call on
        # it, here it joins the history unfed and this call feeds it with the draft after it (NLLB's outputs of
        # 5-9 ids took 2 calls a source with every draft right, the forced id's and the check's).
        lead = [] if forced is None else [forced]
        self.out += lead  # in place: no copy of the row's ids a step
        self.history += lead
        if self.finished:  # a budget of one id, or a forced EOS: nothing to read from the model
            return lead
        room = self.steps - len(self.out) - 1  # the step emits one id beyond the accepted draft
        k = self.policy.length(room)
        draft = self.proposer.propose(self.history, k) if k > 0 else []
        state.feed(np.array([self.history[state.length:] + draft], dtype=np.int64))  # (1, unfed + k)
        picked = check.picks(state, self.history, draft, len(self.out))
        n = 0
        while n < min(len(draft), len(picked)) and draft[n] == picked[n]:
            n += 1
        new = draft[:n] + picked[n:n + 1]
        if check.eos_id in new:
            new = new[:new.index(check.eos_id) + 1]
        check.keep(len(new))
        self.out += new
        self.history += new
        state.truncate(len(self.history) - 1)
        self.policy.record(len(draft), n, len(lead) + len(new), time.perf_counter() - start)
        stats.calls, stats.drafted, stats.accepted = stats.calls + 1, stats.drafted + len(draft), stats.accepted + n
        return lead + new

    @property
    def score(self) -> float:
        """The sum of log p of the ids emitted, EOS included, under a check that keeps them (ProcessorCheck, ...);
        nan under one that keeps none (ArgmaxCheck: the logits stay on the device)."""
        logprobs = getattr(self.check, "logprobs", None)
        return float(sum(logprobs)) if logprobs is not None else float("nan")

    def result(self) -> list[int]:
        """The ids (EOS not returned); sets the stats' `ended` and `score`."""
        out, stats = self.out, self.stats
        stats.ended, stats.score = bool(out) and out[-1] == self.check.eos_id, self.score
        return out[:-1] if stats.ended else out


def scored(cache: DecoderCache, src: np.ndarray, proposer: Proposer, policy: DraftLength, steps: int,
           cfg: TransformerConfig, config: GenerationConfig, timings: DecodeTimings | None = None,
           check: Check | None = None, prompt: list[int] | None = None) -> Hypothesis:
    """`speculate`'s row as a Hypothesis with the score plain decoding gives it (TokenPicker's: the sum of
    log_softmax of the processed scores at each kept id, EOS included, no length penalty, as
    runtime.options.generation.Hypothesis says). The check: `check`, or by default a ProcessorCheck of `config`
    (TokenPicker's greedy picks: the same ids as plain greedy under the same processors)."""
    check = check if check is not None else ProcessorCheck(config, cfg.eos_id, steps, tuple(cfg.suppress_ids))
    stats = Speculation()
    ids = speculate(cache, src, proposer, policy, steps, cfg, config.forced_bos_token_id, timings, stats, check,
                    prompt)
    return Hypothesis(ids, stats.score)


def wanted(config: Any, assistant: Any | None) -> bool:
    """Whether a decode of `config` (a GenerationConfig) asks for speculation."""
    return config.prompt_lookup_num_tokens > 0 or assistant is not None


def checkable(config: Any) -> bool:
    """Whether a decode of `config` picks greedily, so that a speculative check reproduces it (num_beams 1, no
    sampling, one sequence); its processors, if any, are runtime.decode.checking.ProcessorCheck's."""
    return config.num_beams == 1 and not config.do_sample and config.num_return_sequences == 1


def proposal(config: Any, cfg: TransformerConfig, tokenizer: dict | None, assistant: Any | None,
             policies: dict[tuple, DraftLength] | None = None) -> tuple[Proposer, DraftLength]:
    """The proposer and draft-length policy of a GenerationConfig: the `assistant`'s drafts (an opened export of
    the same vocabulary, checked: runtime.decode.proposers.check_draft) from config.num_assistant_tokens, else
    prompt lookup of config.prompt_lookup_num_tokens. `policies` (a runner's, kept across its calls) holds the
    policy of each proposer already used, which then goes on from where it was."""
    if assistant is None:
        n = config.prompt_lookup_num_tokens
        proposer: Proposer = PromptLookup(cfg)
        key, fresh = ("lookup", n), (lambda: DraftLength(n, n))
    else:
        check_draft(cfg, tokenizer, assistant.config, assistant.manifest.tokenizer)
        if getattr(assistant, "growing", None) is None:
            raise InputError("the assistant has no KV-cache decoder (a module export): it cannot draft")
        proposer = DraftModel(assistant.growing, assistant.config.max_len)
        n = config.num_assistant_tokens
        key, fresh = ("draft", id(assistant.growing), n), (lambda: DraftLength(n))
    if policies is None:
        return proposer, fresh()
    if key not in policies and len(policies) >= MAX_POLICIES:  # drafts opened and dropped: forget the oldest
        policies.pop(next(iter(policies)))
    return proposer, policies.setdefault(key, fresh())
