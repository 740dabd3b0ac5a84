"""Batched transcription: the VAD chunks of a recording, and several recordings, decoded together (issue #60).
Torch-free.

    transcribe(model, "talk.wav", vad=True, batch_size=8)     # the talk's speech chunks 8 at a time
    transcribe(model, ["a.wav", "b.wav", "c.wav"], batch_size=8)  # a list in, a list of answers out

Every chunk (with `vad`) or recording (without) is one job: the model's own `transcribe` of it
(runtime.speech.whisper), run on one of `batch_size` worker threads whose windows are decoded together,
round by round (runtime.speech.batch_rounds: the encoder batched over the round's windows, the decoder's rows
together). A chunk is at most one window (30 s): a round of n chunks is one encoder call of n windows and
the decoder steps of the longest. The answers are those of the jobs run one after the other: each chunk
is transcribed as runtime.speech.chunks transcribes it, the first chunk's language (given, else detected,
all recordings' first chunks in one round) given to the recording's other chunks; the chunks' answers are
joined as chunks.joined joins them.

`on_text` is called with the text of the chunks done so far, from the first, as they end (not window by
window as in a sequential transcription). A frames model (runtime.speech.frames) decodes each chunk whole
and is not batched: its chunks run one after the other.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from ...audio.features import log_mel
from ..options.generation import GenerationConfig
from .batch_rounds import run_jobs
from .chunks import ChunkPlan, SpeechChunks, answer_text, join_streamed, joined, speech_chunks
from .longform import WindowRunner
from .prompt import needs_detection
from .search import LanguageDetector
from .vad import VadParameters
from .whisper import DEFAULT_MAX_SECONDS, speech_settings

__all__ = ["transcribe_batch"]

Transcribe = Callable[..., dict[str, Any]]  # (model, audio, **options) -> {text, language, segments, ids}


def _detect(model: Any, speeches: list[SpeechChunks], language: str | None, task: str | None,
            batch_size: int, cache: Any, runner: WindowRunner | None) -> list[str | None]:
    """Each recording's language for its chunks: the given one, else its first chunk's (as the sequential
    path detects it on that chunk), as the language's token; None where there is nothing to detect."""
    settings, features = speech_settings(model)
    if language is not None or not needs_detection(settings, None, task):
        return [language] * len(speeches)
    tokens = {tid: token for token, tid in (settings.lang_to_id or {}).items()}
    firsts = [n for n, speech in enumerate(speeches) if speech.chunks]

    def detect(index: int) -> Callable[[WindowRunner], str]:
        window = np.ascontiguousarray(log_mel(speeches[index].chunks[0].samples, features))
        return lambda run_window: tokens[int(run_window(window, LanguageDetector(1, settings))[0])]

    found = run_jobs([detect(n) for n in firsts], batch_size, cache, runner)
    languages: list[str | None] = [None] * len(speeches)
    for n, token in zip(firsts, found):
        languages[n] = token
    return languages


class _Prefix:
    """`on_text` of one recording: the joined text of its first chunks, called as the run of done ones grows."""

    def __init__(self, on_text: Callable[[str], None] | None, count: int):
        self.on_text, self.texts, self.shown = on_text, [None] * count, 0
        self.lock = threading.Lock()

    def done(self, index: int, text: str) -> None:
        if self.on_text is None:
            return
        with self.lock:
            self.texts[index] = text
            grown = self.shown
            while grown < len(self.texts) and self.texts[grown] is not None:
                grown += 1
            if grown == self.shown:
                return
            self.shown, joined_text = grown, ""
            for piece in self.texts[:grown]:
                joined_text = join_streamed(joined_text, piece)
            self.on_text(joined_text)


def transcribe_batch(model: Any, audios: Sequence[Any], transcribe: Transcribe, plan: ChunkPlan | None,
                     batch_size: int, parameters: VadParameters | dict[str, Any] | None = None,
                     max_seconds: float | None = DEFAULT_MAX_SECONDS, language: str | None = None,
                     on_text: Callable[[str], None] | None = None, runner: WindowRunner | None = None,
                     **options: Any) -> list[dict[str, Any]]:
    """Each recording's answer, their windows decoded `batch_size` at a time (the module docstring); `plan`:
    the VAD's chunking (None: each recording whole); `runner`: a thread-safe WindowRunner to decode on (the
    server's in-flight windows; default: rounds on the export's own cache); `on_text`: of one recording."""
    cache = None if runner is not None else model.cache_for(
        GenerationConfig(num_beams=options.get("num_beams", 1)), model.config.max_len)
    if plan is None:
        jobs = [_whole(model, audio, transcribe, max_seconds, language, on_text, options) for audio in audios]
        return run_jobs(jobs, batch_size, cache, runner)
    speeches = [speech_chunks(audio, plan, parameters, max_seconds) for audio in audios]
    languages = _detect(model, speeches, language, options.get("task", "transcribe"), batch_size, cache, runner)
    jobs, owners = [], []
    for n, speech in enumerate(speeches):
        prefix = _Prefix(on_text, len(speech.chunks))
        for index, chunk in enumerate(speech.chunks):
            jobs.append(_chunk_job(model, chunk.samples, transcribe, languages[n], prefix, index, options))
            owners.append(n)
    results = run_jobs(jobs, batch_size, cache, runner)
    words, logprobs = bool(options.get("word_timestamps")), bool(options.get("logprobs"))
    return [joined(speech, [r for r, owner in zip(results, owners) if owner == n], plan, language, words, logprobs)
            for n, speech in enumerate(speeches)]


def _whole(model: Any, audio: Any, transcribe: Transcribe, max_seconds: float | None, language: str | None,
           on_text: Callable[[str], None] | None, options: dict[str, Any]) -> Callable[[WindowRunner], Any]:
    return lambda run_window: transcribe(model, audio, language=language, max_seconds=max_seconds,
                                         on_text=on_text, runner=run_window, **options)


def _chunk_job(model: Any, samples: np.ndarray, transcribe: Transcribe, language: str | None, prefix: _Prefix,
               index: int, options: dict[str, Any]) -> Callable[[WindowRunner], Any]:
    def job(run_window: WindowRunner) -> dict[str, Any]:
        result = transcribe(model, samples, language=language, max_seconds=None, runner=run_window, **options)
        prefix.done(index, answer_text(result))
        return result

    return job
