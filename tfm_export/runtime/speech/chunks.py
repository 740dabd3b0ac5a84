"""`transcribe(..., vad=True)`: only the recording's speech is transcribed (issue #60). Torch-free.

A long pause of background noise makes Whisper invent words, and a window that starts in it can lose the
speech after it. With the VAD (runtime.speech.vad) the recording is first cut to its speech spans; the
spans are merged, in order and without the pauses between them, into chunks of up to one model window
(faster-whisper's collect_chunks), each chunk is transcribed on its own as a recording (the model's
`transcribe`: runtime.speech.whisper or runtime.speech.frames), and every time in the answers (segments,
words, each segment's window `seek`) is mapped from the chunk back to the recording (vad.SpeechMap). The
texts are joined in order; the ids too. The first chunk's language (given or detected) is the others', so
that one recording is read in one language. No speech at all: no segments, an empty text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...errors import InputError
from .logprobs import TextSoFar, logprobs_so_far
from .silero import RATE
from .vad import Chunk, SpeechMap, VadParameters, collect_chunks, speech_timestamps
from .whisper import DEFAULT_MAX_SECONDS, read_samples

__all__ = ["ChunkPlan", "SpeechChunks", "join_text", "joined", "speech_chunks", "transcribe_speech"]

Transcribe = Callable[..., dict[str, Any]]  # (model, samples, **options) -> {text, language, segments, ids}


@dataclass(frozen=True)
class ChunkPlan:
    """What chunking needs to know of the model."""

    sampling_rate: int  # of its input (the VAD reads 16 kHz)
    window_seconds: float  # chunks are merged up to this (Whisper's window; a frames model's max_len)
    frames_per_second: float | None = None  # of a segment's `seek` (Whisper's mel frames), None: no seek


def join_text(before: str, text: str) -> str:
    """Two chunks' texts in order: Whisper's begin with a space already; others get one between them."""
    if not before or not text or before[-1].isspace() or text[0].isspace():
        return before + text
    return before + " " + text


class _Mapper:
    """One chunk's times -> the recording's."""

    def __init__(self, chunk: Chunk, timeline: SpeechMap, plan: ChunkPlan):
        self.chunk, self.timeline, self.plan = chunk, timeline, plan

    def time(self, seconds: float, is_end: bool = False, span: int | None = None) -> float:
        within = min(max(seconds, 0.0), self.chunk.seconds)  # a window's padding is no speech
        return self.timeline.to_recording(self.chunk.offset + within, span, is_end)

    def span_of(self, start: float, end: float) -> int:
        """The span a word is in: its middle's (faster-whisper's rule: both its ends map by one span)."""
        middle = min(max((start + end) / 2, 0.0), self.chunk.seconds)
        return self.timeline.span_of(self.chunk.offset + middle)

    def word(self, word: dict[str, Any]) -> dict[str, Any]:
        span = self.span_of(word["start"], word["end"])
        return {**word, "start": self.time(word["start"], span=span), "end": self.time(word["end"], span=span)}

    def segment(self, segment: dict[str, Any]) -> dict[str, Any]:
        mapped = {**segment, "start": self.time(segment["start"]), "end": self.time(segment["end"], is_end=True)}
        if "seek" in segment and self.plan.frames_per_second:
            fps = self.plan.frames_per_second
            mapped["seek"] = int(round(self.time(segment["seek"] / fps) * fps))
        if "words" in segment:
            mapped["words"] = [self.word(w) for w in segment["words"]]
            if mapped["words"]:  # faster-whisper's: a segment with words spans them
                mapped["start"], mapped["end"] = mapped["words"][0]["start"], mapped["words"][-1]["end"]
        return mapped


def join_streamed(before: str, text: str) -> str:
    """join_text of streamed texts (the chunks before, a chunk's so far), their logprobs joined likewise when
    they have them (runtime.speech.logprobs.TextSoFar)."""
    joined_text, first, then = join_text(before, text), logprobs_so_far(before), logprobs_so_far(text)
    if first is None and then is None:
        return joined_text
    return TextSoFar(joined_text, [*(first or ()), *(then or ())])


def _streamed(on_text: Callable[[str], None] | None, before: str) -> Callable[[str], None] | None:
    """A chunk's `on_text`: the text of the chunks before, then this one's so far."""
    return None if on_text is None else lambda text: on_text(join_streamed(before, text))


def answer_text(result: dict[str, Any]) -> str:
    """A chunk's answer as streamed text: its text, with its logprobs where it has them."""
    return TextSoFar(result["text"], result["logprobs"]) if "logprobs" in result else result["text"]


@dataclass(frozen=True)
class SpeechChunks:
    """A recording cut to its speech: the chunks to transcribe and the map of their times back."""

    chunks: list[Chunk]
    timeline: SpeechMap


def speech_chunks(audio: Any, plan: ChunkPlan, parameters: VadParameters | dict[str, Any] | None = None,
                  max_seconds: float | None = DEFAULT_MAX_SECONDS) -> SpeechChunks:
    """A recording's speech spans (the VAD) merged into chunks of up to the plan's window."""
    parameters = VadParameters.of(parameters)
    if plan.sampling_rate != RATE:
        raise InputError(f"the VAD reads {RATE} Hz audio and this model {plan.sampling_rate} Hz; transcribe "
                         f"without vad")
    samples = read_samples(audio, RATE, max_seconds)
    spans = speech_timestamps(samples, parameters)
    return SpeechChunks(collect_chunks(samples, spans, plan.window_seconds), SpeechMap(spans))


def joined(speech: SpeechChunks, results: list[dict[str, Any]], plan: ChunkPlan, language: str | None = None,
           word_timestamps: bool = False, logprobs: bool = False) -> dict[str, Any]:
    """Each chunk's answer, in order, as one answer with the recording's times (the module docstring); the
    chunks' `words` and `logprobs` joined in order where asked for."""
    text, ids, segments, words, detected = "", [], [], [], None
    for chunk, result in zip(speech.chunks, results):
        detected = detected or result.get("language")
        mapper = _Mapper(chunk, speech.timeline, plan)
        text = join_text(text, result["text"])
        ids.extend(result["ids"])
        segments.extend(mapper.segment(s) for s in result["segments"])
        words.extend(mapper.word(w) for w in result.get("words", ()))
    out = {"text": text, "language": language if detected is None else detected, "segments": segments, "ids": ids}
    if word_timestamps:
        out["words"] = words
    if logprobs:
        out["logprobs"] = [entry for result in results for entry in result.get("logprobs", ())]
    return out


def transcribe_speech(model: Any, audio: Any, transcribe: Transcribe, plan: ChunkPlan,
                      parameters: VadParameters | dict[str, Any] | None = None,
                      max_seconds: float | None = DEFAULT_MAX_SECONDS, language: str | None = None,
                      on_text: Callable[[str], None] | None = None, **options: Any) -> dict[str, Any]:
    """The recording's speech chunks, each transcribed by `transcribe(model, samples, **options)` one after
    the other, as one answer with the recording's times (the module docstring; runtime.speech.batch decodes
    the chunks together)."""
    speech = speech_chunks(audio, plan, parameters, max_seconds)
    text, results, detected = "", [], None
    for chunk in speech.chunks:
        result = transcribe(model, chunk.samples, language=language or detected, max_seconds=None,
                            on_text=_streamed(on_text, text), **options)
        detected = detected or result.get("language")
        text = join_streamed(text, answer_text(result))
        results.append(result)
    return joined(speech, results, plan, language, bool(options.get("word_timestamps")),
                  bool(options.get("logprobs")))
