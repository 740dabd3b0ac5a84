"""OpenAI's Realtime transcription API (serve.realtime: GET /v1/realtime?intent=transcription, a WebSocket) on the
trained Whisper fixture (conftest's digits_export, in-flight windows) with held-out espeak-ng speech, sent as
OpenAI's clients send it: base64 PCM16 at 24 kHz in 100 ms appends, paced at four times real time.

A plain `websockets` client following OpenAI's event schema, and the `openai` package's own realtime client:
deltas come while the audio is sent, add up to the transcript, and the transcript is offline `transcribe`'s of the
same audio (as the server resamples it); server VAD cuts a recording into one item per utterance; 8 sessions at
once; each bad input is one error event and the session goes on; a client that stops reading stops its session
alone; the API key applies; a dropped connection leaves no work behind.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

websockets = pytest.importorskip("websockets")
soxr = pytest.importorskip("soxr")
httpx = pytest.importorskip("httpx")

from helpers import serving  # noqa: E402

from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.streaming import StreamOptions  # noqa: E402
from tfm_export.serve import realtime_session  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

FOLDER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]
CLIENT_RATE = 24000
CHUNK = CLIENT_RATE // 10  # 100 ms
PACE = 4.0  # times real time
MAX_SECONDS = 12  # the server's --max-audio-seconds
MANUAL = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
    "format": {"type": "audio/pcm", "rate": CLIENT_RATE}, "transcription": {"model": "whisper-1"},
    "turn_detection": None}}}}


def heldout(first: int, count: int) -> list[Spoken]:
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    return [Spoken.from_row(row) for row in rows[first:first + count]]


def pcm(spoken: list[Spoken], pause: float) -> bytes:
    """The utterances with `pause` s of silence around each, as 24 kHz PCM16 (what a client sends)."""
    gap = np.zeros(int(pause * RATE), np.float32)
    samples = np.concatenate([gap] + [part for s in spoken for part in (s.samples(), gap)])
    return (np.clip(soxr.resample(samples, RATE, CLIENT_RATE), -1, 1) * 32767).astype("<i2").tobytes()


def as_served(audio: bytes) -> np.ndarray:
    """The 16 kHz samples the server transcribes from `audio`."""
    return soxr.resample(np.frombuffer(audio, "<i2").astype(np.float32) / 32768.0, CLIENT_RATE, RATE)


def words(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
def server(digits_export):
    saved = realtime_session.STREAM_OPTIONS
    realtime_session.STREAM_OPTIONS = StreamOptions(prompt_chars=0)  # the fixture was never trained with prompts
    try:
        # keepalive pings 10 min apart: the client that stops reading cannot answer them, and under load its test
        # outlasts uvicorn's 20 s + 20 s, whose 1011 close would then come before the server's own (what it tests)
        with serving(ServeSettings(folder=str(digits_export), max_audio_seconds=MAX_SECONDS),
                     ws_ping_interval=600.0) as (url, engine):
            yield url.replace("http://", "ws://")
    finally:
        realtime_session.STREAM_OPTIONS = saved


@pytest.fixture(scope="module")
def direct(digits_export):
    return open_export(digits_export, device="cpu")


class Client:
    """A plain websockets client: events read by a thread as they come, each with when it came."""

    def __init__(self, url: str, **options):
        from websockets.sync.client import connect

        self.ws = connect(url + "/v1/realtime?intent=transcription", **options)
        self.events: list[tuple[float, dict]] = []
        self.arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for message in self.ws:
                with self.arrived:
                    self.events.append((time.monotonic(), json.loads(message)))
                    self.arrived.notify_all()
        except websockets.ConnectionClosed:
            pass

    def send(self, event: dict) -> None:
        self.ws.send(json.dumps(event))

    def stream(self, audio: bytes, pace: float = PACE) -> float:
        """Appends of 100 ms at `pace` times real time; when the last one was sent."""
        for at in range(0, len(audio), 2 * CHUNK):
            self.send({"type": "input_audio_buffer.append",
                       "audio": base64.b64encode(audio[at:at + 2 * CHUNK]).decode()})
            time.sleep(0.1 / pace)
        return time.monotonic()

    def of(self, kind: str) -> list[dict]:
        return [e for _, e in self.events if e["type"] == kind]

    def wait(self, kind: str, count: int = 1, timeout: float = 120) -> list[dict]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.of(kind)) >= count, timeout), (kind, self.events[-3:])
        return self.of(kind)

    def close(self):
        self.ws.close()


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of the server's /metrics (Prometheus text, read with prometheus_client's parser); 0 if absent."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.replace("ws://", "http://") + "/metrics").text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def ended(url: str, reason: str) -> float:
    return metric(url, "tfm_export_realtime_sessions_ended_total", reason=reason)


def transcribe_manually(url: str, audio: bytes) -> tuple[Client, float]:
    client = Client(url)
    client.wait("session.created")
    client.send(MANUAL)
    client.wait("session.updated")
    sent = client.stream(audio)
    client.send({"type": "input_audio_buffer.commit"})
    client.wait("conversation.item.input_audio_transcription.completed")
    return client, sent


@pytest.mark.parametrize("first, count, pause", [(0, 2, 0.4), (0, 5, 0.7), (61, 2, 0.4)])
def test_websockets_client_gets_offline_text_live(server, direct, first, count, pause):
    """One window or less: offline transcribe's text; 5 utterances (four windows): what was said (offline long
    form errs at its seams). Either way deltas came before the last append and add up to the transcript."""
    spoken = heldout(first, count)
    audio = pcm(spoken, pause)
    client, sent = transcribe_manually(server, audio)
    try:
        session = client.of("session.updated")[0]["session"]
        assert session["type"] == "transcription" and session["audio"]["input"]["turn_detection"] is None
        committed = client.of("input_audio_buffer.committed")[0]
        done = client.of("conversation.item.input_audio_transcription.completed")[0]
        deltas = client.of("conversation.item.input_audio_transcription.delta")
        assert committed["item_id"] == done["item_id"] and {d["item_id"] for d in deltas} == {done["item_id"]}
        assert "".join(d["delta"] for d in deltas) == done["transcript"]
        early = [at for at, e in client.events if e["type"].endswith(".delta") and at < sent]
        assert early, "no delta before the audio ended"
        samples = as_served(audio)
        expected = (direct.transcribe(samples)["text"] if len(samples) <= 4 * RATE
                    else " ".join(s.text() for s in spoken))
        assert words(done["transcript"]) == words(expected)
        assert done["usage"]["type"] == "duration" and done["usage"]["seconds"] > 0
    finally:
        client.close()


def test_server_vad_makes_one_item_per_utterance(server, direct):
    spoken = heldout(10, 3)
    client = Client(server)
    try:
        client.wait("session.created")
        assert client.of("session.created")[0]["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
        client.stream(pcm(spoken, 1.0))
        done = client.wait("conversation.item.input_audio_transcription.completed", 3)
        started = client.of("input_audio_buffer.speech_started")
        stopped = client.of("input_audio_buffer.speech_stopped")
        assert len(started) == len(stopped) == 3
        assert [e["item_id"] for e in started] == [e["item_id"] for e in done]
        for before, after in zip(stopped, started[1:]):
            assert before["audio_end_ms"] < after["audio_start_ms"]
        assert [words(e["transcript"]) for e in done] == [words(s.text()) for s in spoken]
    finally:
        client.close()


def test_openai_client_realtime(server, direct):
    """openai's own realtime client against this server (no network): connect with intent=transcription."""
    openai = pytest.importorskip("openai")
    import asyncio

    audio = pcm(heldout(20, 2), 0.4)

    async def go():
        client = openai.AsyncOpenAI(api_key="unused", base_url=server.replace("ws://", "http://") + "/v1",
                                    websocket_base_url=server + "/v1")
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
            await connection.session.update(session=MANUAL["session"])
            for at in range(0, len(audio), 2 * CHUNK):
                await connection.input_audio_buffer.append(audio=base64.b64encode(audio[at:at + 2 * CHUNK]).decode())
            await connection.input_audio_buffer.commit()
            deltas = []
            async for event in connection:
                if event.type == "conversation.item.input_audio_transcription.delta":
                    deltas.append(event.delta)
                if event.type == "conversation.item.input_audio_transcription.completed":
                    return "".join(deltas), event.transcript

    joined, transcript = asyncio.run(asyncio.wait_for(go(), 120))
    assert joined == transcript
    assert words(transcript) == words(direct.transcribe(as_served(audio))["text"])


def test_eight_sessions_at_once(server, direct):
    recordings = [pcm(heldout(30 + n, 1), 0.4) for n in range(8)]

    def one(audio):
        client, _ = transcribe_manually(server, audio)
        client.close()
        return client.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, recordings))
    assert [words(t) for t in got] == [words(direct.transcribe(as_served(a))["text"]) for a in recordings]


BAD = [
    ("not json", "invalid_json"),
    (json.dumps(["a list"]), "invalid_event"),
    (json.dumps({"type": "response.create"}), "unknown_event"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "***"}), "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()}),
     "invalid_audio_format"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(
        bytes(2 * CLIENT_RATE * (MAX_SECONDS + 1))).decode()}), "input_audio_buffer_too_large"),
    (json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcmu"}}}}}), "invalid_audio_format"),
    (json.dumps({"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}}),
     "invalid_audio_format"),
    (json.dumps({"type": "session.update", "session": {"type": "realtime"}}), "invalid_value"),
    (json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "turn_detection": {"type": "semantic_vad"}}}}}), "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty"),
]


def test_bad_input_is_one_error_event_and_the_session_goes_on(server, direct):
    client = Client(server)
    try:
        client.wait("session.created")
        client.send({**MANUAL, "type": "session.update"})
        client.wait("session.updated")
        for n, (frame, code) in enumerate(BAD, 1):
            client.ws.send(frame)
            error = client.wait("error", n)[-1]["error"]
            assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"], frame
        client.ws.send(b"\x00binary")
        assert client.wait("error", len(BAD) + 1)[-1]["error"]["code"] == "invalid_json"
        audio = pcm(heldout(40, 1), 0.4)
        client.stream(audio, pace=50)
        client.send({"type": "input_audio_buffer.commit"})
        done = client.wait("conversation.item.input_audio_transcription.completed")[0]
        assert words(done["transcript"]) == words(direct.transcribe(as_served(audio))["text"])
        assert len(client.of("error")) == len(BAD) + 1
    finally:
        client.close()


def test_clear_drops_the_buffer(server):
    client = Client(server)
    try:
        client.wait("session.created")
        client.send(MANUAL)
        client.stream(pcm(heldout(41, 1), 0.2), pace=50)
        client.send({"type": "input_audio_buffer.clear"})
        client.wait("input_audio_buffer.cleared")
        client.send({"type": "input_audio_buffer.commit"})  # nothing left to commit
        assert client.wait("error")[0]["error"]["code"] == "input_audio_buffer_commit_empty"
    finally:
        client.close()


def test_a_dropped_connection_leaves_no_work(server):
    """No rows, no queue and no open session once the client is gone; /metrics counts the session as client_closed."""
    closed = ended(server, "client_closed")
    client = Client(server)
    client.wait("session.created")
    assert metric(server, "tfm_export_realtime_sessions") >= 1
    client.send(MANUAL)
    client.stream(pcm(heldout(42, 3), 0.4), pace=50)
    client.ws.close()
    health = server.replace("ws://", "http://") + "/healthz"
    deadline = time.monotonic() + 30
    while True:
        answer = httpx.get(health).json()
        if answer["active"] == 0 and answer["queue_depth"] == 0 and ended(server, "client_closed") > closed:
            break
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
    assert metric(server, "tfm_export_realtime_sessions") == 0


def test_intent_and_api_key(server, digits_export):
    from websockets.sync.client import connect

    with connect(server + "/v1/realtime") as ws:  # no intent: one error, then closed
        event = json.loads(ws.recv())
        assert event["type"] == "error" and event["error"]["code"] == "invalid_intent"
    with serving(ServeSettings(folder=str(digits_export), api_key="sekrit")) as (url, _):
        url = url.replace("http://", "ws://")
        with pytest.raises(websockets.InvalidStatus):
            Client(url)
        with pytest.raises(websockets.InvalidStatus):
            Client(url, additional_headers={"Authorization": "Bearer wrong"})
        for options in ({"additional_headers": {"Authorization": "Bearer sekrit"}},
                        {"subprotocols": ["realtime", "openai-insecure-api-key.sekrit"]}):
            client = Client(url, **options)
            assert client.wait("session.created")
            client.close()


def test_a_client_that_stops_reading_stops_its_session_alone(server, direct, monkeypatch):
    """A client that sends but never reads (a raw socket with a small receive buffer; each event it sends answered
    with its prompt of 200 kB): its session stops within SEND_TIMEOUT_S and leaves no work behind, another session
    transcribes as ever meanwhile, and when the client reads again it finds one error event (client_not_reading),
    then the close (1008)."""
    import socket

    from websockets.frames import Frame, Opcode

    monkeypatch.setattr(realtime_session, "SEND_TIMEOUT_S", 1.0)
    monkeypatch.setattr(realtime_session, "FAREWELL_S", 300.0)  # however long the other session takes here
    host, port = server.removeprefix("ws://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(f"GET /v1/realtime?intent=transcription HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")

    def frame(event: dict) -> bytes:
        return Frame(Opcode.TEXT, json.dumps(event).encode()).serialize(mask=True, extensions=[])

    sock.sendall(frame(MANUAL))
    for at in range(0, 2 * CLIENT_RATE, 2 * CHUNK):  # a second of audio: its steps are in flight
        sock.sendall(frame({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(2 * CHUNK)).decode()}))
    flood = frame({"type": "transcription_session.update", "session": {
        "input_audio_transcription": {"model": "whisper-1", "prompt": "seven " * 35000}}})

    def send_flood():
        with contextlib.suppress(OSError):
            for _ in range(60):  # 12 MB of answers: more than the sockets and the server's transport hold
                sock.sendall(flood)

    threading.Thread(target=send_flood, daemon=True).start()
    audio = pcm(heldout(43, 1), 0.4)
    other, _ = transcribe_manually(server, audio)  # meanwhile
    other.close()
    done = other.of("conversation.item.input_audio_transcription.completed")[0]
    assert words(done["transcript"]) == words(direct.transcribe(as_served(audio))["text"])
    health = server.replace("ws://", "http://") + "/healthz"
    deadline = time.monotonic() + 30
    while (answer := httpx.get(health).json())["active"] or answer["queue_depth"]:
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
    # the server must have stopped the session before the client reads again: reading first would let its sends
    # through, and under load the stop can come after the other session's whole transcription
    deadline = time.monotonic() + 120
    while ended(server, "client_not_reading") < 1:
        assert time.monotonic() < deadline, "the session of the client that stopped reading was never stopped"
        time.sleep(0.2)
    sock.settimeout(30)
    data = b""
    close = b"\x03\xf0the client stopped reading"  # a close frame's payload: 1008, its reason
    while close not in data[-200:]:
        more = sock.recv(1 << 20)
        assert more, f"the server closed the connection without its close frame: {data[-300:]!r}"
        data += more
    sock.close()
    assert data.count(b'"type": "error"') == 1 and data.count(b'"code": "client_not_reading"') == 1
    assert data.endswith(close)
