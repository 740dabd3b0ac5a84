"""Live transcription (runtime.speech.streaming, ExportedModel.stream_transcribe) on the trained Whisper fixture
(models/whisper-digits, 4 s windows: conftest's digits_export) and held-out espeak-ng speech fed in 100 ms chunks.

Within one window the final text equals offline `transcribe` of the same audio, word for word; over several
windows it equals what was said (offline long form errs where a window cuts an utterance: test_whisper_trained's
LONG_FORM_WER), with the buffer kept under one window throughout. Text is confirmed before the audio ends and
confirmed text is only ever appended to. LocalAgreement-2 itself (Agreement) is checked on word lists.

The fixture was never trained with prompts (it writes nothing after one), so the streams here run with
prompt_chars=0 but one, which checks what the prompt would be on a model that reads it.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tfm_export.errors import InputError
from tfm_export.runtime import open_export
from tfm_export.runtime.speech.streaming import Agreement, StreamOptions, StreamTranscriber, Word

FOLDER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
CHUNK = RATE // 10  # 100 ms
NO_PROMPT = StreamOptions(prompt_chars=0)
PAUSE_S = 0.7


def heldout(first: int, count: int) -> list[Spoken]:
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    return [Spoken.from_row(row) for row in rows[first:first + count]]


def recording(spoken: list[Spoken], pause: float = PAUSE_S) -> np.ndarray:
    """The utterances one after the other, `pause` seconds of silence around each."""
    gap = np.zeros(int(pause * RATE), np.float32)
    return np.concatenate([gap[: RATE // 4]] + [part for s in spoken for part in (s.samples(), gap)])


def chunks(samples: np.ndarray, size: int = CHUNK):
    return (samples[i:i + size] for i in range(0, len(samples), size))


def words_of(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
def model(digits_export):
    return open_export(digits_export, device="cpu")


def run(stream: StreamTranscriber, samples: np.ndarray):
    """Each update with the seconds of audio fed when it came; the longest buffer seen."""
    updates, longest = [], 0.0
    for n, chunk in enumerate(chunks(samples), 1):
        updates += [(n * CHUNK / RATE, u) for u in stream.feed(chunk)]
        longest = max(longest, stream.buffered)
    updates.append((len(samples) / RATE, stream.finish()))
    return updates, longest


def check_updates(updates) -> None:
    """Confirmed text is appended to, never changed; the deltas add up to the text; the last one is final."""
    text = ""
    for _, update in updates:
        assert update.text == text + update.confirmed
        assert update.confirmed == "".join(w.text for w in update.words)
        text = update.text
    assert updates[-1][1].final and updates[-1][1].tentative == ""
    assert not any(u.final for _, u in updates[:-1])


@needs_espeak
@pytest.mark.parametrize("first, count", [(0, 1), (1, 2), (60, 1), (61, 2), (3, 2)])
def test_one_window_equals_offline_transcribe(model, first, count):
    """English and German (held-out rows 60 on), language detected: the stream's final text is offline
    transcribe's, with timestamps and without."""
    samples = recording(heldout(first, count), pause=0.4)
    assert len(samples) <= 4 * RATE
    updates, _ = run(StreamTranscriber(model, options=NO_PROMPT), samples)
    check_updates(updates)
    final = updates[-1][1]
    assert words_of(final.text) == words_of(model.transcribe(samples)["text"])
    assert words_of(final.text) == words_of(model.transcribe(samples, timestamps=True)["text"])
    assert final.language == model.transcribe(samples)["language"]


@pytest.fixture(scope="module")
def long_recording():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    spoken = heldout(0, 8)
    return recording(spoken), " ".join(s.text() for s in spoken)


def test_several_windows_give_what_was_said(model, long_recording):
    """17 s of speech (8 utterances, four windows and more): the final text is what was said, text is confirmed
    while the audio comes (the first words within 3 s), and the buffer stays under one window."""
    samples, said = long_recording
    updates, longest = run(StreamTranscriber(model, options=NO_PROMPT), samples)
    check_updates(updates)
    assert words_of(updates[-1][1].text) == words_of(said)
    seconds = len(samples) / RATE
    confirmed_at = [at for at, u in updates if u.confirmed and not u.final]
    assert confirmed_at and confirmed_at[0] <= 3.0 and len(confirmed_at) >= 6
    assert len(" ".join(u.confirmed for at, u in updates if at < seconds - 1).split()) >= len(said.split()) - 6
    assert longest <= 4.0  # the model's window


def test_stream_transcribe_is_the_transcriber(model, long_recording):
    samples, _ = long_recording
    stream = StreamTranscriber(model, options=NO_PROMPT)
    expected = [u for chunk in chunks(samples) for u in stream.feed(chunk)] + [stream.finish()]
    assert list(model.stream_transcribe(chunks(samples), options=NO_PROMPT)) == expected


@dataclasses.dataclass
class Recorded:
    """A model whose transcribe records each call's prompt and length (and decodes without the prompt), with
    its manifest's graphs as given (alignment.onnx left out: segment times)."""

    model: object
    manifest: object
    calls: list = dataclasses.field(default_factory=list)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def transcribe(self, samples, prompt=None, **options):
        self.calls.append((prompt, len(samples) / RATE))
        return self.model.transcribe(samples, **options)


def test_the_prompt_is_the_confirmed_text_trimmed_off(model, long_recording):
    samples, said = long_recording
    spy = Recorded(model, model.manifest)
    updates, _ = run(StreamTranscriber(spy, prompt="digits", options=StreamOptions(prompt_chars=30)), samples)
    assert words_of(updates[-1][1].text) == words_of(said)
    prompts = [p for p, _ in spy.calls]
    assert prompts[0] == "digits" and len(set(prompts)) > 3
    for prompt in prompts[1:]:
        assert prompt.startswith("digits")
        tail = prompt[len("digits"):].strip()
        assert len(tail) <= 30 and tail in " ".join(said.split())  # confirmed text, its last 30 characters


def test_without_alignment_segment_times_serve(model, long_recording):
    samples, said = long_recording
    graphs = {k: v for k, v in model.manifest.graphs.items() if k != "alignment"}
    spy = Recorded(model, dataclasses.replace(model.manifest, graphs=graphs))
    stream = StreamTranscriber(spy, options=NO_PROMPT)
    assert not stream.timed
    updates, longest = run(stream, samples)
    check_updates(updates)
    assert words_of(updates[-1][1].text) == words_of(said) and longest <= 4.0
    assert all("word_timestamps" not in str(c) for c in spy.calls)


def test_silence_keeps_the_buffer_short(model):
    """Nothing said for 12 s: no text, and the buffer never holds more than a window."""
    samples = (0.003 * np.random.default_rng(0).standard_normal(12 * RATE)).astype(np.float32)
    updates, longest = run(StreamTranscriber(model, language="en", options=NO_PROMPT), samples)
    assert updates[-1][1].text.strip() == "" and longest <= 4.0


def W(*texts: str, start: float = 0.0) -> list[Word]:
    return [Word(start + i * 0.5, start + i * 0.5 + 0.4, " " + t) for i, t in enumerate(texts)]


def test_local_agreement_confirms_the_common_prefix():
    agreement = Agreement()
    assert agreement.agree(W("one", "two")) == []  # a first hypothesis confirms nothing
    assert [w.key for w in agreement.agree(W("one", "two", "three"))] == ["one", "two"]
    assert [w.key for w in agreement.pending] == ["three"]
    # the next hypothesis repeats the confirmed words first: found by their text, not confirmed again
    assert [w.key for w in agreement.agree(W("one", "two", "tree", "four"))] == []
    assert [w.key for w in agreement.agree(W("one", "two", "tree", "four"))] == ["tree", "four"]
    # a hypothesis that changed a confirmed word: what comes after the last confirmed word's time counts
    agreement.agree(W("one", "too", "tree", "four", "five"))
    assert [w.key for w in agreement.pending] == ["five"]
    assert [w.key for w in agreement.confirmed] == ["one", "two", "tree", "four"]


def test_repeated_words_at_the_seam_are_dropped():
    """A hypothesis that begins with the tail of the last confirmed word (the buffer was cut into it) says that
    word again: dropped, as whisper_streaming drops it."""
    agreement = Agreement()
    agreement.confirm(W("seven", "three"), [])  # the last one ends at 0.9 s
    agreement.agree(W("three", "nine", start=0.85))
    assert [w.key for w in agreement.pending] == ["nine"]


def test_bad_samples_are_refused(model):
    stream = StreamTranscriber(model)
    with pytest.raises(InputError, match="1-D float"):
        stream.feed(np.zeros(CHUNK, np.int16))
    with pytest.raises(InputError, match="1-D float"):
        stream.feed(np.zeros((2, CHUNK), np.float32))
    with pytest.raises(InputError, match="above 0"):
        StreamOptions(step_seconds=0)
