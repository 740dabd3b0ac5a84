"""Whisper decoding strategies for runtime.decode.loop's one loop (the `Strategy` protocol). Torch-free.

Each row first feeds its forced decoder prompt (runtime.speech.prompt.decoder_prompt: an initial prompt, then
<|startoftranscript|>, language, task, <|notimestamps|>), one token per step: `bos_id` is its first token
and `advance` returns the next prompt token without choosing. At the step that fed
<|startoftranscript|> the strategy reads the logits once: a row whose language is not given gets the
detected one (transformers' detect_language, which also runs on <|startoftranscript|> alone: so only when
no initial prompt precedes it; else run `LanguageDetector` first), and each row's <|nospeech|>
probability is kept. From the first generated position on, ids are chosen from the logits after the
generic processors (runtime.decode.processors.process, on the whole decoder input as transformers') and
Whisper's (runtime.speech.rules.whisper_process):

- `WhisperPicker`: greedy or seeded sampling (runtime.decode.sampling), rows = batch * num_return_sequences;
  a row's `avg_logprob` is transformers' `_retrieve_avg_logprobs` (EOS counted).
- `WhisperBeamSearch`: runtime.decode.beam.BeamSearch with the Whisper processors on the host (the timestamp
  rules read whole rows, so the device head is not used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import InputError
from ..decode.beam import BeamSearch, top_k
from ..decode.loop import StepView
from ..options.generation import GenerationConfig
from ..decode.processors import log_softmax, process
from ..decode.sampling import row_generators, sample, warp
from .prompt import WhisperSettings, decoder_prompt, init_tokens, needs_detection
from .rules import detect_language, no_speech_prob, whisper_process

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


class _Prompted:
    """The forced-prompt half of the Whisper strategies: rows feed their prompt, then generate."""

    def _start(self, prompts: Sequence[Sequence[int]], settings: WhisperSettings, timestamps: bool) -> None:
        self.prompts = np.array(prompts, dtype=np.int64)  # (rows, prompt length)
        if self.prompts.ndim != 2 or len(set(self.prompts[:, 0].tolist())) != 1:
            raise InputError("Whisper prompts must have one length and one first token across a batch")
        self.settings, self.timestamps = settings, timestamps
        self.bos_id = int(self.prompts[0, 0])
        hits = np.flatnonzero(self.prompts[0] == settings.decoder_start_token_id)
        self.sot_pos = int(hits[0]) if len(hits) else -1
        self.fed = 0  # the position of the prompt token the state was just fed
        self.no_speech = np.full(len(self.prompts), np.nan)

    @property
    def begin_index(self) -> int:
        return self.prompts.shape[1]

    def _forced(self, view: StepView) -> np.ndarray | None:
        """The next prompt tokens, or None once the prompt is fed (the step's logits are the first choice's)."""
        if self.fed == self.sot_pos:
            logits = view.logits()
            if self.settings.no_timestamps_token_id is not None:
                self.no_speech = no_speech_prob(logits, self.settings)
            todo = self.prompts == DETECT
            if todo.any():
                found = detect_language(logits, self.settings)
                self.prompts = np.where(todo, found[:, None], self.prompts)
        self.fed += 1
        return self.prompts[:, self.fed].copy() if self.fed < self.begin_index else None

    def _history(self, generated: np.ndarray) -> np.ndarray:
        return np.concatenate([self.prompts, generated], axis=1)


class WhisperPicker(_Prompted):
    """Greedy or sampled Whisper decoding (`config.do_sample`) of len(prompts) rows: source i's
    num_return_sequences rows are consecutive, as runtime.decode.strategies.TokenPicker."""

    def __init__(self, prompts: Sequence[Sequence[int]], steps: int, settings: WhisperSettings,
                 config: GenerationConfig, timestamps: bool = False, first_row: int = 0):
        self._start(prompts, settings, timestamps)
        self.config, self.steps, self.rows = config, steps, len(self.prompts)
        self.eos_id = settings.eos_token_id
        self.pad_id = settings.pad_token_id if settings.pad_token_id is not None else self.eos_id
        self.ids = np.full((self.rows, steps), self.pad_id, dtype=np.int64)
        self.scores, self.logprobs = np.zeros(self.rows), np.zeros(self.rows)
        self.done = np.zeros(self.rows, dtype=bool)
        self.lengths = np.zeros(self.rows, dtype=np.int64)  # ids generated, EOS included
        self.generators = row_generators(config.seed, first_row + self.rows)[first_row:] if config.do_sample else []
        self.step, self.finished = 0, steps == 0

    def advance(self, view: StepView) -> tuple[np.ndarray, None]:
        forced = self._forced(view)
        if forced is not None:
            return forced, None
        cfg, step = self.config, self.step
        history = self._history(self.ids[:, :step])
        scores = process(view.logits().astype(np.float64), history, step, self.steps - 1, cfg, self.eos_id)
        whisper_process(scores, history, self.begin_index, self.settings, self.timestamps)
        if cfg.do_sample:
            warped = [warp(row, cfg.temperature, cfg.top_k, cfg.top_p) for row in scores]
            chosen = np.array([sample(w, g) for w, g in zip(warped, self.generators)], dtype=np.int64)
            # transformers' scores are the warped ones; its avg logprob undoes the temperature
            fallback = log_softmax(np.stack(warped) * cfg.temperature)
        else:
            chosen = scores.argmax(axis=1)
            fallback = log_softmax(scores)
        rows = np.arange(self.rows)
        live = ~self.done
        self.scores += np.where(live, log_softmax(scores)[rows, chosen], 0.0)
        self.logprobs += np.where(live, fallback[rows, chosen], 0.0)
        chosen = np.where(self.done, self.pad_id, chosen)
        self.ids[:, step] = chosen
        self.lengths += live
        self.done |= chosen == self.eos_id
        self.step += 1
        self.finished = bool(self.done.all()) or self.step == self.steps
        return chosen, None

    def results(self) -> list[list[WhisperRow]]:
        """Per source, its rows (num_return_sequences of them)."""
        out = []
        for r in range(self.rows):
            n = int(self.lengths[r])
            ids = self.ids[r, :n].tolist()
            ended = bool(ids) and ids[-1] == self.eos_id
            out.append(WhisperRow(ids[:-1] if ended else ids, ended, self.prompts[r].tolist(),
                                  None if np.isnan(self.no_speech[r]) else float(self.no_speech[r]),
                                  float(self.logprobs[r] / n) if n else float("nan"), float(self.scores[r])))
        k = self.config.num_return_sequences
        return [out[i:i + k] for i in range(0, self.rows, k)]


class WhisperBeamSearch(_Prompted, BeamSearch):
    """runtime.decode.beam.BeamSearch after a forced Whisper prompt, Whisper's processors on the host.

    `prompts`: one per source (its beams share it). Uses BeamSearch's selection (`_select`) as it is."""

    def __init__(self, prompts: Sequence[Sequence[int]], steps: int, settings: WhisperSettings,
                 config: GenerationConfig, timestamps: bool = False, vocab: int | None = None):
        k = config.num_beams
        eos = settings.eos_token_id
        pad = settings.pad_token_id if settings.pad_token_id is not None else eos
        BeamSearch.__init__(self, len(prompts), steps, config, int(prompts[0][0]), eos, pad, (), vocab)
        self._start([p for p in prompts for _ in range(k)], settings, timestamps)
        self.finished = steps == 0

    def head_key(self) -> None:
        """No device-side head: the timestamp rules read whole rows (in-flight rows run none for it)."""
        return None

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        forced = self._forced(view)
        if forced is not None:
            return forced, None
        return self.advance_logits(view.logits())

    def advance_logits(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        history = self._history(self.run_ids[:, :, : self.step].reshape(self.rows, self.step))
        scores = process(log_softmax(logits), history, self.step, self.steps - 1, self.config, self.eos_id)
        whisper_process(scores, history, self.begin_index, self.settings, self.timestamps)
        scores += self.run_scores.reshape(-1, 1)
        per_row = top_k(scores, self.width)
        return self._select(np.take_along_axis(scores, per_row, axis=1), per_row, scores.shape[1])

    def results(self) -> list[list[WhisperRow]]:  # type: ignore[override]
        """Per source, its best num_return_sequences hypotheses as WhisperRows (avg_logprob: the summed
        log-probability, from the score, over the length with EOS; transformers' fallback test instead
        log-softmaxes each step's processed scores again, which differs where a processor banned ids)."""
        out = []
        for b, hyps in enumerate(BeamSearch.results(self)):
            rows = []
            for s, hyp in enumerate(hyps):
                length = int(self.slot_len[b, s])
                ended = length > len(hyp.ids)
                total = hyp.score * float(length) ** self.config.length_penalty if length else float("nan")
                r = b * self.k
                rows.append(WhisperRow(hyp.ids, ended, self.prompts[r].tolist(),
                                       None if np.isnan(self.no_speech[r]) else float(self.no_speech[r]),
                                       total / length if length else float("nan"), hyp.score))
            out.append(rows)
        return out


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
                     first_row: int = 0) -> WhisperPicker | WhisperBeamSearch:
    """The strategy of `config` for one prompt per source: beam search, or picking (greedy, sampling) with
    each prompt repeated num_return_sequences times."""
    if config.num_beams > 1:
        return WhisperBeamSearch(prompts, steps, settings, config, timestamps, vocab)
    n = config.num_return_sequences
    return WhisperPicker([p for p in prompts for _ in range(n)], steps, settings, config, timestamps, first_row)


__all__ = ["DETECT", "LanguageDetector", "WhisperBeamSearch", "WhisperPicker", "WhisperRow", "prompts_for",
           "whisper_strategy"]
