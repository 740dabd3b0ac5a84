"""Live transcription: Whisper over a growing audio buffer, text confirmed by LocalAgreement-2 (issue #61).
Torch-free.

    stream = StreamTranscriber(model, language="en")
    for chunk in microphone():                 # float32 samples at 16 kHz, any length (100 ms, say)
        for update in stream.feed(chunk):      # a list: empty until `step_seconds` of new audio came
            show(update.text, update.tentative)
    last = stream.finish()                     # everything left, confirmed (update.final)

The policy is whisper_streaming's (Macháček, Dabre, Bojar 2023; ufal/whisper_streaming's OnlineASRProcessor and
HypothesisBuffer), over this export's own `transcribe`:
1. each step re-transcribes the whole buffer (timestamps on; word times from alignment.onnx when the export has
   it, else each segment's time spread over its words by their length), conditioned on the confirmed text that
   was trimmed off the buffer (its last `prompt_chars`) as the prompt;
2. the hypothesis's words that start before the last confirmed word ended are dropped, and so are up to
   `overlap_words` of its first words that repeat the last confirmed ones;
3. the longest common prefix of this hypothesis and the previous one (word texts) is confirmed. Confirmed text
   is only ever appended to: later hypotheses never change it;
4. once the buffer is longer than `trim_seconds`, it is cut at the end of the last segment (but the hypothesis's
   last) that ends before the last confirmed word. That keeps every step's cost bounded on an hour-long
   session. A buffer where nothing was heard keeps its last step only; one that still outgrows a window is cut at
   the last confirmed word; one that outgrows two windows has its oldest tentative words confirmed as they are
   (not expected on speech; it bounds the cost of noise that never agrees).

The language, when not given, is the first confirmed hypothesis's and stays: every step would detect it again
otherwise, on a buffer that may hold a single word.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from ...errors import InputError
from .whisper import speech_settings
from .words import GRAPH as ALIGNMENT

log = logging.getLogger(__name__)

__all__ = ["Agreement", "StreamOptions", "StreamTranscriber", "StreamUpdate", "Word", "stream_transcribe"]

LATE_S = 0.1  # a hypothesis's word may start this much before the last confirmed one ended (whisper_streaming's)
NEAR_S = 1.0  # only a hypothesis that starts this close to the last confirmed word can repeat its last words


@dataclass(frozen=True)
class StreamOptions:
    """How often the buffer is re-transcribed and how it is kept short."""

    step_seconds: float = 1.0  # new audio between two re-transcriptions (whisper_streaming's --min-chunk-size)
    trim_seconds: float | None = None  # the buffer is trimmed past this (None: half the model's window, 15 s of 30)
    # of the confirmed text trimmed off, as the prompt (whisper_streaming's); 0: none (a model never trained with
    # prompts, as models/whisper-digits, writes nothing after one)
    prompt_chars: int = 200
    overlap_words: int = 5  # repeated words looked for where a hypothesis meets the confirmed text

    def __post_init__(self) -> None:
        if self.step_seconds <= 0 or (self.trim_seconds is not None and self.trim_seconds <= 0):
            raise InputError("step_seconds and trim_seconds must be above 0", options={"step_seconds": None})


@dataclass(frozen=True)
class Word:
    """A word of a hypothesis: seconds from the stream's start, its text as decoded (its leading space kept)."""

    start: float
    end: float
    text: str

    @property
    def key(self) -> str:
        return self.text.strip()


@dataclass(frozen=True)
class StreamUpdate:
    """What one step changed. `confirmed` is appended to the text for good; `tentative` replaces the last one."""

    confirmed: str  # the text this step confirmed ("" when none)
    tentative: str  # the latest hypothesis past the confirmed text: it may still change
    text: str  # all the text confirmed so far
    words: tuple[Word, ...] = ()  # the words this step confirmed
    final: bool = False  # finish()'s: nothing is tentative any more
    language: str | None = None  # the stream's language (None until one is known)


@dataclass(frozen=True)
class Segment:
    """A hypothesis's segment: its times (stream seconds) and words."""

    start: float
    end: float
    words: tuple[Word, ...]


class Agreement:
    """LocalAgreement-2 over consecutive hypotheses (whisper_streaming's HypothesisBuffer). A hypothesis covers
    the whole buffer, the confirmed words still in it included: those are found by their text first (word times
    of a small model can be far off), by their times when the hypothesis changed them (whisper_streaming's way)."""

    def __init__(self, overlap_words: int = 5):
        self.overlap_words = overlap_words
        self.confirmed: list[Word] = []  # confirmed words still inside the audio buffer
        self.pending: list[Word] = []  # the last hypothesis past the confirmed words
        self.last_end = 0.0  # where the last confirmed word ended
        self.matched = False  # the last hypothesis began with the confirmed words in the buffer

    def agree(self, hypothesis: list[Word]) -> list[Word]:
        """Confirm the common prefix of `hypothesis` (less the confirmed words) and the previous one; the rest
        becomes `pending`."""
        known = len(self.confirmed)
        self.matched = [w.key for w in hypothesis[:known]] == [w.key for w in self.confirmed]
        new = hypothesis[known:] if self.matched else self._after_confirmed(hypothesis)
        agreed = 0
        while agreed < min(len(new), len(self.pending)) and new[agreed].key == self.pending[agreed].key:
            agreed += 1
        return self.confirm(new[:agreed], new[agreed:])

    def _after_confirmed(self, hypothesis: list[Word]) -> list[Word]:
        """whisper_streaming's insert: the words that start after the last confirmed one ended, less up to
        `overlap_words` at their head that repeat the last confirmed ones."""
        new = [w for w in hypothesis if w.start > self.last_end - LATE_S]
        if new and self.confirmed and abs(new[0].start - self.last_end) < NEAR_S:
            for n in range(1, min(len(self.confirmed), len(new), self.overlap_words) + 1):
                if [w.key for w in self.confirmed[-n:]] == [w.key for w in new[:n]]:
                    return new[n:]
        return new

    def confirm(self, words: list[Word], pending: list[Word]) -> list[Word]:
        self.confirmed += words
        self.pending = pending
        if words:
            self.last_end = words[-1].end
        return words

    def forget(self, count: int, seconds: float) -> None:
        """The audio before `seconds` is gone, and with it the first `count` confirmed words."""
        self.confirmed = self.confirmed[count:]
        self.last_end = max(self.last_end, seconds) if self.confirmed else seconds


def segment_words(segment: dict[str, Any], offset: float, timed: bool) -> Segment:
    """A transcript's segment in stream seconds. Its words: alignment.onnx's (`timed`), else its span shared
    out by the words' lengths."""
    start, end = segment["start"] + offset, segment["end"] + offset
    if timed:
        return Segment(start, end, tuple(Word(w["start"] + offset, w["end"] + offset, w["word"])
                                         for w in segment.get("words", [])))
    pieces = re.findall(r"\s*\S+", segment["text"])
    total, done, words = sum(len(p.strip()) for p in pieces) or 1, 0, []
    for piece in pieces:
        begin = start + (end - start) * done / total
        done += len(piece.strip())
        words.append(Word(begin, start + (end - start) * done / total, piece))
    return Segment(start, end, tuple(words))


class StreamTranscriber:
    """One live stream's buffer and its confirmed text; see the module docstring. Not thread-safe: one caller
    feeds it (a server runs each session's steps one after the other)."""

    def __init__(self, model: Any, language: str | None = None, task: str = "transcribe", prompt: str | None = None,
                 options: StreamOptions = StreamOptions(), **transcribe_options: Any):
        """`prompt`: text the stream is conditioned on throughout (before the confirmed text's); `transcribe_options`:
        passed to each step's `model.transcribe` (a server's `runner`, `num_beams`, `max_new_tokens`)."""
        if model.config.source != "features":
            raise InputError("live transcription needs a Whisper export (a frames model decodes a recording whole)")
        _, features = speech_settings(model)
        self.model, self.language, self.task, self.options = model, language, task, options
        self.rate = features.sampling_rate
        self.window_seconds = features.n_samples / self.rate
        self.trim_seconds = options.trim_seconds or self.window_seconds / 2
        self.timed = ALIGNMENT in model.manifest.graphs  # word times from alignment.onnx, else from segments
        self.transcribe_options = transcribe_options
        self.audio = np.zeros(0, np.float32)
        self.offset = 0.0  # seconds of the stream before the buffer's first sample
        self.fresh = 0  # samples appended since the last step
        self.agreement = Agreement(options.overlap_words)
        self.text = ""  # all confirmed text
        self.initial = (prompt or "").strip()
        self.context = ""  # the confirmed text trimmed off the buffer (its last prompt_chars are the prompt)
        self.segments: list[Segment] = []  # the last hypothesis's
        self.steps = 0

    def append(self, samples: np.ndarray) -> None:
        """Add samples (1-D floats in [-1, 1] at the model's rate) without transcribing."""
        samples = np.asarray(samples)
        if samples.ndim != 1 or samples.dtype.kind != "f":
            raise InputError(f"stream samples must be a 1-D float array at {self.rate} Hz, got "
                             f"{samples.dtype} of shape {samples.shape}")
        self.audio = np.concatenate([self.audio, samples.astype(np.float32, copy=False)])
        self.fresh += len(samples)

    @property
    def buffered(self) -> float:
        """Seconds of audio in the buffer."""
        return len(self.audio) / self.rate

    @property
    def due(self) -> bool:
        """Enough new audio for a step (feed would transcribe)."""
        return self.fresh >= self.options.step_seconds * self.rate

    def feed(self, samples: np.ndarray) -> list[StreamUpdate]:
        """Append `samples`; a step when `step_seconds` of new audio came (one update), else none."""
        self.append(samples)
        return [self.step()] if self.due else []

    def step(self) -> StreamUpdate:
        """Re-transcribe the buffer now and confirm what two hypotheses agree on."""
        agreed = self.agreement.agree(self._hypothesis())
        update = self._update(agreed)
        self._trim()
        return update

    def finish(self) -> StreamUpdate:
        """The end of the stream: the audio not yet transcribed is, and every tentative word is confirmed."""
        agreed = self.agreement.agree(self._hypothesis()) if self.fresh or not self.steps else []
        rest = self.agreement.pending
        self.agreement.confirm(rest, [])
        return dataclasses.replace(self._update([*agreed, *rest]), final=True, tentative="")

    def _update(self, agreed: list[Word]) -> StreamUpdate:
        confirmed = "".join(w.text for w in agreed)
        self.text += confirmed
        return StreamUpdate(confirmed, "".join(w.text for w in self.agreement.pending), self.text, tuple(agreed),
                            language=self.language)

    def _hypothesis(self) -> list[Word]:
        """The buffer transcribed: its words in stream seconds (its segments kept for trimming)."""
        self.fresh, self.steps = 0, self.steps + 1
        if not len(self.audio):
            self.segments = []
            return []
        kept = self.options.prompt_chars
        prompt = " ".join(p for p in (self.initial, self.context[-kept:].strip() if kept else "") if p) or None
        result = self.model.transcribe(self.audio, language=self.language, task=self.task, timestamps=True,
                                       prompt=prompt, max_seconds=None, word_timestamps=self.timed,
                                       **self.transcribe_options)
        if self.language is None and result["text"].strip() and self.agreement.pending:
            self.language = result["language"]  # a second hypothesis with text: it is about to be confirmed
        self.segments = [segment_words(s, self.offset, self.timed) for s in result["segments"]]
        return [w for s in self.segments for w in s.words]

    def _trim(self) -> None:
        """Keep the buffer short (the module docstring's step 4)."""
        if self.buffered <= self.trim_seconds:
            return
        cut = self._segment_cut()
        if cut is not None:
            self._cut(*cut)
        elif self.buffered > self.window_seconds and self.agreement.confirmed:
            self._cut(len(self.agreement.confirmed), self.agreement.last_end)
        elif not self.agreement.pending and not self.agreement.confirmed:  # nothing heard: keep the last step
            self._cut(0, self.offset + self.buffered - self.options.step_seconds)
        elif self.buffered > 2 * self.window_seconds:
            self._force(self.offset + self.buffered - self.window_seconds)

    def _segment_cut(self) -> tuple[int, float] | None:
        """(confirmed words before it, where) the buffer can be cut: in the pause after the last segment, but the
        hypothesis's last, whose words are all confirmed; None when there is none (or the hypothesis did not
        begin with the confirmed words, so which of its words they are is not known)."""
        if not self.agreement.matched:
            return None
        confirmed, seen, cut = len(self.agreement.confirmed), 0, None
        for segment, following in zip(self.segments, self.segments[1:]):
            seen += len(segment.words)
            if seen > confirmed:
                break
            if segment.words:
                cut = (seen, (segment.end + max(following.start, segment.end)) / 2)
        return cut

    def _force(self, seconds: float) -> None:
        """Two windows without agreement (noise, never speech): confirm the tentative words before `seconds`."""
        forced = [w for w in self.agreement.pending if w.end <= seconds]
        log.warning("a live buffer passed two windows without agreement: %d words confirmed as they are", len(forced))
        self.text += "".join(w.text for w in forced)
        self.agreement.confirm(forced, self.agreement.pending[len(forced):])
        self._cut(len(self.agreement.confirmed), seconds)

    def _cut(self, words: int, seconds: float) -> None:
        """Drop the buffer's audio before `seconds` (stream time) and its first `words` confirmed words, which
        become prompt."""
        drop = min(len(self.audio), max(0, int(round((seconds - self.offset) * self.rate))))
        gone = "".join(w.text for w in self.agreement.confirmed[:words])
        self.context = (self.context + gone)[-self.options.prompt_chars - 1:] if self.options.prompt_chars else ""
        self.audio = self.audio[drop:]
        self.offset += drop / self.rate
        self.agreement.forget(words, self.offset)


def stream_transcribe(model: Any, chunks: Iterable[np.ndarray], **options: Any) -> Iterator[StreamUpdate]:
    """ExportedModel.stream_transcribe: each chunk fed as it comes, then the final update."""
    stream = StreamTranscriber(model, **options)
    for chunk in chunks:
        yield from stream.feed(chunk)
    yield stream.finish()

