"""Whisper decoding for runtime.decode.loop's one loop (the `Strategy` protocol). Torch-free.

`WhisperStrategy` wraps a core strategy (runtime.decode.strategies.TokenPicker for greedy decoding and seeded
sampling, runtime.decode.beam.BeamSearch) as CTranslate2 runs Whisper through its one decode() and our Node
runtime through its one WhisperStrategy (runtimes/node/speech/search.mjs). The wrapper owns what is not a rule over
the scores:

- the forced decoder prompt (runtime.speech.prompt.decoder_prompt: an initial prompt, then
  <|startoftranscript|>, language, task, <|notimestamps|>), fed one token per step: `bos_id` is its first
  token and `advance` returns the next prompt token without asking the inner strategy;
- at the step that fed <|startoftranscript|> it reads the logits once: a row whose language is not given gets
  the detected one (transformers' detect_language, which also runs on <|startoftranscript|> alone: so only when
  no initial prompt precedes it; else run `LanguageDetector` first), and each row's <|nospeech|> probability
  is kept;
- `results()`: the inner strategy's hypotheses as `WhisperRow`s (avg_logprob, whether EOS ended the row, the
  prompt with the detected language).

From the first generated position on, the inner strategy chooses, with the (detected) prompt as its rows'
`prompt` (the processors' history, as transformers' whole decoder input) and Whisper's rules
(runtime.speech.rules.whisper_processors: begin_suppress_tokens, suppress_tokens, the timestamp rules) in its
`processors` list, after the generic processors. `whisper_strategy` builds the pair for a GenerationConfig.

Where later features plug in: a caller's own LogitsProcessor list (`whisper_strategy(processors=)`, after
Whisper's: hotword boosts, say); another core strategy in the wrapper (a draft-and-verify one for speculative
decoding: it must offer `rows`, `steps`, `prompt`, `advance`, `results` and an entry in `_ROWS`); a prompt on
every window is the prompt list itself (runtime.speech.longform.window_prompt); temperature fallback picks the
GenerationConfig of each try (runtime.speech.longform.window_config) and reads `WhisperRow.avg_logprob`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ...errors import InputError
from ..decode.beam import BeamSearch
from ..decode.loop import StepView, Strategy
from ..decode.processors import Processors
from ..decode.strategies import TokenPicker
from ..options.generation import GenerationConfig
from .prompt import WhisperSettings, decoder_prompt, init_tokens, needs_detection
from .rules import detect_language, no_speech_prob, whisper_processors

DETECT = -1  # a prompt's language slot that the first step fills (detect_language)


@dataclass(frozen=True)
class WhisperRow:
    """One decoded row of a window."""

    ids: list[int]  # the generated ids, timestamps included, EOS not
    ended: bool  # it ended with EOS (not at max_new_tokens)
    prompt: list[int]  # its forced decoder input (the detected language filled in)
    no_speech_prob: float | None  # P(<|nospeech|>) at <|startoftranscript|>
    avg_logprob: float  # mean log-probability of the generated ids, EOS included (transformers' fallback test)
    score: float  # greedy/sampling: sum(log p); beam search: transformers' sequences_score
    token_logprobs: tuple[float, ...] = ()  # greedy/sampling: each generated id's (EOS included); beam search: ()


def prompts_for(settings: WhisperSettings, batch: int, language: str | Sequence[str] | None = None,
                task: str | None = None, timestamps: bool = False, prompt_ids: Sequence[int] | None = None,
                detected: Sequence[int] | None = None) -> list[list[int]]:
    """Each source's forced decoder input; a language to be detected is `DETECT` (unless `detected` gives
    each source's id). One language, or one per source, as transformers' `language` argument."""
    languages = list(language) if isinstance(language, (list, tuple)) else [language] * batch
    if len(languages) != batch:
        raise InputError(f"{{language}} gives {len(languages)} languages for {batch} sources; give one, or one each",
                         options={"language": language})
    out = []
    for b, lang in enumerate(languages):
        found = detected[b] if detected is not None else DETECT
        if needs_detection(settings, lang, task) and found == DETECT and prompt_ids:
            raise InputError("with {prompt_ids} the language must be given or detected first (LanguageDetector): "
                             "transformers detects it without the prompt", options={"prompt_ids": None})
        out.append(decoder_prompt(init_tokens(settings, lang, task, timestamps, found), prompt_ids))
    return out


class CoreStrategy(Strategy, Protocol):
    """What WhisperStrategy needs of the strategy it wraps (TokenPicker, BeamSearch)."""

    steps: int  # its budget of generated ids
    config: GenerationConfig
    prompt: np.ndarray  # (rows, length): each row's decoder input before its first generated id


class WhisperStrategy:
    """A core strategy (`inner`) after Whisper's forced prompt, with language detection and <|nospeech|>
    (see the module docstring). `prompts`: (rows, length) one per decoder row of `inner` (a source's beams
    or samples repeat it); a `DETECT` slot gets the detected language. The inner strategy's `prompt` is
    set to them: build it with the processors for this prompt length (`whisper_strategy` does)."""

    def __init__(self, prompts: Sequence[Sequence[int]] | np.ndarray, settings: WhisperSettings,
                 inner: CoreStrategy):
        self.prompts = _prompt_rows(prompts)
        if len(self.prompts) != inner.rows:
            raise InputError(f"{len(self.prompts)} Whisper prompts for a strategy of {inner.rows} rows")
        self.settings, self.inner, self.rows = settings, inner, inner.rows
        self.bos_id = int(self.prompts[0, 0])
        hits = np.flatnonzero(self.prompts[0] == settings.decoder_start_token_id)
        self.sot_pos = int(hits[0]) if len(hits) else -1
        self.fed = 0  # the position of the prompt token the state was just fed
        self.no_speech = np.full(self.rows, np.nan)
        self.step_logprobs: list[np.ndarray] = []  # (rows,) per generated step: a picker's logprobs' increments
        inner.prompt = self.prompts
        self.finished = self.steps == 0

    @property
    def steps(self) -> int:
        """The inner strategy's budget of generated ids (the prompt not counted)."""
        return self.inner.steps

    @property
    def config(self) -> GenerationConfig:
        return self.inner.config

    @property
    def begin_index(self) -> int:
        """The forced prompt's length: the decoder input's length at the first generated position."""
        return self.prompts.shape[1]

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        """The next prompt token of every row while the prompt is fed, then the inner strategy's step."""
        forced = self._forced(view)
        if forced is not None:
            return forced, None
        before = getattr(self.inner, "logprobs", None)
        before = None if before is None else before.copy()
        out = self.inner.advance(view)
        if before is not None:
            self.step_logprobs.append(self.inner.logprobs - before)
        self.finished = self.inner.finished
        return out

    def _forced(self, view: StepView) -> np.ndarray | None:
        """The next prompt tokens, or None once the prompt is fed (the step's logits are the first choice's)."""
        if self.fed >= self.begin_index:
            return None
        if self.fed == self.sot_pos:
            logits = view.logits()
            if self.settings.no_timestamps_token_id is not None:
                self.no_speech = no_speech_prob(logits, self.settings)
            todo = self.prompts == DETECT
            if todo.any():
                found = detect_language(logits, self.settings)
                self.prompts = np.where(todo, found[:, None], self.prompts)
                self.inner.prompt = self.prompts
        self.fed += 1
        return self.prompts[:, self.fed].copy() if self.fed < self.begin_index else None

    def row(self, r: int, ids: list[int], ended: bool, avg_logprob: float, score: float,
            logprobs: tuple[float, ...] = ()) -> WhisperRow:
        """Decoder row r's WhisperRow of generated `ids` (EOS not in them)."""
        no_speech = None if np.isnan(self.no_speech[r]) else float(self.no_speech[r])
        return WhisperRow(ids, ended, self.prompts[r].tolist(), no_speech, avg_logprob, score, logprobs)

    def results(self) -> list[list[WhisperRow]]:
        """Per source, its rows: num_return_sequences of them (picking), or its best hypotheses (beam search)."""
        reader = _ROWS.get(type(self.inner))
        if reader is None:
            raise TypeError(f"WhisperStrategy reads the rows of {', '.join(t.__name__ for t in _ROWS)}, "
                            f"not of {type(self.inner).__name__}")
        return reader(self, self.inner)


def _picked_rows(whisper: WhisperStrategy, inner: TokenPicker) -> list[list[WhisperRow]]:
    """TokenPicker's rows (source i: rows i*n .. i*n + n-1); avg_logprob is transformers'
    `_retrieve_avg_logprobs` (EOS counted)."""
    out = []
    for r in range(inner.rows):
        n = int(inner.lengths[r])
        ids = inner.ids[r, :n].tolist()
        ended = bool(ids) and ids[-1] == inner.eos_id
        logprobs = tuple(float(step[r]) for step in whisper.step_logprobs[:n])
        out.append(whisper.row(r, ids[:-1] if ended else ids, ended,
                               float(inner.logprobs[r] / n) if n else float("nan"), float(inner.scores[r]), logprobs))
    k = inner.config.num_return_sequences
    return [out[i:i + k] for i in range(0, inner.rows, k)]


def _searched_rows(whisper: WhisperStrategy, inner: BeamSearch) -> list[list[WhisperRow]]:
    """BeamSearch's best num_return_sequences hypotheses per source (avg_logprob: the summed log-probability,
    from the score, over the length with EOS; transformers' fallback test instead log-softmaxes each step's
    processed scores again, which differs where a processor banned ids)."""
    out = []
    for b, hyps in enumerate(inner.results()):
        rows = []
        for s, hyp in enumerate(hyps):
            length = int(inner.slot_len[b, s])
            total = hyp.score * float(length) ** inner.config.length_penalty if length else float("nan")
            rows.append(whisper.row(b * inner.k, hyp.ids, length > len(hyp.ids),
                                    total / length if length else float("nan"), hyp.score))
        out.append(rows)
    return out


_ROWS: dict[type, Callable[[WhisperStrategy, Any], list[list[WhisperRow]]]] = {
    TokenPicker: _picked_rows, BeamSearch: _searched_rows}  # how each core strategy's rows read as WhisperRows


def _prompt_rows(prompts: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    """(rows, length) int64 prompts, checked: one length and one first token across a batch."""
    rows = [list(p) for p in prompts]
    if not rows or len({len(p) for p in rows}) != 1 or len({p[0] if p else None for p in rows}) != 1 or not rows[0]:
        raise InputError("Whisper prompts must have one length and one first token across a batch")
    return np.array(rows, dtype=np.int64)


class LanguageDetector:
    """One step on <|startoftranscript|> alone: each row's language id (transformers' detect_language)."""

    def __init__(self, rows: int, settings: WhisperSettings):
        self.rows, self.settings, self.bos_id = rows, settings, settings.decoder_start_token_id
        self.finished, self.found = False, np.zeros(rows, dtype=np.int64)

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        self.found = detect_language(view.logits(), self.settings)
        self.finished = True
        return self.found, None

    def results(self) -> list[int]:
        return self.found.tolist()


def whisper_strategy(prompts: Sequence[Sequence[int]], steps: int, settings: WhisperSettings,
                     config: GenerationConfig, timestamps: bool = False, vocab: int | None = None,
                     first_row: int = 0, processors: Processors = (), forced: int = 0) -> WhisperStrategy:
    """The WhisperStrategy of `config` for one prompt per source: beam search (a source's beams share its
    prompt), or picking (greedy, sampling) with each prompt repeated num_return_sequences times; Whisper's
    processors, then `processors` (a caller's own), in the inner strategy's list. `vocab`: the vocabulary's
    size (beam search); `first_row`: the sources' first row in a larger call (its sampling generators);
    `forced`: the prompts' last ids that Whisper's rules see as generated (faster-whisper's prefix: the
    timestamp rules' first position is before them)."""
    checked = _prompt_rows(prompts)
    beams = config.num_beams > 1
    rows = np.repeat(checked, config.num_beams if beams else config.num_return_sequences, axis=0)
    rules = (*whisper_processors(settings, checked.shape[1] - forced, timestamps), *processors)
    eos = settings.eos_token_id
    pad = settings.pad_token_id if settings.pad_token_id is not None else eos
    bos, batch = int(checked[0, 0]), len(checked)
    inner: TokenPicker | BeamSearch
    if beams:
        inner = BeamSearch(batch, steps, config, bos, eos, pad, (), vocab, processors=rules, prompt=rows)
    else:
        inner = TokenPicker(batch, steps, config, bos, eos, pad, (), first_row, processors=rules, prompt=rows)
    return WhisperStrategy(rows, settings, inner)


__all__ = ["DETECT", "CoreStrategy", "LanguageDetector", "WhisperRow", "WhisperStrategy", "prompts_for", "whisper_strategy"]
