"""The browser page's live text from the microphone (issue #61): runtimes/web/test/live.test.mjs in headless Chromium.

The page (runtimes/web/live-text.mjs) feeds the microphone's chunks, resampled to 16 kHz as they come
(audio-in.mjs's StreamResampler), to /lib/speech/streaming.mjs's StreamTranscriber, Node's port of Python's
LocalAgreement-2 (tests/test_node_streaming.py: the same confirmed text, chunk for chunk). Chromium's fake
microphone plays a WAV file of three held-out English utterances (over one of the trained fixture's 4 s
windows, so the buffer is trimmed while it records) once; the page records it for the file's length.
Text is confirmed before Stop, and at the end the live text is the offline transcription of the same file:
Python's `transcribe` of it, which the test picks to be what was said (offline long form errs where a window
cuts an utterance: test_whisper_trained's LONG_FORM_WER), and the page's own transcript of the recording.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("transformers")

from helpers import DIGITS as FOLDER  # noqa: E402
from helpers import spoken_marks  # noqa: E402
from test_runtimes import RUNTIMES, run_node_tests  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.streaming import StreamOptions, StreamTranscriber  # noqa: E402

sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = spoken_marks(browser=True)
PAUSE = 0.6  # seconds between the utterances
# Seconds of silence before the first: the device plays the file once (%noloop) from when it opens, and
# the recording starts when the worklet hears it, which may be late on a loaded machine.
LEAD = 0.25
TAIL = 1.2  # seconds of silence after the last


def words(text: str) -> list[str]:
    return text.split()


def live_file(runtime, folder: Path) -> dict:
    """Three consecutive English held-out utterances that Python transcribes right, offline and live."""
    english = [s for s in map(Spoken.from_row, (FOLDER / "heldout.tsv").read_text().splitlines()) if s.language == "en"]
    for first in range(0, len(english) - 2):
        spoken = english[first:first + 3]
        gap = np.zeros(int(PAUSE * RATE), np.float32)
        samples = np.concatenate([np.zeros(int(LEAD * RATE), np.float32), spoken[0].samples(), gap,
                                  spoken[1].samples(), gap, spoken[2].samples(), np.zeros(int(TAIL * RATE), np.float32)])
        if not 6 * RATE < len(samples) < 9 * RATE:
            continue
        path = folder / "live.wav"
        soundfile.write(str(path), samples, RATE)
        samples = soundfile.read(str(path), dtype="float32")[0]
        said = words(" ".join(s.text() for s in spoken))
        offline = runtime.transcribe(samples, language="en")["text"]
        stream = StreamTranscriber(runtime, language="en", options=StreamOptions(prompt_chars=0))
        for at in range(0, len(samples), RATE // 10):
            stream.feed(samples[at:at + RATE // 10])
        if words(offline) == said and words(stream.finish().text) == said:
            return {"path": str(path), "seconds": len(samples) / RATE, "text": offline, "language": "en"}
    raise AssertionError("no three held-out utterances that Python transcribes right")


def test_the_page_shows_live_text_from_the_microphone(digits_export, tmp_path):
    runtime = open_export(digits_export, device="cpu")
    expected = {"export": str(digits_export), "mic": live_file(runtime, tmp_path)}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    out = run_node_tests(RUNTIMES / "web", None, files=("test/live.test.mjs",),
                         env={"TFM_LIVE_EXPECTED": str(tmp_path / "expected.json")})
    assert re.search(r"^ok \d+ - the microphone's live text is confirmed while it records", out, re.M), out[-2000:]
