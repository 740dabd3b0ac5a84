"""OpenAI's `temperature` and `include[]=logprobs` on `/v1/audio/transcriptions` (serve.audio, issue #60),
through OpenAI's own Python client against the in-process server (helpers.serving) of conftest's random
Whisper (4 s windows: the 10 s recording is three): each answer equals `transcribe` of the same export
called directly with what the field means (runtime.speech.fallback.openai_fallback; logprobs=True), the
server's windows decoded in flight together (serve.windows) as well as each alone (--batching request).
Also: the route's prompt goes before every window, out-of-range temperatures and include[] without json
are 4xx naming the field, the VAD chunks' logprobs are joined in order (runtime.speech.chunks), and a stream's
deltas carry the logprobs of their tokens (runtime.speech.logprobs.TextSoFar), the done event's together."""

from __future__ import annotations

import functools

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
sf = pytest.importorskip("soundfile")

from helpers import serving  # noqa: E402
from test_serve_audio import direct, recordings, tones  # noqa: E402,F401  # fixtures

import tfm_export.runtime.speech.longform as longform  # noqa: E402
from tfm_export.runtime.speech.chunks import join_text  # noqa: E402
from tfm_export.runtime.speech.fallback import OPENAI_TEMPERATURES, openai_fallback  # noqa: E402
from tfm_export.runtime.speech.vad import VadParameters  # noqa: E402
from tfm_export.runtime.speech.whisper import speech_settings  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402


@pytest.fixture(scope="module", params=["inflight", "request"])
def url(request, whisper_export):
    """The server, its windows batched in flight (the export has its static decoder) or each on its worker."""
    with serving(ServeSettings(str(whisper_export), batching=request.param, audio_workers=2)) as (base, _):
        assert httpx.get(f"{base}/healthz").json()["batching"] == request.param
        yield base


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def fallback(direct, temperature):
    return openai_fallback(speech_settings(direct)[0], temperature)


def create(client, path, **fields):
    with open(path, "rb") as audio:
        return client.audio.transcriptions.create(file=audio, model="whisper-1", **fields)


def test_temperature_zero_is_the_fallback(client, direct, recordings):
    """0: each window at 0, 0.2, ... while it misses the thresholds (this random model's windows all do:
    their avg_logprob is far below -1), as transcribe with openai_fallback; left out: 0, OpenAI's default."""
    path = recordings["long"]
    got = create(client, path, temperature=0, response_format="verbose_json")
    want = direct.transcribe(str(path), timestamps=True, **fallback(direct, 0))
    assert got.text == want["text"]
    assert [(s.seek, s.tokens, s.temperature) for s in got.segments] == \
        [(s["seek"], s["tokens"], s["temperature"]) for s in want["segments"]]
    assert {s.temperature for s in got.segments} - {0.0} <= set(OPENAI_TEMPERATURES)
    assert any(s.temperature > 0 for s in got.segments)  # the fallback ran, not one greedy try
    greedy = direct.transcribe(str(path))["text"]
    zero = create(client, path, temperature=0).text
    assert zero == direct.transcribe(str(path), **fallback(direct, 0))["text"] != greedy
    assert create(client, path).text == zero  # left out: 0, the fallback (OpenAI's default), not greedy


def test_temperature_above_zero_samples_at_it(client, direct, recordings):
    """0.5: every window sampled at 0.5 alone (the library's fixed seed: the same answer as a direct call)."""
    for name in ("window", "long"):
        path = recordings[name]
        got = create(client, path, temperature=0.5, response_format="verbose_json")
        want = direct.transcribe(str(path), timestamps=True, **fallback(direct, 0.5))
        assert got.text and got.text == want["text"], name
        assert [s.tokens for s in got.segments] == [s["tokens"] for s in want["segments"]]
        assert {s.temperature for s in got.segments} == {0.5}
        assert got.text != direct.transcribe(str(path), timestamps=True)["text"]  # sampled, not greedy


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's mark on translations
def test_translations_take_the_temperature_too(client, direct, recordings):
    path = recordings["long"]
    for temperature in (0, 0.5):
        with open(path, "rb") as audio:
            got = client.audio.translations.create(file=audio, model="whisper-1", temperature=temperature)
        assert got.text == direct.transcribe(str(path), task="translate", **fallback(direct, temperature))["text"]


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "warm"])
@pytest.mark.parametrize("route", ["transcriptions", "translations"])
def test_temperature_out_of_range_is_a_422_naming_it(url, recordings, route, value):
    answer = httpx.post(f"{url}/v1/audio/{route}", data={"model": "whisper-1", "temperature": value},
                        files={"file": ("short.wav", recordings["short"].read_bytes())}, timeout=60)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "temperature" and answer.json()["error"].startswith("temperature: ")


def test_the_client_sees_the_422(client, recordings):
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        create(client, recordings["short"], temperature=1.5)
    body = refused.value.response.json()
    assert body["field"] == "temperature" and "less than or equal to 1" in body["error"]


def test_include_logprobs(client, direct, recordings):
    """OpenAI's Transcription.logprobs: each text token's text, log-probability and bytes, those of
    transcribe(logprobs=True) (left out: the fallback, as 0; sampled at 0.5); their texts joined are the text."""
    for name, fields, options in (("long", {}, fallback(direct, 0)), ("window", {}, fallback(direct, 0)),
                                  ("long", {"temperature": 0.5}, fallback(direct, 0.5))):
        path = recordings[name]
        got = create(client, path, include=["logprobs"], **fields)
        want = direct.transcribe(str(path), logprobs=True, **options)
        assert got.text == want["text"] and got.logprobs, name
        assert [(p.token, p.bytes) for p in got.logprobs] == [(p["token"], p["bytes"]) for p in want["logprobs"]]
        assert np.allclose([p.logprob for p in got.logprobs], [p["logprob"] for p in want["logprobs"]],
                           rtol=0, atol=1e-4)
        assert all(p.logprob <= 0 for p in got.logprobs)
        # each token's own bytes (byte-level BPE: a part of a character is its raw bytes): together, the text
        assert bytes(int(b) for p in got.logprobs for b in p.bytes).decode("utf-8", "replace") == got.text
    assert create(client, recordings["long"]).logprobs is None  # only when asked for


def streamed(client, path, **fields):
    with open(path, "rb") as audio:
        return list(client.audio.transcriptions.create(file=audio, model="whisper-1", stream=True, **fields))


def entries(logprobs):
    return [(p.token, p.logprob, tuple(p.bytes)) for p in logprobs]


def test_stream_with_logprobs(client, direct, recordings):
    """transcript.text.done carries the logprobs (those of the json answer); each delta (one per window) those
    of the tokens it adds, so that the deltas' together are the done event's, as their texts are its text."""
    for name in ("window", "long"):  # one window (decoded without timestamps), three
        path = recordings[name]
        events = streamed(client, path, include=["logprobs"])
        want = direct.transcribe(str(path), logprobs=True, **fallback(direct, 0))
        done, deltas = events[-1], events[:-1]
        assert done.type == "transcript.text.done" and done.text == want["text"] and deltas, name
        assert [(p.token, p.bytes) for p in done.logprobs] == [(p["token"], p["bytes"]) for p in want["logprobs"]]
        assert np.allclose([p.logprob for p in done.logprobs], [p["logprob"] for p in want["logprobs"]], atol=1e-4)
        assert all(event.type == "transcript.text.delta" for event in deltas)
        assert "".join(event.delta for event in deltas) == done.text
        assert [entry for event in deltas for entry in entries(event.logprobs)] == entries(done.logprobs)
        assert bytes(b for event in deltas for p in event.logprobs for b in p.bytes).decode("utf-8", "replace") \
            == done.text
    assert len(deltas) >= 2 and sum(bool(event.logprobs) for event in deltas) >= 2  # as the windows come
    plain = streamed(client, path)
    assert plain[-1].logprobs is None and all(event.logprobs is None for event in plain[:-1])
    assert [event.delta for event in plain[:-1]] == [event.delta for event in deltas]


@pytest.mark.parametrize("response_format", ["text", "verbose_json", "srt"])
def test_include_logprobs_needs_json(url, recordings, response_format):
    answer = httpx.post(f"{url}/v1/audio/transcriptions", data={
        "model": "whisper-1", "include[]": "logprobs", "response_format": response_format},
        files={"file": ("short.wav", recordings["short"].read_bytes())}, timeout=60)
    assert answer.status_code == 422 and answer.json()["field"] == "include[]", answer.text
    assert f"not {response_format}" in answer.json()["error"]
    unknown = httpx.post(f"{url}/v1/audio/transcriptions", data={"model": "whisper-1", "include[]": "words"},
                         files={"file": ("short.wav", recordings["short"].read_bytes())}, timeout=60)
    assert unknown.status_code == 422 and unknown.json()["field"] == "include[]", unknown.text


def test_the_prompt_goes_before_every_window(client, direct, recordings, monkeypatch):
    """The route's prompt is transcribe's: each of the 10 s recording's three windows is decoded after it."""
    prompts = []
    real = longform.window_prompt
    monkeypatch.setattr(longform, "window_prompt", lambda *args, **kwargs: prompts.append(real(*args, **kwargs))
                        or prompts[-1])
    got = create(client, recordings["long"], prompt="the quick brown fox", response_format="verbose_json")
    assert got.text == direct.transcribe(str(recordings["long"]), prompt="the quick brown fox",
                                         **fallback(direct, 0))["text"]
    prompt = direct.tokenizer.encode(" the quick brown fox")
    windows = prompts[:len(prompts) // 2]  # the server's, then the direct call's
    assert len(windows) == len({s.seek for s in got.segments}) >= 2
    settings = speech_settings(direct)[0]
    assert all(p[0] == settings.prev_sot_token_id and p[1:1 + len(prompt)] == prompt for p in windows), windows


def speak(*parts):
    """Utterances of the digits fixture's voice (espeak-ng) and pauses (seconds of silence), 16 kHz."""
    import shutil
    import sys
    from pathlib import Path

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "whisper-digits"))
    from speech import utterance

    return np.concatenate([np.zeros(int(p * 16000), np.float32) if isinstance(p, float) else utterance(*p)
                           for p in parts])


# server_vad's defaults (OpenAI's), as the VAD's parameters
SERVER_VAD = VadParameters(threshold=0.5, speech_pad_ms=300, min_silence_duration_ms=200)
SEED = 7  # the form's seed (this server's field, not OpenAI's: OpenAI's clients send it as extra_body)


@pytest.fixture(scope="module")
def vad_speech(direct, tmp_path_factory):
    """Three utterances with pauses (two VAD chunks of this model's 4 s windows) as a WAV of float samples (the
    server reads what `transcribe` is given), and each chunk's own transcription sampled at 0.5 from SEED (the
    first chunk's language given to the others): made once for both servers."""
    from tfm_export.runtime.speech.chunks import speech_chunks
    from tfm_export.runtime.speech.transcribe import _whisper_plan

    samples = speak(0.5, ("one two three four", "en", 160, 50), 1.0, ("five six seven", "en-us+f3", 150, 40), 1.0,
                    ("eight nine", "en", 170, 45), 0.5)
    chunks = speech_chunks(samples, _whisper_plan(direct), SERVER_VAD).chunks
    assert len(chunks) >= 2
    wav = tmp_path_factory.mktemp("vad") / "speech.wav"
    sf.write(wav, samples, 16000, subtype="FLOAT")
    each, language = [], None
    for chunk in chunks:
        each.append(direct.transcribe(chunk.samples, logprobs=True, max_seconds=None, language=language, seed=SEED,
                                      **fallback(direct, 0.5)))
        language = language or each[0]["language"]
    return samples, wav, each


def test_vad_chunks_are_transcribed_alone_in_order(direct, vad_speech):
    """transcribe(vad=True): the chunks' ids and logprobs, each chunk transcribed alone, in order, whether
    the chunks decode one after the other or together (batch_size, as the server's); sampled from the seed."""
    samples, _, each = vad_speech
    options = dict(vad=True, vad_parameters=SERVER_VAD, logprobs=True, seed=SEED, **fallback(direct, 0.5))
    want = [p for result in each for p in result["logprobs"]]
    for batch_size in (1, 4):
        got = direct.transcribe(samples, batch_size=batch_size, **options)
        assert want and got["logprobs"] == want, batch_size
        assert got["ids"] == [t for result in each for t in result["ids"]], batch_size
    assert direct.transcribe(samples, **{**options, "seed": 0})["ids"] != got["ids"]  # the seed is drawn from


def test_chunks_logprobs_are_joined_in_order(client, vad_speech):
    """chunking_strategy server_vad at temperature 0.5 with a seed: the answer's logprobs are each VAD chunk's,
    transcribed alone, in order (the server's VAD settings: OpenAI's defaults), and so are a stream's."""
    _, wav, each = vad_speech
    want = [p for result in each for p in result["logprobs"]]
    fields = dict(include=["logprobs"], chunking_strategy={"type": "server_vad"}, temperature=0.5,
                  extra_body={"seed": SEED})
    got = create(client, wav, **fields)
    assert got.text == functools.reduce(join_text, (result["text"] for result in each), "")
    assert [(p.token, p.bytes) for p in got.logprobs] == [(p["token"], p["bytes"]) for p in want]
    assert np.allclose([p.logprob for p in got.logprobs], [p["logprob"] for p in want], atol=1e-4)
    events = streamed(client, wav, **fields)
    assert [entry for event in events[:-1] for entry in entries(event.logprobs)] == entries(events[-1].logprobs)
    assert entries(events[-1].logprobs) == entries(got.logprobs)  # the chunks' in order, streamed as they end


# (the form's chunking_strategy, its seed: None left out) -> transcribe's vad_parameters and seed
SAMPLED = {("auto", None): (VadParameters(), 0), ("server_vad", SEED): (SERVER_VAD, SEED)}


@pytest.fixture(scope="module")
def sampled(direct, vad_speech):
    """SAMPLED's cases transcribed directly with timestamps at 0.5 (and greedy, None), made once for both servers."""
    samples = vad_speech[0]
    answers = {case: direct.transcribe(samples, vad=True, vad_parameters=vad, timestamps=True, seed=seed,
                                       **fallback(direct, 0.5)) for case, (vad, seed) in SAMPLED.items()}
    return {**answers, None: direct.transcribe(samples, vad=True, vad_parameters=SERVER_VAD, timestamps=True)}


def test_vad_sampling_is_the_direct_calls(client, vad_speech, sampled):
    """Served with chunking_strategy (its chunks decoded together, on the server's windows) at a temperature
    above 0: every segment's tokens are those of `transcribe(vad=True, temperature=..., seed=...)` called
    directly with the form's seed (left out: transcribe's default, 0), not greedy's."""
    for (strategy, seed), want in ((case, sampled[case]) for case in SAMPLED):
        got = create(client, vad_speech[1], temperature=0.5, response_format="verbose_json",
                     chunking_strategy=strategy if strategy == "auto" else {"type": strategy},
                     **({} if seed is None else {"extra_body": {"seed": seed}}))
        assert got.text == want["text"], (strategy, seed)
        assert [(s.start, s.end, s.tokens, s.temperature) for s in got.segments] == \
            [(s["start"], s["end"], s["tokens"], s["temperature"]) for s in want["segments"]], (strategy, seed)
    assert [s.tokens for s in got.segments] != [s["tokens"] for s in sampled[None]["segments"]]  # sampled


@pytest.mark.parametrize("value", ["-1", "18446744073709551616", "1.5", "lucky"])
@pytest.mark.parametrize("route", ["transcriptions", "translations"])
def test_a_bad_seed_is_a_422_naming_it(url, recordings, route, value):
    answer = httpx.post(f"{url}/v1/audio/{route}", data={"model": "whisper-1", "seed": value},
                        files={"file": ("short.wav", recordings["short"].read_bytes())}, timeout=60)
    assert answer.status_code == 422 and answer.json()["field"] == "seed", answer.text
    assert answer.json()["error"].startswith("seed: ")
