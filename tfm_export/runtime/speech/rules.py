"""What Whisper's generate does to a step's logits, as transformers' WhisperForConditionalGeneration applies it.
Torch-free.

- The logits processors, over (rows, vocab) float scores and each row's decoder input so far `history`
  (rows, length: the prompt, then the generated ids), in place as runtime.decode.processors: `suppress`,
  `suppress_at_begin`, `timestamp_rules`. As runtime.decode.processors.LogitsProcessor objects (`SuppressTokens`,
  `SuppressAtBegin`, `TimestampRules`), `whisper_processors` lists them in transformers' order for a core
  strategy's `processors=` (TokenPicker, BeamSearch run them after their generic processors: transformers
  appends the Whisper ones to its own list; a caller's own go after them, as Whisper's generate prepends
  its list to the caller's); `whisper_process` applies that list once. Greedy and sampling pass logits,
  beam search log_softmax(logits), as transformers does.
- `detect_language`: the argmax over the language tokens of the step that fed `<|startoftranscript|>`
  (transformers' detect_language); `no_speech_prob`: softmax of that step's logits at `<|nospeech|>`
  (WhisperNoSpeechDetection).

The settings these read (runtime.speech.prompt.WhisperSettings) and the prompts are in runtime.speech.prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import InputError
from ..decode.processors import LogitsProcessor
from .prompt import WhisperSettings


# ---- the logits processors --------------------------------------------------------------------------

def suppress(scores: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """SuppressTokensLogitsProcessor: -inf at `tokens` (ids beyond the vocabulary are ignored), in place."""
    ids = [t for t in tokens if 0 <= t < scores.shape[1]]
    scores[:, ids] = -np.inf
    return scores


def suppress_at_begin(scores: np.ndarray, length: int, begin_index: int, tokens: Sequence[int]) -> np.ndarray:
    """SuppressTokensAtBeginLogitsProcessor: `suppress` when the rows' input is `begin_index` ids long."""
    return suppress(scores, tokens) if length == begin_index else scores


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """(rows, n) -> (rows,) log(sum(exp(x))), -inf for rows of -inf only."""
    top = x.max(axis=1)
    safe = np.where(np.isneginf(top), 0.0, top)
    with np.errstate(divide="ignore"):
        return np.where(np.isneginf(top), -np.inf, safe + np.log(np.exp(x - safe[:, None]).sum(axis=1)))


def timestamp_rules(scores: np.ndarray, history: np.ndarray, begin_index: int, no_timestamps_token_id: int,
                    eos_token_id: int, max_initial_timestamp_index: int | None = None,
                    from_logprob: bool = True) -> np.ndarray:
    """WhisperTimeStampLogitsProcessor on (rows, vocab) `scores` with `history` (rows, length), in place:
    <|notimestamps|> banned; after a lone timestamp (not a pair) only timestamps or the ids from EOS on, after
    a pair no timestamp; timestamps never decrease (nor repeat after a pair); the first generated token is a
    timestamp at most max_initial_timestamp_index; and when the timestamps' summed probability beats every
    text token's (`from_logprob`), only timestamps."""
    begin = no_timestamps_token_id + 1
    scores[:, no_timestamps_token_id] = -np.inf
    floors = np.empty(scores.shape[0], dtype=np.int64)
    for r, row in enumerate(np.asarray(history)[:, begin_index:].tolist()):
        last = len(row) >= 1 and row[-1] >= begin
        penultimate = len(row) < 2 or row[-2] >= begin
        if last:
            if penultimate:
                scores[r, begin:] = -np.inf
            else:
                scores[r, :eos_token_id] = -np.inf
        stamps = [t for t in row if t >= begin]
        floors[r] = begin if not stamps else stamps[-1] if last and not penultimate else stamps[-1] + 1
    vocab = np.arange(scores.shape[1])
    scores[(vocab >= begin) & (vocab < floors[:, None])] = -np.inf
    if history.shape[1] == begin_index:
        scores[:, :begin] = -np.inf
        if max_initial_timestamp_index is not None:
            scores[:, begin + max_initial_timestamp_index + 1:] = -np.inf
    if from_logprob:
        logp = log_softmax_rows(scores)
        stamped = _logsumexp(logp[:, begin:]) > logp[:, :begin].max(axis=1)
        scores[stamped, :begin] = -np.inf
    return scores


def log_softmax_rows(scores: np.ndarray) -> np.ndarray:
    """float64 log_softmax per row that leaves -inf entries -inf (rows of -inf only become nan, as torch)."""
    x = scores.astype(np.float64)
    top = x.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = x - top
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


@dataclass(frozen=True)
class SuppressTokens:
    """`suppress` as a LogitsProcessor: suppress_tokens, banned at every step."""

    tokens: tuple[int, ...]

    def __call__(self, scores: np.ndarray, history: np.ndarray, step: int) -> np.ndarray:
        return suppress(scores, self.tokens)


@dataclass(frozen=True)
class SuppressAtBegin:
    """`suppress_at_begin` as a LogitsProcessor: begin_suppress_tokens at the first generated position
    (a row's input is `begin_index` ids long: the forced prompt)."""

    tokens: tuple[int, ...]
    begin_index: int

    def __call__(self, scores: np.ndarray, history: np.ndarray, step: int) -> np.ndarray:
        return suppress_at_begin(scores, history.shape[1], self.begin_index, self.tokens)


@dataclass(frozen=True)
class TimestampRules:
    """`timestamp_rules` as a LogitsProcessor (WhisperTimeStampLogitsProcessor); `begin_index`: the length
    of the forced decoder prompt."""

    begin_index: int
    no_timestamps_token_id: int
    eos_token_id: int
    max_initial_timestamp_index: int | None = None

    def __call__(self, scores: np.ndarray, history: np.ndarray, step: int) -> np.ndarray:
        return timestamp_rules(scores, history, self.begin_index, self.no_timestamps_token_id, self.eos_token_id,
                               self.max_initial_timestamp_index)


def whisper_processors(settings: WhisperSettings, begin_index: int, timestamps: bool) -> tuple[LogitsProcessor, ...]:
    """Whisper's processors in transformers' order (begin_suppress_tokens, suppress_tokens, then the timestamp
    rules when `timestamps`) for rows whose forced decoder prompt is `begin_index` ids long."""
    rules: list[LogitsProcessor] = [SuppressAtBegin(settings.begin_suppress_tokens, begin_index),
                                    SuppressTokens(settings.suppress_tokens)]
    if timestamps:
        if settings.no_timestamps_token_id is None:
            raise InputError("this Whisper model has no timestamp tokens (no_timestamps_token_id): it takes no "
                             "{return_timestamps}", options={"return_timestamps": True})
        rules.append(TimestampRules(begin_index, settings.no_timestamps_token_id, settings.eos_token_id,
                                    settings.max_initial_timestamp_index))
    return tuple(rules)


def whisper_process(scores: np.ndarray, history: np.ndarray, begin_index: int, settings: WhisperSettings,
                    timestamps: bool) -> np.ndarray:
    """`whisper_processors` applied to one step's `scores` (in place; returned)."""
    for rule in whisper_processors(settings, begin_index, timestamps):
        scores = rule(scores, history, history.shape[1] - begin_index)
    return scores


# ---- the first step: language and silence ----------------------------------------------------------

def detect_language(logits: np.ndarray, settings: WhisperSettings) -> np.ndarray:
    """(rows, vocab) logits of the step that fed <|startoftranscript|> alone -> (rows,) language ids: the
    argmax over lang_to_id's tokens (ties: the lower id), as transformers' detect_language."""
    if not settings.lang_to_id:
        raise InputError("this Whisper model is English-only: there is no language to detect")
    ids = np.array(sorted(settings.lang_to_id.values()), dtype=np.int64)
    return ids[np.asarray(logits)[:, ids].argmax(axis=1)]


def language_probs(logits: np.ndarray, settings: WhisperSettings) -> list[dict[str, float]]:
    """Each row's probability of each language token (softmax over the language tokens only)."""
    tokens = settings.languages()
    ids = [settings.lang_to_id[t] for t in tokens]  # type: ignore[index]
    probs = np.exp(log_softmax_rows(np.asarray(logits)[:, ids]))
    return [dict(zip(tokens, row.tolist())) for row in probs]


def no_speech_prob(logits: np.ndarray, settings: WhisperSettings) -> np.ndarray:
    """(rows, vocab) logits of the step that fed <|startoftranscript|> -> (rows,) probability of <|nospeech|>
    (WhisperNoSpeechDetection: softmax of the raw logits at that position)."""
    return np.exp(log_softmax_rows(np.asarray(logits))[:, settings.no_speech_token_id])
