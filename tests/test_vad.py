"""Voice activity detection (runtime.speech.vad) and transcribing only the speech (runtime.speech.chunks,
`transcribe --vad`, the server's chunking_strategy), issue #60.

The recordings are made here: espeak-ng speaking digit strings (models/whisper-digits/speech.py's way of
speaking, not its training set) with inserted pauses of low noise. The VAD's probabilities and speech spans
are compared with silero-vad's own (its get_speech_timestamps over its OnnxWrapper, torch) on the same
ONNX file, for several parameter settings; the transcriptions use the bundled whisper-digits model, whose
text on the 12 s pause case without VAD is wrong (a word invented, the second utterance lost).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tfm_export.errors import InputError
from tfm_export.resources import bundled
from tfm_export.runtime.speech import vad
from tfm_export.runtime.speech.vad import RATE, Span, SpeechMap, VadParameters, collect_chunks

FOLDER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
MODEL = bundled("silero-vad") / vad.MODEL_FILE
pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]
# The case: two digit strings, 12 s of low noise between them
FIRST, SECOND = ("seven three nine", "en", 160, 50), ("four two eight", "en-us+f3", 150, 40)
PAUSE = 12.0
NOISE = 0.003  # the pauses' noise: standard deviation, in full scale


def noise(seconds: float, rng: np.random.Generator) -> np.ndarray:
    return (NOISE * rng.standard_normal(int(seconds * RATE))).astype(np.float32)


def speak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    sys.path.insert(0, str(FOLDER))
    from speech import utterance

    return utterance(text, voice, speed, pitch)


def recording(parts: list, seed: int = 0) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Utterances (speak's arguments) and pauses (seconds of noise) in order -> (samples, each utterance's
    (start, end) in seconds)."""
    rng = np.random.default_rng(seed)
    pieces, spoken, at = [], [], 0
    for part in parts:
        piece = noise(part, rng) if isinstance(part, float) else speak(*part)
        if not isinstance(part, float):
            spoken.append((at / RATE, (at + len(piece)) / RATE))
        pieces.append(piece)
        at += len(piece)
    return np.concatenate(pieces).astype(np.float32), spoken


@pytest.fixture(scope="module")
def pause_case():
    """The issue's recording: 1 s of noise, "seven three nine", 12 s of noise, "four two eight", 1 s."""
    return recording([1.0, FIRST, PAUSE, SECOND, 1.0])


@pytest.fixture(scope="module")
def busy():
    """Four utterances, short pauses and a long one: spans that merge, split and hit a maximum length."""
    return recording([0.5, ("one two three", "en+m3", 170, 45), 0.25, ("five six", "en-gb-x-rp", 140, 60), 0.6,
                      ("zwei drei vier", "de", 165, 55), 12.0, ("eight nine", "en-gb-scotland+f1", 185, 30), 0.8],
                     seed=1)


# ---- the VAD against silero-vad's own -----------------------------------------------------------------

silero_settings = [  # get_speech_timestamps' keyword arguments; VadParameters' fields are the same names
    {},  # VadParameters' (faster-whisper's) defaults
    dict(threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30),  # silero's
    dict(threshold=0.3, neg_threshold=0.2, min_speech_duration_ms=100, min_silence_duration_ms=500, speech_pad_ms=100),
    dict(threshold=0.8, min_silence_duration_ms=300, speech_pad_ms=0),
    dict(min_silence_duration_ms=300, speech_pad_ms=50, max_speech_duration_s=1.0),  # cut at the longest pause
    dict(min_silence_duration_ms=300, speech_pad_ms=50, max_speech_duration_s=1.0,
         use_max_poss_sil_at_max_speech=False),  # cut at the last pause
    dict(min_silence_duration_ms=2000, speech_pad_ms=30, max_speech_duration_s=0.7, min_silence_at_max_speech=50),
]


@pytest.fixture(scope="module")
def silero():
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("silero_vad.utils_vad")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "This model support only 16000 sampling rate!": it is all we give it
        model = utils.OnnxWrapper(str(MODEL), force_onnx_cpu=True)
    return torch, utils, model


def test_probabilities_equal_silero_onnx_wrapper(silero, busy):
    torch, _, model = silero
    samples = busy[0][:RATE * 5 + 123]  # a last window that is padded
    theirs = model.audio_forward(torch.from_numpy(samples), RATE).numpy()[0]
    ours = vad.speech_probabilities(samples)
    assert ours.shape == theirs.shape == (math.ceil(len(samples) / vad.WINDOW),)
    assert np.array_equal(ours, theirs)
    assert ours.max() > 0.9 and ours[:5].max() < 0.5  # speech found, the leading noise not


@pytest.mark.parametrize("settings", silero_settings, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("case", ["busy", "pause_case"])
def test_speech_timestamps_equal_silero(silero, settings, case, request):
    torch, utils, model = silero
    samples = request.getfixturevalue(case)[0]
    parameters = VadParameters(**settings)
    theirs = utils.get_speech_timestamps(torch.from_numpy(samples), model, sampling_rate=RATE, **{
        "min_speech_duration_ms": parameters.min_speech_duration_ms,
        "min_silence_duration_ms": parameters.min_silence_duration_ms, "speech_pad_ms": parameters.speech_pad_ms,
        **settings})
    ours = vad.speech_timestamps(samples, parameters)
    assert [tuple(s) for s in ours] == [(s["start"], s["end"]) for s in theirs]
    assert ours, "no speech found"
    if "max_speech_duration_s" in settings:  # spans were cut, and the maximum holds
        assert len(ours) > len(vad.speech_timestamps(samples, VadParameters(**{
            **settings, "max_speech_duration_s": math.inf})))
        assert all(s.end - s.start <= settings["max_speech_duration_s"] * RATE for s in ours)


def test_the_pause_splits_the_speech_in_two(pause_case):
    samples, spoken = pause_case
    spans = vad.speech_timestamps(samples)
    assert len(spans) == 2
    pad = VadParameters().speech_pad_ms / 1000
    for span, (start, end) in zip(spans, spoken):  # each utterance inside its span, the span little more
        assert start - pad - 0.1 <= span.start / RATE <= start + 0.05 and span.end / RATE >= end - 0.05
    # the first span ends in the pause; the last runs to the end (1 s of noise is under min_silence_duration_ms)
    assert spans[0].end / RATE <= spoken[0][1] + pad + 0.2 and spans[1].end == len(samples)


def test_silence_alone_has_no_speech():
    rng = np.random.default_rng(3)
    assert vad.speech_timestamps(noise(5.0, rng)) == []
    assert vad.speech_timestamps(np.zeros(0, np.float32)) == []
    assert collect_chunks(noise(5.0, rng), []) == []


# ---- chunks and the time map ----------------------------------------------------------------------------

def test_chunks_merge_spans_up_to_the_window_and_map_back():
    samples = np.arange(20 * RATE, dtype=np.float32)  # each sample its own index: where audio came from shows
    spans = [Span(RATE, 2 * RATE), Span(3 * RATE, 5 * RATE), Span(9 * RATE, 10 * RATE), Span(11 * RATE, 19 * RATE)]
    chunks = collect_chunks(samples, spans, max_seconds=4.0)
    # 1 s + 2 s fit in 4 s, + 1 s more too; the 8 s span is a chunk of its own (no empty chunk before it)
    assert [c.spans for c in chunks] == [tuple(spans[:3]), (spans[3],)]
    assert [c.offset for c in chunks] == [0.0, 4.0]
    assert np.array_equal(chunks[0].samples, np.concatenate([samples[s.start:s.end] for s in spans[:3]]))
    timeline = SpeechMap(spans)
    for chunk in chunks:
        at = 0
        for span in chunk.spans:  # a span's first and last sample, in the chunk, map to the recording's
            assert timeline.to_recording(chunk.offset + at / RATE) == span.start / RATE
            at += span.end - span.start
            assert timeline.to_recording(chunk.offset + at / RATE, is_end=True) == span.end / RATE
            assert chunk.samples[at - 1] == span.end - 1
    assert timeline.to_recording(3.5) == 9.5  # inside the third span
    assert timeline.to_recording(100.0) == 100.0 + 7.0  # past the end: the 7 s of pauses before the last span


def test_vad_parameters_are_checked():
    assert VadParameters.of(None) == VadParameters() and VadParameters.of({"threshold": 0.4}).threshold == 0.4
    for bad in ({"threshold": 1.0}, {"threshold": 0.5, "neg_threshold": 0.6}, {"speech_pad_ms": -1},
                {"max_speech_duration_s": 0.5}, {"min_silence_duration_ms": -5}):
        with pytest.raises(InputError, match="VAD "):
            VadParameters(**bad)
    with pytest.raises(InputError, match="unknown vad_parameters: window; they are"):
        VadParameters.of({"window": 3})
    with pytest.raises(InputError, match="must be a VadParameters or a dict"):
        VadParameters.of(0.5)
