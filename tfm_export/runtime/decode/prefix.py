"""CTranslate2's `target_prefix` and `return_alternatives` over the core strategies. Torch-free.

`target_prefix`: each source's given first target tokens, fed to the decoder before anything is chosen
(transformers' `generate(decoder_input_ids=[decoder start, *prefix])`): `PrefixStrategy` feeds a forced prompt
one token a step, with no choice read, then hands every step to a core strategy (runtime.decode.strategies.
TokenPicker, runtime.decode.beam.BeamSearch) whose `prompt` is that decoder input (the processors' history, as
transformers' whole decoder input). As there, `max_new_tokens`, `min_new_tokens`, forced EOS and beam search's
length normalisation count the tokens after the prefix; a forced first token (forced_bos_token_id: a
multilingual model's target language) is put in front of the prefix unless the prefix starts with it, since
transformers forces it only at the first position. Hypotheses are returned with their prefix, as CTranslate2
does; scores are the generated tokens' only.

`return_alternatives`: CTranslate2's alternatives at the first position after the prefix: that position's
`n` most likely tokens (after the model's bans: the processors of step 0), each continued greedily
(`Alternatives`). Every alternative starts with the prefix and they differ at the position after it; their
scores are the alternative token's log-probability plus its continuation's.

A strategy forces one prompt length for all its rows (a prompt is fed one token a step, in step with the
batch): `prefixed_generate` decodes the sources in groups of equal prefix length and puts the results back
in order (a batch whose prefixes are all as long decodes as one).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import InputError
from ..options.generation import GenerationConfig, Hypothesis
from .beam import BeamSearch
from .loop import StepView, run
from .processors import log_softmax, process
from .strategies import TokenPicker


class PrefixStrategy:
    """Feeds `prompts` (rows, length) one token a step (the first is `bos_id`), then lets `inner` choose.

    `inner` must have been built for these rows with `prompt=prompts`; its ids are the tokens after the prompt."""

    def __init__(self, prompts: np.ndarray, inner: TokenPicker | BeamSearch):
        if prompts.shape[0] != inner.rows:
            raise InputError(f"{prompts.shape[0]} prompts for a strategy of {inner.rows} rows")
        self.prompts, self.inner, self.rows = prompts, inner, inner.rows
        self.bos_id = int(prompts[0, 0])
        self.fed = 0  # the prompt position the state was just fed
        self.finished = inner.steps == 0

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        if self.fed + 1 < self.prompts.shape[1]:
            self.fed += 1
            return self.prompts[:, self.fed].copy(), None
        out = self.inner.advance(view)
        self.finished = self.inner.finished
        return out

    def results(self) -> list[list[Hypothesis]]:
        """The inner strategy's hypotheses with each source's prefix (the prompt after the decoder start) first."""
        results = self.inner.results()
        per_source, out = self.rows // max(len(results), 1), []
        for b, hyps in enumerate(results):
            head = self.prompts[b * per_source, 1:].tolist()
            out.append([Hypothesis(head + h.ids, h.score) for h in hyps])
        return out


class Alternatives:
    """CTranslate2's `return_alternatives`: after the prompt, each source's `n` most likely next tokens (rows
    b*n .. b*n + n-1, best first, ties to the lower id), each row then continued greedily (see the module
    docstring). `config`: the search's processors for the alternative's position (bans, min_new_tokens)."""

    def __init__(self, prompts: np.ndarray, n: int, steps: int, config: GenerationConfig, bos_id: int, eos_id: int,
                 pad_id: int, banned: tuple[int, ...] = ()):
        self.prompts, self.n, self.steps, self.config = prompts, n, steps, config
        self.eos_id, self.pad_id, self.banned = eos_id, pad_id, banned
        self.rows, self.bos_id = prompts.shape[0], int(prompts[0, 0])
        self.fed, self.inner = 0, None
        self.first = np.full(self.rows, eos_id, dtype=np.int64)  # each row's alternative token
        self.first_logp = np.zeros(self.rows)
        self.finished = steps == 0

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        if self.fed + 1 < self.prompts.shape[1]:
            self.fed += 1
            return self.prompts[:, self.fed].copy(), None
        if self.inner is None:
            return self._expand(view), None
        out = self.inner.advance(view)
        self.finished = self.inner.finished
        return out

    def _expand(self, view: StepView) -> np.ndarray:
        """The alternatives' step: rows of a source share their logits; row j of source b takes its j-th best."""
        cfg, n = self.config, self.n
        scores = process(log_softmax(view.logits()), self.prompts, 0, self.steps - 1, cfg, self.eos_id, self.banned)
        logp = log_softmax(scores)[::n]  # (batch, vocab): a source's first row
        best = np.lexsort((np.broadcast_to(np.arange(logp.shape[1]), logp.shape), -logp), axis=1)[:, :n]
        self.first = best.reshape(-1).astype(np.int64)  # (rows,): source b's j-th best at row b*n + j
        self.first_logp = np.take_along_axis(logp, best, axis=1).reshape(-1)
        greedy = GenerationConfig(max_new_tokens=max(self.steps - 1, 1), min_new_tokens=max(cfg.min_new_tokens - 1, 0),
                                  forced_eos=cfg.forced_eos,
                                  repetition_penalty=cfg.repetition_penalty,
                                  no_repeat_ngram_size=cfg.no_repeat_ngram_size)
        prompt = np.concatenate([self.prompts, self.first[:, None]], axis=1)
        self.inner = TokenPicker(self.rows, self.steps - 1, greedy, self.bos_id, self.eos_id, self.pad_id,
                                 self.banned, prompt=prompt)
        self.inner.done[:] = self.first == self.eos_id  # an alternative that ends the row
        self.finished = self.steps == 1 or bool(self.inner.done.all())
        return self.first.copy()

    def results(self) -> list[list[Hypothesis]]:
        """Per source its n alternatives: the prefix, the alternative token, its greedy continuation."""
        hyps = []
        for r in range(self.rows):
            prefix, token = self.prompts[r, 1:].tolist(), int(self.first[r])
            if token == self.eos_id or self.inner is None:
                hyps.append(Hypothesis(prefix, float(self.first_logp[r])))
                continue
            ids = self.inner.ids[r, : self.inner.step].tolist()
            ids = ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids
            hyps.append(Hypothesis(prefix + [token] + ids, float(self.first_logp[r] + self.inner.scores[r])))
        return [hyps[i:i + self.n] for i in range(0, self.rows, self.n)]


def with_forced_first(prefix: Sequence[int], config: GenerationConfig) -> tuple[list[int], GenerationConfig]:
    """The prefix with the config's forced first token in front (unless it starts with it), and the config
    without it: inside a prefix nothing is forced (see the module docstring)."""
    forced, prefix = config.forced_bos_token_id, [int(i) for i in prefix]
    if forced is None:
        return prefix, config
    plain = GenerationConfig.from_dict({**config.to_dict(), "forced_bos_token_id": None})
    return (prefix if prefix[:1] == [forced] else [forced, *prefix]), plain


def prefix_strategy(prefixes: Sequence[Sequence[int]], steps: int, config: GenerationConfig, cfg: Any,
                    alternatives: int = 0) -> PrefixStrategy | Alternatives:
    """The strategy for sources whose prefixes (after any forced first token) are all as long: beam search
    or token picking after the prefix, or with `alternatives` n > 0 CTranslate2's n alternatives."""
    expand = alternatives or (config.num_beams if config.num_beams > 1 else config.num_return_sequences)
    rows = [[cfg.bos_id, *p] for p in prefixes for _ in range(expand)]
    prompts = np.array(rows, dtype=np.int64).reshape(len(rows), -1)
    if alternatives:
        return Alternatives(prompts, alternatives, steps, config, cfg.bos_id, cfg.eos_id, cfg.tgt_pad_id,
                            cfg.suppress_ids)
    if config.num_beams > 1:
        inner: TokenPicker | BeamSearch = BeamSearch(len(prefixes), steps, config, cfg.bos_id, cfg.eos_id,
                                                     cfg.tgt_pad_id, cfg.suppress_ids, cfg.tgt_vocab_size,
                                                     prompt=prompts)
    else:
        inner = TokenPicker(len(prefixes), steps, config, cfg.bos_id, cfg.eos_id, cfg.tgt_pad_id, cfg.suppress_ids,
                            prompt=prompts)
    return PrefixStrategy(prompts, inner)


def prefixed_generate(model: Any, sources: Sequence[Sequence[int]], prefixes: Sequence[Sequence[int]] | None,
                      config: GenerationConfig, alternatives: int = 0) -> list[list[Hypothesis]]:
    """`model.generate` (a runtime.api.GenerateMixin) with each source's target prefix (None: none) and, with
    `alternatives` n > 0, n alternatives each; decoded in groups of equal prefix length (module docstring)."""
    prefixes = [[] for _ in sources] if prefixes is None else list(prefixes)
    if len(prefixes) != len(sources):
        raise InputError(f"{{target_prefix}} gives {len(prefixes)} prefixes for {len(sources)} sources; give one "
                         "each (an empty list for none)", options={"target_prefix": len(prefixes)})
    vocab = model.config.tgt_vocab_size
    forced = [with_forced_first(p, config) for p in prefixes]
    bad = [i for p, _ in forced for i in p if not 0 <= i < vocab]
    if bad:
        raise InputError(f"{{target_prefix}} has id {bad[0]}, out of range for a vocabulary of {vocab} ids",
                         options={"target_prefix": bad[0]})
    plain = forced[0][1]
    limit, what = model._step_limit(plain)
    groups: dict[int, list[int]] = {}
    for i, (p, _) in enumerate(forced):
        groups.setdefault(len(p), []).append(i)
    out: list[list[Hypothesis]] = [[] for _ in sources]
    for length, members in sorted(groups.items()):
        room = limit - length
        if room < 1:
            raise InputError(f"a target prefix of {length} tokens leaves no room in {what} of {limit}",
                             options={"target_prefix": length})
        steps = min(model.steps_for(plain), room)
        strategy = prefix_strategy([forced[i][0] for i in members], steps, plain, model.config, alternatives)
        src = model.source_input([sources[i] for i in members])
        for i, hyps in zip(members, run(model.cache_for(plain, steps + length), src, strategy)):
            out[i] = hyps
    return out
