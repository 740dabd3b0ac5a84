"""Voice activity detection: where a recording has speech (issue #60). Silero VAD on ONNX Runtime, torch-free.

Whisper transcribes what it hears, and a long pause of background noise is heard as something: it invents
words there, and a window that starts in the pause can lose the speech after it. Every peer therefore
finds the speech first and transcribes only that (faster-whisper's `vad_filter`, WhisperX, whisper.cpp;
OpenAI's `chunking_strategy`), and all of them use Silero VAD. This module is that step:

    speech_timestamps(samples, VadParameters())  -> [Span(start, end)] in samples at 16 kHz
    collect_chunks(samples, spans, max_seconds)   -> [Chunk]: the spans' audio, merged up to one window each
    SpeechMap(spans).to_recording(seconds)        -> a time on the speech-only timeline, on the recording's

The model and its per-window probabilities are runtime.speech.silero's. The probabilities become spans
exactly as `silero_vad.get_speech_timestamps` makes them (tests/test_vad.py compares the two); the merging
and the time map are faster-whisper's `collect_chunks` and `SpeechTimestampsMap`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Sequence

import numpy as np

from ...errors import InputError
from .silero import RATE, WINDOW, speech_probabilities

__all__ = ["Chunk", "Span", "SpeechMap", "VadParameters", "collect_chunks", "speech_timestamps",
           "timestamps_from_probabilities"]


@dataclass(frozen=True)
class VadParameters:
    """How speech probabilities become speech spans (silero's get_speech_timestamps' arguments), with
    faster-whisper's defaults (its VadOptions): long pauses split, generous padding."""

    threshold: float = 0.5  # a window with P(speech) >= this is speech (silero's "lazy" default)
    neg_threshold: float | None = None  # in speech, a window below this is silence (None: threshold - 0.15, >= 0.01)
    min_speech_duration_ms: int = 0  # spans this short or shorter are dropped
    max_speech_duration_s: float = math.inf  # longer spans are cut, at their longest pause if they have one
    min_silence_duration_ms: int = 2000  # a span ends after this much silence (shorter pauses stay inside)
    speech_pad_ms: int = 400  # each span is widened by this much on both sides (half a pause, if shorter)
    min_silence_at_max_speech: int = 98  # ms (silero's name): a pause a max-length cut may fall in is longer
    use_max_poss_sil_at_max_speech: bool = True  # cut at the span's longest pause (False: at its last one)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise InputError(f"VAD threshold must be between 0 and 1, got {self.threshold}")
        if self.neg_threshold is not None and not 0.0 <= self.neg_threshold <= self.threshold:
            raise InputError(f"VAD neg_threshold must be between 0 and the threshold ({self.threshold}), got "
                             f"{self.neg_threshold}")
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms",
                     "min_silence_at_max_speech"):
            if getattr(self, name) < 0:
                raise InputError(f"VAD {name} must be 0 or more, got {getattr(self, name)}")
        shortest = (WINDOW + 2 * RATE * self.speech_pad_ms / 1000) / RATE  # silero's cut leaves no speech below it
        if not self.max_speech_duration_s > shortest:
            raise InputError(f"VAD max_speech_duration_s must be over {shortest:g} s (one 32 ms window and "
                             f"speech_pad_ms on both sides), got {self.max_speech_duration_s}")

    @classmethod
    def of(cls, given: "VadParameters | dict[str, Any] | None") -> "VadParameters":
        """The parameters from themselves, a dict of their fields (faster-whisper's vad_parameters), or None."""
        if given is None or isinstance(given, cls):
            return given or cls()
        if not isinstance(given, dict):
            raise InputError(f"vad_parameters must be a VadParameters or a dict of its fields, got "
                             f"{type(given).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise InputError(f"unknown vad_parameters: {', '.join(unknown)}; they are {', '.join(sorted(known))}")
        return cls(**given)


class Span(NamedTuple):
    """Speech from sample `start` to `end` (exclusive) of the recording at 16 kHz."""

    start: int
    end: int


def speech_timestamps(samples: np.ndarray, parameters: VadParameters | None = None, session: Any = None
                      ) -> list[Span]:
    """The speech spans of a recording (float32 samples at 16 kHz), as silero's get_speech_timestamps."""
    probs = speech_probabilities(samples, session) if len(samples) else np.zeros(0, np.float32)
    return timestamps_from_probabilities(probs, len(samples), parameters or VadParameters())


# ---- probabilities -> spans (silero_vad.utils_vad.get_speech_timestamps_from_probs, 6.2.3) ---------------

class _Scan:
    """get_speech_timestamps' loop: its variables, and its steps as methods, in samples."""

    def __init__(self, parameters: VadParameters):
        p = parameters
        self.threshold = p.threshold
        self.neg_threshold = p.neg_threshold if p.neg_threshold is not None else max(p.threshold - 0.15, 0.01)
        self.pad = RATE * p.speech_pad_ms / 1000
        self.min_speech = RATE * p.min_speech_duration_ms / 1000
        self.max_speech = RATE * p.max_speech_duration_s - WINDOW - 2 * self.pad
        self.min_silence = RATE * p.min_silence_duration_ms / 1000
        self.min_silence_at_max = RATE * p.min_silence_at_max_speech / 1000
        self.longest_pause = p.use_max_poss_sil_at_max_speech
        self.triggered, self.current, self.speeches = False, {}, []
        self.temp_end = self.prev_end = self.next_start = 0
        self.possible_ends: list[tuple[int, int]] = []

    def reset(self, triggered: bool = False) -> None:
        self.prev_end = self.next_start = self.temp_end = 0
        self.possible_ends = []
        self.triggered = triggered

    def step(self, prob: float, at: int) -> None:
        if prob >= self.threshold and self.temp_end:  # speech again after a pause: a place to cut, maybe
            pause = at - self.temp_end
            if pause > self.min_silence_at_max:
                self.possible_ends.append((self.temp_end, pause))
            self.temp_end = 0
            if self.next_start < self.prev_end:
                self.next_start = at
        if prob >= self.threshold and not self.triggered:
            self.triggered, self.current = True, {"start": at}
            return
        if self.triggered and at - self.current["start"] > self.max_speech and self.cut(at):
            return
        if prob < self.neg_threshold and self.triggered:
            self.silence(at)

    def cut(self, at: int) -> bool:
        """A span at its longest: cut it (True: the window is done, as silero's `continue`)."""
        if self.longest_pause and self.possible_ends:
            self.prev_end, pause = max(self.possible_ends, key=lambda end: end[1])
            self.current["end"] = self.prev_end
            self.speeches.append(self.current)
            self.current = {}
            self.next_start = self.prev_end + pause
            resumed = self.next_start < self.prev_end + at  # silero's test, kept as it is
            if resumed:
                self.current["start"] = self.next_start
            self.reset(triggered=resumed)
            return False
        if self.prev_end:  # the last pause (use_max_poss_sil_at_max_speech=False)
            self.current["end"] = self.prev_end
            self.speeches.append(self.current)
            self.current = {}
            resumed = not self.next_start < self.prev_end
            if resumed:
                self.current["start"] = self.next_start
            self.reset(triggered=resumed)
            return False
        self.current["end"] = at  # no pause: cut here
        self.speeches.append(self.current)
        self.current = {}
        self.reset()
        return True

    def silence(self, at: int) -> None:
        if not self.temp_end:
            self.temp_end = at
        pause = at - self.temp_end
        if not self.longest_pause and pause > self.min_silence_at_max:
            self.prev_end = self.temp_end
        if pause < self.min_silence:
            return
        self.current["end"] = self.temp_end
        if self.current["end"] - self.current["start"] > self.min_speech:
            self.speeches.append(self.current)
        self.current = {}
        self.reset()


def timestamps_from_probabilities(probs: Sequence[float], n_samples: int, parameters: VadParameters
                                  ) -> list[Span]:
    """Speech spans from each window's P(speech): silero's get_speech_timestamps_from_probs at 16 kHz."""
    scan = _Scan(parameters)
    for i, prob in enumerate(probs):
        scan.step(float(prob), WINDOW * i)
    speeches = scan.speeches
    if scan.current and n_samples - scan.current["start"] > scan.min_speech:
        speeches.append({**scan.current, "end": n_samples})
    _pad(speeches, scan.pad, n_samples)
    return [Span(s["start"], s["end"]) for s in speeches]


def _pad(speeches: list[dict[str, int]], pad: float, n_samples: int) -> None:
    """Widen each span by `pad` samples, or by half the pause to the next when that is under two pads."""
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i == len(speeches) - 1:
            speech["end"] = int(min(n_samples, speech["end"] + pad))
            continue
        after = speeches[i + 1]
        pause = after["start"] - speech["end"]
        if pause < 2 * pad:
            speech["end"] += int(pause // 2)
            after["start"] = int(max(0, after["start"] - pause // 2))
        else:
            speech["end"] = int(min(n_samples, speech["end"] + pad))
            after["start"] = int(max(0, after["start"] - pad))


# ---- spans -> chunks, and back (faster-whisper's collect_chunks and SpeechTimestampsMap) ---------------

@dataclass(frozen=True)
class Chunk:
    """The audio of consecutive speech spans, joined without the pauses between them."""

    samples: np.ndarray
    offset: float  # seconds: where it starts on the speech-only timeline (the spans' audio end to end)
    spans: tuple[Span, ...]

    @property
    def seconds(self) -> float:
        return len(self.samples) / RATE


def collect_chunks(samples: np.ndarray, spans: Sequence[Span], max_seconds: float = math.inf) -> list[Chunk]:
    """The spans' audio merged, in order, into chunks of at most `max_seconds` each (a span longer than that
    is a chunk of its own), as faster-whisper's collect_chunks, except that it makes no empty chunk (it does
    for a first span over max_seconds, and for a recording without speech)."""
    chunks: list[Chunk] = []
    group: list[Span] = []
    length = done = 0  # samples in the chunk being filled, and in the chunks before it
    for span in spans:
        if group and length + span.end - span.start > max_seconds * RATE:
            chunks.append(_chunk(samples, group, done))
            done += length
            group, length = [], 0
        group.append(span)
        length += span.end - span.start
    if group:
        chunks.append(_chunk(samples, group, done))
    return chunks


def _chunk(samples: np.ndarray, spans: list[Span], before: int) -> Chunk:
    audio = np.concatenate([samples[s.start:s.end] for s in spans]).astype(np.float32, copy=False)
    return Chunk(audio, before / RATE, tuple(spans))


class SpeechMap:
    """A time on the speech-only timeline -> the same moment of the recording (faster-whisper's
    SpeechTimestampsMap, rounding to the millisecond where it rounds to 10 ms)."""

    def __init__(self, spans: Sequence[Span], precision: int = 3):
        self.precision = precision
        self.ends: list[int] = []  # each span's end on the speech-only timeline, in samples
        self.silence_before: list[float] = []  # seconds of pause before each span
        previous = silent = 0
        for span in spans:
            silent += span.start - previous
            previous = span.end
            self.ends.append(span.end - silent)
            self.silence_before.append(silent / RATE)

    def span_of(self, seconds: float, is_end: bool = False) -> int:
        """The span a time falls in; a time at a span's end is that span's when `is_end` (not the next's)."""
        sample = int(seconds * RATE)
        if is_end and sample in self.ends:
            return self.ends.index(sample)
        return min(bisect.bisect(self.ends, sample), len(self.ends) - 1)

    def to_recording(self, seconds: float, span: int | None = None, is_end: bool = False) -> float:
        index = self.span_of(seconds, is_end) if span is None else span
        return round(self.silence_before[index] + seconds, self.precision)
