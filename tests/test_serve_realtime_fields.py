"""The settings of a Realtime transcription session (serve.realtime_fields; issue #60): each bad value in a
`session.update` (GA) or `transcription_session.update` (beta) is one OpenAI-style `error` event whose `param`
names the field, and the session keeps its settings and goes on; good values are taken: `session.updated` shows
them and the next item is transcribed with them (its language and this server's hotwords: offline `transcribe`'s
text with the same options).

The parsing alone is tested without a server (a language check of en and de); the live half runs on
test_serve_realtime's server (the trained fixture, models/whisper-digits, held-out espeak-ng speech).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tfm_export.errors import InputError
from tfm_export.runtime.speech.streaming import StreamTranscriber
from tfm_export.serve import realtime_session
from tfm_export.serve.realtime_fields import Refused, beta_update, ga_update

websockets = pytest.importorskip("websockets")
soxr = pytest.importorskip("soxr")
from test_serve_realtime import Client, direct, heldout, pcm, server, words  # noqa: E402,F401

INPUT = "session.audio.input"


def ga(**audio_input) -> dict:
    return {"type": "transcription", "audio": {"input": audio_input}}


# a GA session body -> the error's code and param
BAD_GA = [
    (ga(transcription={"language": "xx"}), "invalid_value", f"{INPUT}.transcription.language"),
    (ga(transcription={"language": 5}), "invalid_value", f"{INPUT}.transcription.language"),
    (ga(transcription={"prompt": ["drei"]}), "invalid_value", f"{INPUT}.transcription.prompt"),
    (ga(transcription={"hotwords": 7}), "invalid_value", f"{INPUT}.transcription.hotwords"),
    (ga(transcription={"temperature": 0.4}), "invalid_value", f"{INPUT}.transcription.temperature"),
    (ga(transcription={"temperature": "hot"}), "invalid_value", f"{INPUT}.transcription.temperature"),
    (ga(transcription={"beams": 2}), "unknown_parameter", f"{INPUT}.transcription.beams"),
    (ga(transcription="whisper-1"), "invalid_value", f"{INPUT}.transcription"),
    (ga(turn_detection={"threshold": 1.5}), "invalid_value", f"{INPUT}.turn_detection.threshold"),
    (ga(turn_detection={"threshold": True}), "invalid_value", f"{INPUT}.turn_detection.threshold"),
    (ga(turn_detection={"threshold": "0.5"}), "invalid_value", f"{INPUT}.turn_detection.threshold"),
    (ga(turn_detection={"silence_duration_ms": -1}), "invalid_value", f"{INPUT}.turn_detection.silence_duration_ms"),
    (ga(turn_detection={"prefix_padding_ms": 2.5}), "invalid_value", f"{INPUT}.turn_detection.prefix_padding_ms"),
    (ga(turn_detection={"idle_timeout_ms": 5000}), "invalid_value", f"{INPUT}.turn_detection.idle_timeout_ms"),
    (ga(turn_detection={"create_response": "yes"}), "invalid_value", f"{INPUT}.turn_detection.create_response"),
    (ga(turn_detection={"type": "semantic_vad", "eagerness": "low"}), "invalid_value",
     f"{INPUT}.turn_detection.type"),
    (ga(turn_detection={"window_ms": 30}), "unknown_parameter", f"{INPUT}.turn_detection.window_ms"),
    (ga(noise_reduction={"type": "near_field"}), "invalid_value", f"{INPUT}.noise_reduction"),
    (ga(format={"type": "audio/pcm", "rate": 16000}), "invalid_audio_format", f"{INPUT}.format"),
    (ga(speed=1.0), "unknown_parameter", f"{INPUT}.speed"),
    ({"type": "transcription", "include": ["item.input_audio_transcription.logprobs"]}, "invalid_value",
     "session.include"),
    ({"type": "transcription", "include": "logprobs"}, "invalid_value", "session.include"),
    ({"type": "transcription", "temperature": 0.8}, "unknown_parameter", "session.temperature"),
    ({"type": "transcription", "audio": {"output": {}}}, "unknown_parameter", "session.audio.output"),
    ("transcription", "invalid_value", "session"),
]
# a beta session body -> the error's code and param
BAD_BETA = [
    ({"input_audio_transcription": {"language": "klingon"}}, "invalid_value",
     "session.input_audio_transcription.language"),
    ({"input_audio_noise_reduction": {"type": "far_field"}}, "invalid_value", "session.input_audio_noise_reduction"),
    ({"modalities": ["audio", "text"]}, "invalid_value", "session.modalities"),
    ({"include": ["item.input_audio_transcription.logprobs"]}, "invalid_value", "session.include"),
    ({"turn_detection": {"threshold": -0.1}}, "invalid_value", "session.turn_detection.threshold"),
    ({"voice": "alloy"}, "unknown_parameter", "session.voice"),
]
GOOD_DETECTION = {"type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 200, "silence_duration_ms": 400,
                  "create_response": True, "interrupt_response": False, "idle_timeout_ms": None}


def known_languages(language: str) -> None:
    if language not in ("en", "de"):
        raise InputError("{language} is not a language of this Whisper model", options={"language": language})


@pytest.mark.parametrize("parse, body, code, param",
                         [(ga_update, *case) for case in BAD_GA] + [(beta_update, *case) for case in BAD_BETA],
                         ids=[f"ga-{p}" for _, _, p in BAD_GA] + [f"beta-{p}" for _, _, p in BAD_BETA])
def test_a_bad_value_is_refused_naming_its_field(parse, body, code, param):
    with pytest.raises(Refused) as refused:
        parse(body, known_languages)
    assert (refused.value.code, refused.value.param) == (code, param)
    message = str(refused.value)
    assert param in message and "\n" not in message


def test_good_values_are_taken():
    update = ga_update(ga(transcription={"model": "any", "language": "en", "prompt": "drei", "hotwords": "neun",
                                         "temperature": 0}, turn_detection=GOOD_DETECTION, noise_reduction=None,
                          format={"type": "audio/pcm", "rate": 24000}), known_languages)
    t, d = update.transcription, update.detection
    assert (t.model, t.language, t.prompt, t.hotwords) == ("any", "en", "drei", "neun")
    assert (d.threshold, d.prefix_padding_ms, d.silence_duration_ms) == (0.6, 200, 400) and update.has_detection
    update = beta_update({"input_audio_format": "pcm16", "input_audio_transcription": {"language": "de"},
                          "turn_detection": None, "modalities": ["text"], "include": []}, known_languages)
    assert update.transcription.language == "de" and update.detection is None and update.has_detection
    left_out = ga_update({"type": "transcription"}, known_languages)  # nothing said: nothing changes
    assert left_out.transcription is None and not left_out.has_detection


def test_the_server_answers_each_bad_value_and_takes_good_ones(server, direct):
    client = Client(server)
    try:
        created = client.wait("session.created")[0]["session"]
        frames = [{"type": "session.update", "session": body} for body, _, _ in BAD_GA] + \
            [{"type": "transcription_session.update", "session": body} for body, _, _ in BAD_BETA]
        for n, (frame, (_, code, param)) in enumerate(zip(frames, BAD_GA + BAD_BETA), 1):
            client.send({**frame, "event_id": f"bad_{n}"})
            error = client.wait("error", n)[-1]["error"]
            assert (error["type"], error["code"], error["param"], error["event_id"]) == \
                ("invalid_request_error", code, param, f"bad_{n}"), json.dumps(frame)
        assert not client.of("session.updated") and not client.of("transcription_session.updated")
        client.send({"type": "session.update", "session": {"type": "transcription"}})
        assert client.wait("session.updated")[0]["session"] == created  # no bad value was applied
        # good values: taken and shown
        client.send({"type": "session.update", "session": ga(
            transcription={"model": "whisper-1", "language": "en", "hotwords": "neun acht", "temperature": 0},
            turn_detection=GOOD_DETECTION, noise_reduction=None)})
        shown = client.wait("session.updated", 2)[-1]["session"]["audio"]["input"]
        assert shown["transcription"] == {"model": "whisper-1", "language": "en", "prompt": "", "hotwords": "neun acht"}
        assert shown["turn_detection"] == {"type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 200,
                                           "silence_duration_ms": 400}
        # the next items are transcribed with them: a stream of the language and hotwords given, fed the same audio
        audio = pcm(heldout(41, 1), 0.4)
        client.send({"type": "session.update", "session": ga(turn_detection=None)})
        client.wait("session.updated", 3)
        heard = [one_item(client, audio, 1)]
        client.send({"type": "session.update", "session": ga(transcription={"language": "en"})})
        client.wait("session.updated", 4)
        heard.append(one_item(client, audio, 2))
        assert heard == [streamed(direct, audio, hotwords="neun acht"), streamed(direct, audio)]
        assert heard[0] != heard[1]  # the hotwords were used (the fixture, never trained with a prompt, hears less)
    finally:
        client.close()


def one_item(client: Client, audio: bytes, n: int) -> list[str]:
    """The words of an item of `audio` sent in one append, committed."""
    client.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()})
    client.send({"type": "input_audio_buffer.commit"})
    return words(client.wait("conversation.item.input_audio_transcription.completed", n)[-1]["transcript"])


def streamed(model, audio: bytes, **options) -> list[str]:
    """The words of a live stream fed `audio` as the session feeds one append: resampled by a soxr stream, a step
    when enough came, then the end (serve.realtime_session's steps, on `model` directly)."""
    samples = soxr.ResampleStream(24000, 16000, 1, dtype="float32").resample_chunk(
        np.frombuffer(audio, "<i2").astype(np.float32) / 32768.0)
    stream = StreamTranscriber(model, language="en", options=realtime_session.STREAM_OPTIONS, **options)
    stream.append(samples)
    if stream.due:
        stream.step()
    return words(stream.finish().text)
