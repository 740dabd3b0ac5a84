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
from tfm_export.runtime.speech import silero as vad_model, vad
from tfm_export.runtime.speech.silero import RATE
from tfm_export.runtime.speech.vad import Span, SpeechMap, VadParameters, collect_chunks
from tools import vad_batched

FOLDER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
SOURCE = vad_batched.SOURCE  # silero's op15 file, which silero's OnnxWrapper runs window by window
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
        model = utils.OnnxWrapper(str(SOURCE), force_onnx_cpu=True)
    return torch, utils, model


@pytest.mark.parametrize("call_windows", [vad_model.CALL_WINDOWS, 7])
def test_probabilities_equal_silero_onnx_wrapper(silero, busy, call_windows, monkeypatch):
    """Our batched graph, many windows a call (or 7: the state carried from call to call too), against silero
    running its op15 file one window at a time: the same float32 probabilities (to float32 rounding: our
    front end's Convs sum in another order, tools/vad_batched.py)."""
    torch, _, model = silero
    monkeypatch.setattr(vad_model, "CALL_WINDOWS", call_windows)
    samples = busy[0][:RATE * 5 + 123]  # a last window that is padded
    theirs = model.audio_forward(torch.from_numpy(samples), RATE).numpy()[0]
    ours = vad_model.speech_probabilities(samples)
    assert ours.shape == theirs.shape == (math.ceil(len(samples) / vad_model.WINDOW),)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert ours.max() > 0.9 and ours[:5].max() < 0.5  # speech found, the leading noise not


def test_window_probabilities_carry_context_and_state(busy):
    """A stream given in pieces (serve.turns' way) has the probabilities of the whole recording at once."""
    samples = busy[0][:vad_model.WINDOW * 300]
    whole = vad_model.speech_probabilities(samples)
    windows = samples.reshape(-1, vad_model.WINDOW)
    context, state, pieces = np.zeros(vad_model.CONTEXT, np.float32), np.zeros(vad_model.STATE, np.float32), []
    for start, stop in ((0, 1), (1, 120), (120, 300)):
        probs, state = vad_model.window_probabilities(windows[start:stop], context, state)
        context = windows[stop - 1, -vad_model.CONTEXT:]
        pieces.append(probs)
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=1e-5, atol=1e-6)
    assert whole.max() > 0.9


def test_batched_graph_is_what_the_tool_writes():
    """models/silero-vad's batched file is tools/vad_batched.py's rewrite of the op15 file, byte for byte."""
    assert (bundled("silero-vad") / vad_model.MODEL_FILE).read_bytes() == vad_batched.batched_model().SerializeToString()


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


# ---- transcribing only the speech: the bundled whisper-digits model ---------------------------------------

@pytest.fixture(scope="module")
def digits(digits_export):
    from tfm_export.runtime import open_export

    return open_export(digits_export, device="cpu")


def inside_the_pause(seconds: float, spoken) -> bool:
    """A time well inside the 12 s pause: over 1 s from both utterances (the padding, 0.4 s, and the VAD's
    lag: it hears speech end a few 32 ms windows late)."""
    return spoken[0][1] + 1.0 < seconds < spoken[1][0] - 1.0


@pytest.mark.parametrize("timestamps", [False, True])
def test_the_pause_case_is_transcribed_right(digits, pause_case, timestamps):
    samples, spoken = pause_case
    words = f"{FIRST[0]} {SECOND[0]}".split()
    result = digits.transcribe(samples, vad=True, timestamps=timestamps, word_timestamps=True)
    assert result["text"].split() == words and result["language"] == "en"
    assert [s["text"].strip() for s in result["segments"]] == [FIRST[0], SECOND[0]]
    spans = vad.speech_timestamps(samples)
    for segment in result["segments"]:
        for at in (segment["start"], segment["end"]):
            assert not inside_the_pause(at, spoken), segment
            assert any(s.start / RATE - 1e-3 <= at <= s.end / RATE + 1e-3 for s in spans), segment
    assert [w["word"].strip() for w in result["words"]] == words
    assert all(not inside_the_pause(w["start"], spoken) and not inside_the_pause(w["end"], spoken)
               for w in result["words"])
    assert result["segments"][1]["seek"] >= int(spoken[0][1] * 100)  # its window's place in the recording


def test_vad_transcribes_each_chunk_as_a_recording(digits, busy):
    """The ids are those of each chunk transcribed on its own (the chunk layer adds no decoding of its own),
    the first chunk's language given to the others; the times are the chunks' shifted back."""
    samples, _ = busy
    parameters = VadParameters(min_silence_duration_ms=300, speech_pad_ms=100)
    result = digits.transcribe(samples, vad=True, vad_parameters=parameters, timestamps=True)
    spans = vad.speech_timestamps(samples, parameters)
    chunks = collect_chunks(samples, spans, digits.manifest.features["chunk_length"])
    assert len(chunks) >= 2
    each = [digits.transcribe(c.samples, timestamps=True, language=None if n == 0 else "en")
            for n, c in enumerate(chunks)]
    assert result["ids"] == [t for r in each for t in r["ids"]]
    timeline = SpeechMap(spans)
    want = [timeline.to_recording(c.offset + min(s["start"], c.seconds)) for c, r in zip(chunks, each)
            for s in r["segments"]]
    assert [s["start"] for s in result["segments"]] == want


def test_no_speech_no_text(digits):
    result = digits.transcribe(noise(6.0, np.random.default_rng(5)), vad=True)
    assert result == {"text": "", "language": None, "segments": [], "ids": []}


def test_vad_options_are_checked(digits, pause_case):
    with pytest.raises(InputError, match="pass vad=True"):
        digits.transcribe(pause_case[0], vad_parameters={"threshold": 0.4})
    with pytest.raises(InputError, match="unknown vad_parameters: pad"):
        digits.transcribe(pause_case[0], vad=True, vad_parameters={"pad": 3})


def test_cli_vad(digits_export, pause_case, tmp_path):
    import soundfile

    from tfm_export.cli import cli

    wav = tmp_path / "pause.wav"
    soundfile.write(wav, pause_case[0], RATE, subtype="FLOAT")
    run = CliRunner().invoke
    result = run(cli, ["transcribe", str(digits_export), str(wav), "--vad", "--vad-threshold", "0.5",
                       "--vad-min-silence-ms", "1000", "--vad-pad-ms", "300", "--vad-min-speech-ms", "100", "--json",
                       "--timestamps"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    assert got["text"].split() == f"{FIRST[0]} {SECOND[0]}".split() and len(got["segments"]) == 2
    for args, message in ((["--vad-pad-ms", "100"], "Error: --vad-pad-ms sets the VAD; add --vad"),
                          (["--vad", "--vad-threshold", "1.5"], "'--vad-threshold': 1.5 is not in the range 0<x<1"),
                          (["--vad", "--vad-max-speech-s", "0.5"], "--vad-max-speech-s must be over 0.832 s"),
                          (["--vad", "--vad-min-silence-ms", "-1"], "'--vad-min-silence-ms': -1 is not in the range")):
        result = run(cli, ["transcribe", str(digits_export), str(wav), *args])
        assert result.exit_code != 0 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


# ---- the server's chunking_strategy, through OpenAI's client ----------------------------------------------

@pytest.fixture(scope="module")
def served(digits_export, pause_case, tmp_path_factory):
    pytest.importorskip("openai")
    import soundfile
    from helpers import server_process

    wav = tmp_path_factory.mktemp("served") / "pause.wav"
    soundfile.write(wav, pause_case[0], RATE, subtype="PCM_16")
    with server_process("serve", digits_export, "--max-audio-seconds", 60) as proc:
        yield proc.url, wav


def test_server_chunking_strategy(served, digits):
    import openai
    import soundfile

    url, wav = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    samples = soundfile.read(wav, dtype="float32")[0]
    cases = {"auto": VadParameters(), **{json.dumps(c): VadParameters(threshold=c.get("threshold", 0.5),
                                                                     speech_pad_ms=c.get("prefix_padding_ms", 300),
                                                                     min_silence_duration_ms=c.get(
                                                                         "silence_duration_ms", 200))
                                         for c in ({"type": "server_vad"},
                                                   {"type": "server_vad", "threshold": 0.4, "prefix_padding_ms": 200,
                                                    "silence_duration_ms": 800})}}
    from tfm_export.runtime.speech.fallback import openai_fallback
    from tfm_export.runtime.speech.whisper import speech_settings

    default = openai_fallback(speech_settings(digits)[0])  # a form without temperature: 0, OpenAI's default
    for strategy, parameters in cases.items():
        given = strategy if strategy == "auto" else json.loads(strategy)  # the client sends chunking_strategy[...]
        with open(wav, "rb") as audio:
            got = client.audio.transcriptions.create(file=audio, model="whisper-1", response_format="verbose_json",
                                                     chunking_strategy=given)
        want = digits.transcribe(samples, vad=True, vad_parameters=parameters, timestamps=True, **default)
        assert got.text == want["text"] and got.text.split() == f"{FIRST[0]} {SECOND[0]}".split(), strategy
        assert [(s.start, s.end) for s in got.segments] == [(s["start"], s["end"]) for s in want["segments"]]
    with open(wav, "rb") as audio:  # without it: the whole recording, as transcribe without vad
        assert client.audio.transcriptions.create(file=audio, model="whisper-1").text == digits.transcribe(
            samples, **default)["text"]


def test_server_vad_sampling_equals_transcribe(served, digits):
    """chunking_strategy with temperature 0.5 and the form's seed (this server's field): the segments' tokens
    are transcribe(vad=True)'s sampled at 0.5 from that seed, though the server decodes the chunks together."""
    import openai
    import soundfile
    from tfm_export.runtime.speech.fallback import openai_fallback
    from tfm_export.runtime.speech.whisper import speech_settings

    url, wav = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    samples = soundfile.read(wav, dtype="float32")[0]
    sampled = openai_fallback(speech_settings(digits)[0], 0.5)
    with open(wav, "rb") as audio:
        got = client.audio.transcriptions.create(file=audio, model="whisper-1", response_format="verbose_json",
                                                 chunking_strategy="auto", temperature=0.5, extra_body={"seed": 3})
    want = digits.transcribe(samples, vad=True, timestamps=True, seed=3, **sampled)
    assert got.text == want["text"] and got.text.split() == f"{FIRST[0]} {SECOND[0]}".split()
    assert [(s.start, s.end, s.tokens, s.temperature) for s in got.segments] == \
        [(s["start"], s["end"], s["tokens"], s["temperature"]) for s in want["segments"]]
    assert {s.temperature for s in got.segments} == {0.5}


@pytest.mark.parametrize("fields, message", [
    ({"chunking_strategy": "manual"}, "chunking_strategy: Input should be 'auto'"),
    ({"chunking_strategy": '{"type": "server_vad", "threshold": 2}'}, "chunking_strategy[threshold]: Input should "
                                                                      "be less than 1"),
    ({"chunking_strategy[type]": "server_vad", "chunking_strategy[window]": "3"},
     "chunking_strategy[window]: Extra inputs are not permitted"),
    ({"chunking_strategy": "{not json"}, "chunking_strategy: Value error, not a JSON object"),
    ({"chunking": "auto"}, "unknown field(s): chunking; this route accepts"),
])
def test_bad_chunking_strategy_is_a_422(served, fields, message):
    import httpx

    url, wav = served
    answer = httpx.post(f"{url}/v1/audio/transcriptions", data={"model": "whisper-1", **fields},
                        files={"file": ("pause.wav", wav.read_bytes(), "audio/wav")}, timeout=60)
    assert answer.status_code == 422 and message in answer.json()["error"], answer.text
