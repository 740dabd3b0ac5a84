"""Batched long form (issue #60): the VAD chunks of a recording, and several recordings, decoded together
(runtime.speech.batch, runtime.speech.batch_rounds) give the answers of decoding them one after the other.

The recordings are espeak-ng speech with pauses of low noise (tests/test_vad.py's recording), transcribed by
the bundled whisper-digits export (multilingual: en and de, so the first chunk's language is detected).
A short ChunkPlan window (a few seconds, where Whisper's is 30 s) makes many chunks of a short recording.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from tfm_export.errors import InputError
from tfm_export.runtime.speech import batch_rounds, chunks, whisper
from tfm_export.runtime.speech.batch import transcribe_batch
from tfm_export.runtime.speech.silero import RATE
from tfm_export.runtime.speech.vad import VadParameters

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]

SPLIT = VadParameters(min_silence_duration_ms=300, speech_pad_ms=100)  # every pause ends a span
UTTERANCES = [("one two three", "en+m3", 170, 45), ("five six", "en-gb-x-rp", 140, 60),
              ("seven three nine", "en", 160, 50), ("eight nine", "en-gb-scotland+f1", 185, 30),
              ("four two eight", "en-us+f3", 150, 40), ("zwei drei", "de", 165, 55)]


@pytest.fixture(scope="module")
def digits(digits_export):
    from tfm_export.runtime import open_export

    return open_export(digits_export, device="cpu")


@pytest.fixture(scope="module")
def talk():
    """Six utterances with pauses of 0.6 to 3 s between them."""
    from test_vad import recording

    pauses = [0.5, 0.8, 3.0, 0.6, 1.5, 0.9, 0.7]
    parts = [pauses[0]]
    for utterance, pause in zip(UTTERANCES, pauses[1:]):
        parts += [utterance, pause]
    return recording(parts, seed=7)[0]


@pytest.fixture()
def rounds(monkeypatch):
    """The windows of every round decoded together (how many per decode_together call)."""
    sizes: list[int] = []
    real = batch_rounds.decode_together

    def counted(cache, windows, strategies):
        sizes.append(len(windows))
        return real(cache, windows, strategies)

    monkeypatch.setattr(batch_rounds, "decode_together", counted)
    return sizes


def plan_of(model, seconds: float) -> chunks.ChunkPlan:
    features = whisper.speech_settings(model)[1]
    return chunks.ChunkPlan(RATE, seconds, features.nb_max_frames / features.chunk_length)


@pytest.mark.parametrize("options", [dict(timestamps=True), dict(timestamps=False),
                                     dict(timestamps=True, num_beams=2), dict(word_timestamps=True)],
                         ids=["timestamps", "text", "beams", "words"])
def test_batched_chunks_equal_chunk_by_chunk(digits, talk, rounds, options):
    plan = plan_of(digits, 1.5)  # a chunk of up to 1.5 s: each utterance one
    one_by_one = chunks.transcribe_speech(digits, talk, whisper.transcribe, plan, SPLIT, **options)
    assert len(one_by_one["segments"]) >= 5 and one_by_one["language"] == "en"
    together = transcribe_batch(digits, [talk], whisper.transcribe, plan, 4, SPLIT, **options)[0]
    assert together == one_by_one  # ids, texts, the recording's times, language, words
    assert rounds == [1, 4, 2]  # the first chunk's language detected, then the six chunks 4 at a time
    assert together["text"].split()[:3] == ["one", "two", "three"]


def test_transcribe_vad_batch_size(digits, talk, rounds):
    """model.transcribe(vad=True, batch_size=N): Whisper's own chunks (up to 30 s), the same answer."""
    from test_vad import recording

    long = np.concatenate([talk, recording([1.0, *UTTERANCES[:4], 0.5], seed=8)[0]] * 3)  # over 30 s of speech
    want = digits.transcribe(long, vad=True, vad_parameters=SPLIT, timestamps=True)
    got = digits.transcribe(long, vad=True, vad_parameters=SPLIT, timestamps=True, batch_size=8)
    assert got == want and max(rounds) >= 2
    assert any(s["start"] > 30.0 for s in got["segments"])


def test_several_recordings_in_one_call(digits, talk, rounds):
    """A list in, a list out: each recording's answer as it alone gets, with and without the VAD."""
    recordings = [talk, talk[: 4 * RATE], talk[2 * RATE:]]
    for vad in (False, True):
        parameters = SPLIT if vad else None
        want = [digits.transcribe(r, vad=vad, vad_parameters=parameters, timestamps=True) for r in recordings]
        rounds.clear()
        got = digits.transcribe(recordings, vad=vad, vad_parameters=parameters, timestamps=True, batch_size=3)
        assert got == want and max(rounds) == 3
    assert digits.transcribe(tuple(recordings[:2])) == [digits.transcribe(r) for r in recordings[:2]]


def test_on_text_gets_the_chunks_done_in_order(digits, talk):
    plan, texts = plan_of(digits, 1.5), []
    result = transcribe_batch(digits, [talk], whisper.transcribe, plan, 3, SPLIT, on_text=texts.append)[0]
    assert texts[-1] == result["text"] and len(texts) >= 2
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:]))


def test_bad_batch_options(digits, talk):
    for bad in (0, -2, 1.5, True):
        with pytest.raises(InputError, match="batch_size must be a whole number of 1 or more"):
            digits.transcribe(talk, vad=True, batch_size=bad)
    with pytest.raises(InputError, match="on_text streams one recording's text"):
        digits.transcribe([talk, talk], on_text=print)


def test_a_failing_recording_stops_the_batch(digits, talk):
    with pytest.raises(InputError, match="audio samples must be floats"):
        digits.transcribe([talk, np.zeros(RATE, np.int16), talk], batch_size=2)


def test_cli_batch_size(digits_export, talk, tmp_path):
    import soundfile

    from tfm_export.cli import cli

    files = []
    for n, samples in enumerate((talk, talk[RATE:])):
        files.append(tmp_path / f"talk{n}.wav")
        soundfile.write(files[-1], samples, RATE, subtype="FLOAT")
    args = ["transcribe", str(digits_export), *map(str, files), "--vad", "--vad-min-silence-ms", "300", "--json",
            "--timestamps"]
    alone = CliRunner().invoke(cli, args)
    together = CliRunner().invoke(cli, [*args, "--batch-size", "4"])
    assert alone.exit_code == 0 and together.exit_code == 0, together.output
    assert together.output == alone.output
    assert [json.loads(line)["file"] for line in together.output.splitlines()] == list(map(str, files))
    bad = CliRunner().invoke(cli, [*args, "--batch-size", "0"])
    assert bad.exit_code != 0 and "'--batch-size': 0 is not in the range x>=1" in bad.output


def test_server_chunks_decode_together(digits_export, digits, talk, tmp_path):
    """chunking_strategy auto: the recording's chunks (over 30 s of speech: several) on the server's in-flight
    windows together, the answer of transcribe(vad=True)."""
    import httpx
    import soundfile
    from helpers import server_process

    samples = np.concatenate([talk] * 4)
    wav = tmp_path / "talk.wav"
    soundfile.write(wav, samples, RATE, subtype="FLOAT")
    samples = soundfile.read(wav, dtype="float32")[0]
    from tfm_export.runtime.speech.fallback import openai_fallback

    # the form leaves temperature out: 0, OpenAI's default, the fallback
    want = digits.transcribe(samples, vad=True, timestamps=True, **openai_fallback(whisper.speech_settings(digits)[0]))
    assert len(chunks.speech_chunks(samples, plan_of(digits, 30.0)).chunks) >= 2
    with server_process("serve", digits_export, "--max-audio-seconds", 120) as proc:
        answer = httpx.post(f"{proc.url}/v1/audio/transcriptions", timeout=120,
                            data={"model": "whisper-1", "response_format": "verbose_json", "chunking_strategy": "auto"},
                            files={"file": ("talk.wav", wav.read_bytes(), "audio/wav")})
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["text"] == want["text"]
    assert [(s["start"], s["end"]) for s in got["segments"]] == [(s["start"], s["end"]) for s in want["segments"]]
