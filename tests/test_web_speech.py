"""The browser page transcribes a Whisper export like the Python runtime (issue #43).

runtimes/web/test/speech.test.mjs drives headless Chromium on `tfm-export serve-web` of the trained
fixture (models/whisper-digits: conftest's digits_export, shared with test_web_live and the Node tests).
Held-out utterances are spoken by espeak-ng (models/whisper-digits/speech.py) and written as 16 kHz WAV
files. A file chosen with the page's file input (language detected), one dropped on it (German given,
beam search, timestamps) and a dropped 16 kHz FLAC file (decoded by the browser, losslessly; with an
initial prompt) must give `open_export(out).transcribe(samples, ...)`'s ids, text, language and segments,
and offer Python's subtitles (`to_srt`) for download: the page runs Node's speech.mjs, whose WAV reading
and features are Node's.

The microphone is Chromium's fake capture device playing a WAV file (the utterance between 0.4 s of
silence) once (%noloop), recorded for the file's length. Its samples pass Chromium's capture and two
resamplings (to the device's rate and back to 16 kHz), so the ids may differ in a token's probability
but not the words: the test asks for Python's text of the file, on an utterance Python transcribes
right, rather than its ids. Recording the file's length gets the utterance: the file starts when the
device opens, and the start-up latency only shifts the recording into the silence after the file.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("soxr")
pytest.importorskip("transformers")

from helpers import DIGITS as FOLDER  # noqa: E402
from helpers import spoken_marks  # noqa: E402
from test_node_speech import EXACT, MEASURES  # noqa: E402
from test_runtimes import RUNTIMES, run_node_tests  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.subtitles import to_srt  # noqa: E402

sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = spoken_marks(browser=True)

PAD = 0.4  # seconds of silence around the microphone's utterance
# (how the page gets the file, its format, Node's options as the form sets them, Python's). WAV goes
# through Node's audio.mjs; FLAC through the browser's decodeAudioData (lossless, at 16 kHz: no resampling)
FILES = [("input", "wav", {}, {}),
         ("drop", "wav", {"language": "de", "numBeams": 2, "timestamps": True},
          {"language": "de", "num_beams": 2, "timestamps": True}),
         ("drop", "flac", {"language": "en", "prompt": "drei sieben"}, {"language": "en", "prompt": "drei sieben"}),
         # two utterances 12 s apart in low noise (issue #60's recording): "skip silence" on the page, vad=True here
         ("drop", "wav", {"language": "en", "timestamps": True, "vad": True},
          {"language": "en", "timestamps": True, "vad": True}),
         # over 30 s of utterances (two VAD chunks), batched ("batch" 4 on the page, batch_size=4 here), the
         # language detected
         ("drop", "wav", {"timestamps": True, "vad": True, "batchSize": 4},
          {"timestamps": True, "vad": True, "batch_size": 4}),
         # the decoding row (issue #60): a seeded temperature fallback forced on every window (no average
         # log-probability is above 0), sampled windows included; hotwords and a prefix
         ("drop", "wav", {"language": "en", "timestamps": True, "temperature": [0, 0.2, 0.4, 0.6, 0.8, 1],
                          "logprobThreshold": 0, "seed": 5},
          {"language": "en", "timestamps": True, "temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
           "logprob_threshold": 0.0, "seed": 5}),
         ("drop", "wav", {"language": "en", "timestamps": True, "hotwords": "neun acht", "prefix": "one two"},
          {"language": "en", "timestamps": True, "hotwords": "neun acht", "prefix": "one two"})]
PAUSE = 12.0  # seconds between the VAD file's utterances


def held_out(language: str) -> list[Spoken]:
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    return [s for s in map(Spoken.from_row, rows) if s.language == language]


def write(path: Path, samples: np.ndarray) -> np.ndarray:
    """`samples` as a 16 kHz 16-bit WAV file; returns what the file holds (as soundfile reads it)."""
    soundfile.write(str(path), samples, RATE)
    return soundfile.read(str(path), dtype="float32")[0]


def microphone_file(runtime, folder: Path) -> dict:
    """The fake microphone's file: the first short English utterance Python transcribes right, padded."""
    silence = np.zeros(int(PAD * RATE), np.float32)
    for spoken in held_out("en")[3:]:
        samples = spoken.samples()
        if len(samples) > 2.5 * RATE:  # the recording must stay inside one 4 s window
            continue
        path = folder / "mic.wav"
        samples = write(path, np.concatenate([silence, samples, silence]))
        text = runtime.transcribe(samples, language="en")["text"]
        if text.strip() == spoken.text():
            return {"path": str(path), "seconds": len(samples) / RATE, "text": text, "language": "en"}
    raise AssertionError("no short held-out utterance that Python transcribes right")


def paused(utterances: list[Spoken]) -> np.ndarray:
    """The utterances PAUSE seconds apart, in noise 40 dB under speech (a room, not digital silence)."""
    noise = np.random.default_rng(0).normal(0, 0.003, int(PAUSE * RATE)).astype(np.float32)
    first, second = (u.samples() for u in utterances)
    return np.concatenate([noise[:RATE // 2], first, noise, second, noise[:RATE // 2]])


def many(utterances: list[Spoken]) -> np.ndarray:
    """The utterances 3 s apart in noise (more than the VAD's 2 s of silence that ends speech), until there is
    more than a window (30 s) of speech: the VAD's chunks join speech up to a window (the pauses left out), so
    these are two chunks, to batch."""
    noise = np.random.default_rng(1).normal(0, 0.003, 3 * RATE).astype(np.float32)
    parts, speech = [noise[:RATE // 2]], 0
    for spoken in utterances * 4:
        samples = spoken.samples()
        parts += [samples, noise]
        speech += len(samples)
        if speech > 31 * RATE:
            return np.concatenate(parts)
    raise AssertionError("not 30 s of held-out speech")


def for_the_page(result: dict) -> dict:
    """Python's `transcribe` result as the page's test compares it: segments with the EXACT fields (equal), and
    each segment's MEASURES apart (within 1e-4: the browser's float32 logits are summed in another order)."""
    return {**result, "segments": [{k: s[k] for k in EXACT} for s in result["segments"]],
            "measures": [{k: s[k] for k in MEASURES} for s in result["segments"]], "srt": to_srt(result["segments"])}


def chunks_of(runtime, path: str) -> list:
    """The VAD's chunks of a recording (the default parameters, as the page's)."""
    from tfm_export.runtime.speech.chunks import speech_chunks
    from tfm_export.runtime.speech.transcribe import _whisper_plan

    return speech_chunks(soundfile.read(path, dtype="float32")[0], _whisper_plan(runtime)).chunks


def test_the_page_transcribes_like_python(digits_export, tmp_path):
    runtime = open_export(digits_export, device="cpu")
    files = []
    english = held_out("en")
    several = np.concatenate([part for s in english[2:6] for part in (s.samples(), np.zeros(RATE // 2, np.float32))])
    recordings = [english[0].samples(), held_out("de")[0].samples(), english[1].samples(), paused(english[:2]),
                  many(english), several, several]
    for n, ((how, kind, mine, theirs), samples) in enumerate(zip(FILES, recordings)):
        path = tmp_path / f"{n}-{how}.{kind}"
        want = for_the_page(runtime.transcribe(write(path, samples), **theirs))
        files.append({"path": str(path), "how": how, "options": mine, "expected": want})
    assert len(files[1]["expected"]["segments"]) >= 1 and files[1]["expected"]["language"] == "de"
    first, second = (runtime.transcribe(s.samples(), language="en")["text"].split() for s in english[:2])
    assert files[3]["expected"]["text"].split() == first + second  # both utterances, nothing made up in the pause
    assert len(chunks_of(runtime, files[4]["path"])) >= 2  # the batch has chunks to decode together
    assert files[4]["expected"]["ids"] == runtime.transcribe(files[4]["path"], timestamps=True, vad=True)["ids"]
    plain = runtime.transcribe(files[5]["path"], language="en", timestamps=True)["ids"]
    assert all(files[n]["expected"]["ids"] != plain for n in (5, 6))  # the decoding row's options change the text
    assert any(s["temperature"] > 0 for s in files[5]["expected"]["segments"])  # sampled windows compared
    expected = {"export": str(digits_export), "files": files, "mic": microphone_file(runtime, tmp_path)}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    out = run_node_tests(RUNTIMES / "web", None, files=("test/speech.test.mjs",),
                         env={"TFM_SPEECH_EXPECTED": str(tmp_path / "expected.json")})
    for name in ("a WAV file chosen or dropped is transcribed exactly", "the microphone is recorded",
                 "a file that is not audio is one error line", "a bad decoding value is one error line"):
        assert re.search(rf"^ok \d+ - {name}", out, re.M), out[-2000:]
