"""OpenAI's audio API on `tfm-export serve WHISPER_EXPORT` (serve.audio), through OpenAI's own Python client
against a live server: every answer equals `transcribe` of the same export called directly (a random
multilingual Whisper with 4 s windows: conftest's whisper_export; its text is junk, so texts, segments and
subtitles are compared whole). Also: recordings from several clients at once, bad uploads answered with a
4xx JSON error, spooled uploads removed, and one kind of model per server."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
sf = pytest.importorskip("soundfile")
jsonschema = pytest.importorskip("jsonschema")

from helpers import server_process, serving  # noqa: E402
from test_serve import scrape  # noqa: E402

from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.fallback import openai_fallback  # noqa: E402
from tfm_export.runtime.speech.whisper import speech_settings  # noqa: E402
from tfm_export.runtime.speech.subtitles import to_srt, to_vtt  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402
from tfm_export.serve.upload import SPOOL_PREFIX  # noqa: E402

RATE = 16000
MAX_SECONDS = 12  # the server's --max-audio-seconds
MAX_UPLOAD_MB = 1  # and --max-upload-mb: a 12 s 16-bit WAV is 384 KB
TIMESTAMPED = {"json": False, "text": False, "verbose_json": True, "srt": True, "vtt": True}


def tones(seconds: float, seed: int, rate: int = RATE, channels: int = 1) -> np.ndarray:
    """Gliding tones in noise, (frames, channels)."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    tone = 0.3 * np.sin(2 * np.pi * (220 + 40 * seed + 80 * np.sin(0.7 * t)) * t)
    return (tone[:, None] + 0.02 * rng.standard_normal((len(t), channels))).astype(np.float32)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """name -> path: one window or less, and 10 s (three 4 s windows), as 16 kHz WAV; one as 44.1 kHz
    stereo FLAC (decoded, mixed and resampled by the server as by transcribe)."""
    folder = tmp_path_factory.mktemp("recordings")
    made = {}
    for name, seconds, rate, channels, ext in (("short", 1.5, RATE, 1, "wav"), ("window", 3.5, RATE, 1, "wav"),
                                                ("long", 10.0, RATE, 1, "wav"), ("flac", 2.5, 44100, 2, "flac")):
        made[name] = folder / f"{name}.{ext}"
        sf.write(made[name], tones(seconds, len(made), rate, channels), rate, subtype="PCM_16")
    made["too_long"] = folder / "too_long.wav"
    sf.write(made["too_long"], tones(MAX_SECONDS + 1, 9), RATE, subtype="PCM_16")
    return made


@pytest.fixture(scope="module")
def direct(whisper_export):
    return open_export(whisper_export, device="cpu")


@pytest.fixture(scope="module")
def spool(tmp_path_factory):
    return tmp_path_factory.mktemp("spool")


@pytest.fixture(scope="module")
def server(whisper_export, spool):
    with server_process("serve", whisper_export, "--max-batch", 8, "--max-queue", 64, "--upload-dir", spool,
                        "--max-upload-mb", MAX_UPLOAD_MB, "--max-audio-seconds", MAX_SECONDS) as proc:
        yield proc.url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


def openai_default(direct):
    """transcribe's arguments for what a form without `temperature` means: 0, OpenAI's default, the fallback."""
    return openai_fallback(speech_settings(direct)[0], 0)


def expected(direct, path, response_format="json", task="transcribe", **options):
    """What the server answers for `path` (its form without `temperature`), from transcribe called directly."""
    result = direct.transcribe(str(path), task=task, timestamps=TIMESTAMPED[response_format],
                               **{**openai_default(direct), **options})
    return {"json": result["text"], "text": result["text"], "verbose_json": result,
            "srt": to_srt(result["segments"]), "vtt": to_vtt(result["segments"])}[response_format]


@pytest.mark.parametrize("response_format", list(TIMESTAMPED))
def test_every_response_format_equals_transcribe(client, direct, recordings, response_format):
    for name in ("window", "long"):
        with open(recordings[name], "rb") as audio:
            got = client.audio.transcriptions.create(file=audio, model="whisper-1", response_format=response_format)
        want = expected(direct, recordings[name], response_format)
        if response_format == "json":
            assert got.text == want
        elif response_format == "verbose_json":
            assert got.text == want["text"] and got.duration == pytest.approx(10.0 if name == "long" else 3.5)
            assert got.language == {"de": "german", "en": "english", "fr": "french", "es": "spanish"}[want["language"]]
            assert_segments_equal(got.segments, want["segments"])
            assert len(got.segments) >= (2 if name == "long" else 1)
        else:  # text, srt, vtt: the client hands back the body
            assert got == want
            assert response_format == "text" or got.count(" --> ") == len(expected(direct, recordings[name],
                                                                                   "verbose_json")["segments"])


EXACT = ("seek", "start", "end", "text", "tokens", "temperature")  # and the id: equal
MEASURES = ("avg_logprob", "compression_ratio", "no_speech_prob")  # within 1e-4


def assert_segments_equal(got, want):
    """The client's verbose_json segments (openai's TranscriptionSegment) carry every field of transcribe's
    segments, with their values, and their index as id."""
    assert [(s.id, *(getattr(s, f) for f in EXACT)) for s in got] == \
        [(n, *(s[f] for f in EXACT)) for n, s in enumerate(want)]
    for name in MEASURES:
        assert np.allclose([getattr(s, name) for s in got], [s[name] for s in want], rtol=0, atol=1e-4), name
    assert all(s.tokens and s.temperature in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) and s.avg_logprob < 0 for s in got)
    assert [s.seek for s in got] == sorted(s.seek for s in got)


def test_language_prompt_and_resampling(client, direct, recordings):
    with open(recordings["flac"], "rb") as audio:
        got = client.audio.transcriptions.create(file=audio, model="whisper-1", language="de",
                                                 prompt="the quick brown fox", response_format="verbose_json",
                                                 timestamp_granularities=["segment"])
    want = expected(direct, recordings["flac"], "verbose_json", language="de", prompt="the quick brown fox")
    assert got.text == want["text"] and got.language == "german" and got.task == "transcribe"
    assert_segments_equal(got.segments, want["segments"])
    assert got.text != expected(direct, recordings["flac"], "verbose_json", language="fr")["text"]  # it was used


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's mark on translations
@pytest.mark.parametrize("response_format", ["json", "verbose_json", "srt"])
def test_translations_equal_transcribe_translate(client, direct, recordings, response_format):
    with open(recordings["long"], "rb") as audio:
        got = client.audio.translations.create(file=audio, model="whisper-1", response_format=response_format)
    want = expected(direct, recordings["long"], response_format, task="translate")
    if response_format == "json":
        assert got.text == want
    elif response_format == "verbose_json":
        assert got.text == want["text"] and got.task == "translate"
        assert_segments_equal(got.segments, want["segments"])
    else:
        assert got == want


def test_stream_sends_each_window_then_the_text(client, direct, recordings):
    """10 s: three windows, each a transcript.text.delta as it is decoded; then transcript.text.done."""
    with open(recordings["long"], "rb") as audio:
        events = list(client.audio.transcriptions.create(file=audio, model="whisper-1", stream=True))
    want = expected(direct, recordings["long"])
    kinds = [event.type for event in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert events[-1].text == want
    deltas = "".join(event.delta for event in events[:-1])
    assert deltas and want.startswith(deltas)  # a tokenizer may rewrite a window's last bytes: not resent
    assert len(events) >= 3  # more than one window's delta, not the whole text at the end


def test_concurrent_clients_equal_direct_calls(server, client, direct, recordings):
    """8 clients x 6 recordings of mixed lengths (one over a window) at once, their windows in flight
    together (serve.windows: the export has its static decoder; 8 rows, 8 workers): each answer is its
    direct call's on the growing cache; /metrics counts the audio seconds and each recording's real-time
    factor; /healthz names the in-flight batching."""
    names = ["short", "long", "window", "flac"]
    want = {name: expected(direct, recordings[name]) for name in names}
    before = scrape(server)

    def one_client(n: int) -> list[tuple[str, str]]:
        answers = []
        for name in (names[(n + k) % 4] for k in range(6)):
            with open(recordings[name], "rb") as audio:
                answers.append((name, client.audio.transcriptions.create(file=audio, model="whisper-1").text))
        return answers

    with ThreadPoolExecutor(8) as pool:
        answers = [answer for answers in pool.map(one_client, range(8)) for answer in answers]
    assert len(answers) == 48 and all(text == want[name] for name, text in answers)
    after = scrape(server)
    seconds = {"short": 1.5, "window": 3.5, "long": 10.0, "flac": 2.5}
    counted = after["tfm_export_audio_seconds_total"][()] - before.get("tfm_export_audio_seconds_total", {}).get((), 0)
    assert counted == pytest.approx(sum(seconds[name] for name, _ in answers), abs=0.01)
    observed = after["tfm_export_real_time_factor_count"][()] - before["tfm_export_real_time_factor_count"][()]
    assert observed == 48
    assert httpx.get(f"{server}/healthz").json()["batching"] == "inflight"


def test_request_level_serving_decodes_each_window_on_its_worker(whisper_export, direct, recordings):
    """--batching request (what an export without the static decoder gets): no window batch, the same answers."""
    with serving(ServeSettings(str(whisper_export), batching="request", audio_workers=2)) as (url, _):
        assert httpx.get(f"{url}/healthz").json()["batching"] == "request"
        response = post(url, data={"response_format": "verbose_json"},
                        files={"file": ("long.wav", recordings["long"].read_bytes())})
        assert response.status_code == 200, response.text
        want = expected(direct, recordings["long"], "verbose_json")
        assert response.json()["text"] == want["text"]
        assert [s["tokens"] for s in response.json()["segments"]] == [s["tokens"] for s in want["segments"]]


def post(url, route="transcriptions", data=None, files=None, **kwargs):
    return httpx.post(f"{url}/v1/audio/{route}", data={"model": "whisper-1", **(data or {})}, files=files,
                      timeout=60, **kwargs)


BAD = {  # name -> (form fields, file part, status, what the error names)
    "not audio": ({}, ("notes.wav", b"these are notes, not audio\n"), 422, "'notes.wav' is text"),
    "empty": ({}, ("empty.wav", b""), 422, "'empty.wav' is empty"),
    "damaged": ({}, ("bad.wav", b"RIFF0000WAVEnope" + bytes(64)), 422, "bad.wav"),
    "no file": ({}, {"prompt": (None, "a form field, not a file")}, 422, "file"),
    "unknown field": ({"speed": "2"}, "short", 422, "speed"),
    "temperature": ({"temperature": "1.5"}, "short", 422, "temperature"),
    "format": ({"response_format": "xml"}, "short", 422, "response_format"),
    "word timestamps in json": ({"timestamp_granularities[]": "word"}, "short", 422,
                                "word timestamps come with response_format verbose_json"),
    "stream srt": ({"stream": "true", "response_format": "srt"}, "short", 422, "stream"),
    "language": ({"language": "klingon"}, "short", 422,  # the field with its value, and the model's languages
                 "language 'klingon' is not a language of this Whisper model; its languages are en, de, fr, es,"),
    "too long": ({}, "too_long", 413, "max-audio-seconds"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_uploads_are_4xx_json(server, recordings, spool, case):
    data, part, status, named = BAD[case]
    files = part if isinstance(part, dict) else \
        {"file": part if isinstance(part, tuple) else (f"{part}.wav", recordings[part].read_bytes())}
    response = post(server, data=data, files=files)
    assert response.status_code == status, response.text
    body = response.json()
    assert named in body["error"] or named in (body.get("field"), body.get("limit"), *body.get("fields", ()))
    assert "\n" not in body["error"] and SPOOL_PREFIX not in body["error"]  # the client's name, not the spool's
    assert not list(spool.iterdir())


def test_bodies_that_are_not_one_audio_form(server, recordings, spool):
    audio = recordings["short"].read_bytes()
    too_large = post(server, files={"file": ("big.wav", bytes(MAX_UPLOAD_MB * 2**20 + 1))})
    assert too_large.status_code == 413 and too_large.json()["limit"] == "max_upload_mb"
    as_json = httpx.post(f"{server}/v1/audio/transcriptions", json={"model": "whisper-1"})
    assert as_json.status_code == 400 and "multipart/form-data" in as_json.json()["error"]
    two = post(server, files=[("file", ("a.wav", audio)), ("file", ("b.wav", audio))])
    assert two.status_code == 400 and "more than one file" in two.json()["error"]
    misnamed = post(server, files={"audio": ("a.wav", audio)})
    assert misnamed.status_code == 422 and misnamed.json()["field"] == "file"
    twice = post(server, data={"model": ["a", "b"]}, files={"file": ("a.wav", audio)})
    assert twice.status_code == 422 and twice.json()["field"] == "model"
    text_route = httpx.post(f"{server}/v1/translate", json={"texts": ["hello"]})
    assert text_route.status_code == 400 and "speech model" in text_route.json()["error"]
    assert not list(spool.iterdir())


BOUNDARY = "tfm-export-test-boundary"
FORM = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}


def form_body(audio: bytes) -> bytes:
    """A multipart/form-data body with `model` and `file`, as a client writes it (sent in parts by hand)."""
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
            f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + audio + f"\r\n--{BOUNDARY}--\r\n".encode()


def test_an_upload_without_content_length_is_cut_at_the_limit(server, spool):
    """Chunked: no Content-Length to refuse it by; the server stops reading once the file passes the limit."""
    body = form_body(bytes(MAX_UPLOAD_MB * 2**20 + 1))
    chunks = (body[n:n + 65536] for n in range(0, len(body), 65536))
    response = httpx.post(f"{server}/v1/audio/transcriptions", content=chunks, headers=FORM, timeout=60)
    assert response.status_code == 413 and response.json()["limit"] == "max_upload_mb"
    assert not list(spool.iterdir())


def test_the_upload_is_spooled_and_always_removed(server, recordings, spool):
    """The file is on disk in --upload-dir while the upload arrives, and gone once answered, or once the
    client drops the connection halfway."""
    body = form_body(recordings["window"].read_bytes())
    half = len(body) // 2
    seen = []

    def slowly(fail: bool):
        yield body[:half]
        deadline = time.time() + 20
        while not list(spool.iterdir()) and time.time() < deadline:
            time.sleep(0.05)
        seen.append([p.name for p in spool.iterdir()])
        if fail:
            raise ConnectionAbortedError("the client gives up halfway")
        yield body[half:]

    response = httpx.post(f"{server}/v1/audio/transcriptions", content=slowly(False), headers=FORM, timeout=60)
    assert response.status_code == 200, response.text
    with pytest.raises(ConnectionAbortedError):
        httpx.post(f"{server}/v1/audio/transcriptions", content=slowly(True), headers=FORM, timeout=60)
    assert len(seen) == 2 and all(len(names) == 1 and names[0].startswith(SPOOL_PREFIX) for names in seen)
    deadline = time.time() + 10
    while list(spool.iterdir()) and time.time() < deadline:  # the dropped one: once the server notices
        time.sleep(0.05)
    assert not list(spool.iterdir())


def test_the_schema_documents_the_audio_routes(server, recordings):
    schema = httpx.get(f"{server}/openapi.json").json()
    assert set(schema["paths"]) == {"/healthz", "/metrics", "/v1/models", "/v1/models/{model}",
                                    "/v1/audio/transcriptions", "/v1/audio/translations"}
    form = schema["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["required"] == ["file", "model"]
    assert set(form["schema"]["properties"]["response_format"]["enum"]) == set(TIMESTAMPED)
    answers = schema["paths"]["/v1/audio/translations"]["post"]["responses"]
    assert set(answers) == {"200", "400", "413", "422", "429", "503"}
    answer = answers["200"]["content"]["application/json"]["schema"]
    segment = answer["properties"]["segments"]["items"]
    assert set(segment["required"]) == {"id", *EXACT, *MEASURES} == set(segment["properties"])
    # schemathesis' uploads are no audio: a real verbose_json answer is checked against the schema here
    verbose = post(server, data={"response_format": "verbose_json"},
                   files={"file": ("long.wav", recordings["long"].read_bytes())})
    assert verbose.status_code == 200 and len(verbose.json()["segments"]) >= 2
    jsonschema.validate(verbose.json(), answer)
    assert "stream" not in schema["paths"]["/v1/audio/translations"]["post"]["requestBody"]["content"][
        "multipart/form-data"]["schema"]["properties"]


def test_word_timestamps_equal_transcribe(client, direct, recordings):
    """timestamp_granularities[]=word: OpenAI's top-level `words`, each transcribe's word (its alignment.onnx)."""
    for name in ("window", "long"):
        with open(recordings[name], "rb") as audio:
            got = client.audio.transcriptions.create(file=audio, model="whisper-1", response_format="verbose_json",
                                                     timestamp_granularities=["word", "segment"])
        want = direct.transcribe(str(recordings[name]), timestamps=True, word_timestamps=True,
                                 **openai_default(direct))
        assert [(w.word, w.start, w.end) for w in got.words] == \
            [(w["word"], w["start"], w["end"]) for w in want["words"]]
        assert got.words and got.text == want["text"]


def test_clients_list_the_served_model(client, whisper_export):
    """OpenAI's clients (and the UIs built on them) list the models first: the one served is the export folder's
    name, retrievable by it; another name is a 404 naming it. Transcription still takes any model name."""
    name = Path(whisper_export).resolve().name
    models = client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [(name, "model", "tfm-export")]
    assert models.data[0].created == int((Path(whisper_export) / "manifest.json").stat().st_mtime)
    assert client.models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("whisper-1")
    answer = missing.value.response.json()
    assert answer == {"error": f"no model 'whisper-1': this server serves {name!r}", "field": "model"}


def test_a_text_export_refuses_the_audio_routes(chars_export, recordings):
    with serving(ServeSettings(str(chars_export))) as (url, _):
        response = post(url, files={"file": ("a.wav", recordings["short"].read_bytes())})
        assert response.status_code == 400 and "text model" in response.json()["error"]
        assert "/v1/audio/transcriptions" not in httpx.get(f"{url}/openapi.json").json()["paths"]
        assert httpx.post(f"{url}/v1/translate", json={"texts": ["12"]}).status_code == 200


def test_the_request_level_note_names_this_models_slots(whisper_export):
    """Serving without decoder_static.onnx says how to re-export for in-flight windows: with this model's
    max_target_positions (a hint of Whisper's 448 was refused by the export of a smaller model)."""
    from tfm_export.manifest import load_manifest
    from tfm_export.serve.module_exports import auto_request_note

    slots = load_manifest(Path(whisper_export)).config.max_len
    assert slots != 448 and f"--static-slots {slots} (this model's" in auto_request_note(str(whisper_export), True)
