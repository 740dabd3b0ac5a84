"""Log-probability processors, in transformers' order and with its semantics. Torch-free.

Each works on `scores` (rows, tgt_vocab) float64 log-probabilities (log_softmax of the decoder's
logits, which include the banned ids: beam search, as transformers') or logits (greedy and sampling,
as transformers') and the rows' ids so far `history` (rows, 1 + generated), which starts with BOS as
transformers' decoder input does (so BOS counts for the repetition penalty and n-grams, as there).
`banned` are the model's suppress_ids (a folder's single-token bad_words_ids and suppress_tokens):
-inf after the other processors, as transformers' NoBadWords/SuppressTokens, so that they are part
of the normalisation unless renormalize_logits asks for another log-softmax at the end.

Beam search on ONNX Runtime picks each row's candidates on the device (runtime.states.head) when no
processor needs the whole row (`needs_rows`): the bans, min_new_tokens and forced_eos then act
through `bias_key`/`bias_array` (an additive ban of ids) and `process_top` (forced EOS's score), and the head
renormalises over the biased logits when asked, with the same result.

The seam for a model's or a caller's own rules: a `LogitsProcessor` is any callable
`(scores, history, step) -> scores` (in place; returned), and TokenPicker and BeamSearch take a list of
them (`processors=`), which `process` runs after the generic processors above and before renormalize_logits'
final log-softmax: transformers' order, which appends a caller's `logits_processor` list to its own and keeps
LogitNormalization last. Whisper's suppress_tokens, begin_suppress_tokens and timestamp rules are such a list
(runtime.speech.rules.whisper_processors); so is whatever comes next (hotword boosts, a draft model's checks).
A processor reads whole rows, so a list that is not empty keeps beam search on the host path (`needs_rows`):
none is expressed as a device bias yet.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ..options.generation import GenerationConfig


class LogitsProcessor(Protocol):
    """One rule over a step's scores, after the generic processors (see the module docstring).

    `scores`: (rows, vocab) float64, the strategy's kind (TokenPicker: logits; BeamSearch: log-probabilities);
    `history`: (rows, length) int64, each row's decoder input so far (the strategy's `prompt`, BOS alone
    unless a wrapper forced more, then the generated ids); `step`: the ids generated so far. Returns the
    scores (changed in place, or a new array). What a processor needs of a row's past it reads from `history`: beam rows move
    between steps."""

    def __call__(self, scores: np.ndarray, history: np.ndarray, step: int) -> np.ndarray:
        ...


Processors = Sequence[LogitsProcessor]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(rows, vocab) float32/16 logits -> float64 log-probabilities: x - max - log(sum(exp(x - max)))."""
    x = logits.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def repetition_penalty(scores: np.ndarray, history: np.ndarray, penalty: float) -> None:
    """Tokens already in a row: x * penalty when x < 0, else x / penalty (in place)."""
    rows = np.arange(scores.shape[0])[:, None]  # (rows, 1): broadcast against history
    seen = scores[rows, history]  # (rows, 1 + generated)
    scores[rows, history] = np.where(seen < 0, seen * penalty, seen / penalty)


def banned_ngram_tokens(row: list[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already in `row` (which ends with the current n-1 tokens)."""
    if len(row) < n:
        return []
    prefix = tuple(row[len(row) - n + 1:])
    return [row[i + n - 1] for i in range(len(row) - n + 1) if tuple(row[i:i + n - 1]) == prefix]


def no_repeat_ngram(scores: np.ndarray, history: np.ndarray, n: int) -> None:
    for r, row in enumerate(history.tolist()):
        scores[r, banned_ngram_tokens(row, n)] = -np.inf


def process(scores: np.ndarray, history: np.ndarray, step: int, last_step: int, config: GenerationConfig,
            eos_id: int, banned: tuple[int, ...] = (), processors: Processors = ()) -> np.ndarray:
    """Apply the configured processors, the `banned` ids, then `processors` in order to `scores` (in place;
    returned). `step`: ids generated so far; `last_step`: the step at which the row reaches max_new_tokens."""
    if config.repetition_penalty != 1.0:
        repetition_penalty(scores, history, config.repetition_penalty)
    if config.no_repeat_ngram_size:
        no_repeat_ngram(scores, history, config.no_repeat_ngram_size)
    if banned:
        scores[:, list(banned)] = -np.inf
    if step < config.min_new_tokens:
        scores[:, eos_id] = -np.inf
    for forced in (_forced_bos(step, config), eos_id if _forced(step, last_step, config) else None):
        if forced is not None:  # transformers' order: forced BOS, then forced EOS (which wins at step 0)
            scores[:] = -np.inf
            scores[:, forced] = 0.0
    for processor in processors:  # a caller's list after transformers' own, as its _merge_criteria_processor_list
        scores = processor(scores, history, step)
    if config.renormalize_logits:  # a row of one finite score (forced EOS) stays as it is
        scores[:] = log_softmax(scores)
    return scores


def needs_rows(config: GenerationConfig, processors: Processors = ()) -> bool:
    """The processors that read or rewrite whole rows (the host path: logits cross to the host): the
    repetition penalty, n-gram bans, and any `processors` of a caller."""
    return config.repetition_penalty != 1.0 or config.no_repeat_ngram_size > 0 or len(processors) > 0


def _forced(step: int, last_step: int, config: GenerationConfig) -> bool:
    return config.forced_eos and step == last_step


def _forced_bos(step: int, config: GenerationConfig) -> int | None:
    return config.forced_bos_token_id if step == 0 else None


BiasKey = tuple[tuple[int, ...], int | None]  # (the ids banned, the id forced or None): what a bias is


def bias_key(step: int, last_step: int, config: GenerationConfig, eos_id: int, banned: tuple[int, ...] = ()
             ) -> BiasKey:
    """`process` without the whole-row processors, as an additive ban of the log-probabilities, small
    and hashable (`bias_array` makes the (vocab,) bias): -inf on the banned ids, on EOS before
    min_new_tokens, and on all but the forced id at a forced step. In-flight beam groups whose keys are
    equal share one head run (runtime.inflight). A forced id wins over every ban (forced EOS over forced BOS)."""
    forced = eos_id if _forced(step, last_step, config) else _forced_bos(step, config)
    if forced is not None:
        return (), forced
    return banned + ((eos_id,) if step < config.min_new_tokens else ()), None


def bias_array(vocab: int, key: BiasKey) -> np.ndarray:
    """The (vocab,) float32 bias a `bias_key` describes: 0 where allowed, -inf where not."""
    banned, forced = key
    bias = np.full(vocab, 0.0 if forced is None else -np.inf, dtype=np.float32)
    bias[list(banned)] = -np.inf
    if forced is not None:
        bias[forced] = 0.0
    return bias


def process_top(scores: np.ndarray, ids: np.ndarray, step: int, last_step: int, config: GenerationConfig,
                eos_id: int) -> np.ndarray:
    """The per-row best `scores` of ids (rows, width) after `bias_key`'s ban, as `process` leaves them: at a
    forced step the forced id scores 0 (in place; returned)."""
    forced = eos_id if _forced(step, last_step, config) else _forced_bos(step, config)
    if forced is not None:
        scores[:] = np.where(ids == forced, 0.0, -np.inf)
    return scores
