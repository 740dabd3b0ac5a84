"""One Realtime transcription session (serve.realtime's WebSocket): its settings, the item being appended to, server
VAD's turns and each item's live transcription, its steps run on the server's transcription workers in order.
No web framework here beyond the socket it sends on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TfmExportError
from ..runtime.speech.prompt import language_id
from ..runtime.speech.streaming import StreamOptions, StreamTranscriber, StreamUpdate
from ..runtime.speech.whisper import speech_settings
from .jobs import Cancelled, QueueFull
from .realtime_fields import CLIENT_RATE, Refused, Transcription, Update
from .turns import TurnDetection, TurnDetector

log = logging.getLogger(__name__)

MAX_APPEND_BYTES = 15 * 2**20  # OpenAI's limit on one append's audio
MIN_COMMIT_S = 0.1  # OpenAI refuses to commit less
STREAM_OPTIONS = StreamOptions()  # each item's streaming policy (a test's fixture may need another)
RETRY_S = 0.2  # a step the workers' queue refused waits this long and runs with the audio that came meanwhile
SEND_TIMEOUT_S = 10.0  # an event the client has not taken in this long: it stopped reading (the session stops)
FAREWELL_S = 30.0  # how long a stopped session's error event and close wait for that client to read again


@dataclass(eq=False)
class Item:
    """One item's audio and live transcription."""

    id: str
    stream: StreamTranscriber
    pending: list[np.ndarray] = field(default_factory=list)  # appended, not yet handed to the stream
    seconds: float = 0.0
    cleared: bool = False


def new_id(kind: str) -> str:
    return f"{kind}_{uuid.uuid4().hex[:20]}"


class Session:
    """One connection: its settings, the item being appended to and the steps of its items, in order."""

    def __init__(self, ws: Any, state: dict[str, Any], max_seconds: float):
        import soxr

        self.ws, self.state, self.max_seconds = ws, state, max_seconds
        self.id = new_id("sess")
        self.model = state["engine"].model
        self.transcription = Transcription()  # model, language, prompt, hotwords (serve.realtime_fields)
        self.detection: TurnDetection | None = TurnDetection()  # OpenAI's default: server VAD
        self.turns: TurnDetector | None = TurnDetector(self.detection)
        self.resampler = soxr.ResampleStream(CLIENT_RATE, 16000, 1, dtype="float32")
        self.item: Item | None = None
        self.previous: str | None = None
        self.work: asyncio.Queue = asyncio.Queue()
        self.gone = threading.Event()
        self.stalled = asyncio.Event()  # the client stopped reading: the session stops, farewell() tells it
        self.lock = asyncio.Lock()

    async def send(self, kind: str, **fields: Any) -> None:
        """One event to the client; one it does not take within SEND_TIMEOUT_S (its socket's buffers full: it
        stopped reading) stalls the session, and nothing more is sent but farewell's."""
        async with self.lock:
            if self.stalled.is_set():
                return
            try:
                await asyncio.wait_for(self.ws.send_text(self.event(kind, **fields)), SEND_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("realtime session %s: the client took no event for %g s; the session stops", self.id,
                            SEND_TIMEOUT_S)
                self.stalled.set()

    @staticmethod
    def event(kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "event_id": new_id("event"), **fields})

    async def farewell(self) -> None:
        """A stalled session's one error event and close, should its client read again within FAREWELL_S."""
        message = (f"this client took no event for {SEND_TIMEOUT_S:g} s (it stopped reading): the session stopped "
                   "and its audio was dropped; read the events as they come")
        try:
            await asyncio.wait_for(self.ws.send_text(self.event("error", error={
                "type": "invalid_request_error", "code": "client_not_reading", "message": message, "param": None,
                "event_id": None})), FAREWELL_S)
            await asyncio.wait_for(self.ws.close(code=1008, reason="the client stopped reading"), FAREWELL_S)
        except (asyncio.TimeoutError, RuntimeError, OSError):
            log.info("realtime session %s: its client never read again", self.id)

    async def error(self, message: str, code: str, param: str | None = None, event_id: str | None = None) -> None:
        await self.send("error", error={"type": "invalid_request_error", "code": code, "message": message,
                                        "param": param, "event_id": event_id})

    # ---- settings -------------------------------------------------------------------------------------

    def session_fields(self) -> dict[str, Any]:
        """The GA session object (session.created / session.updated)."""
        given = {"format": {"type": "audio/pcm", "rate": CLIENT_RATE}, "transcription": self.transcription_fields(),
                 "turn_detection": self.detection_fields(), "noise_reduction": None}
        return {"type": "transcription", "object": "realtime.transcription_session", "id": self.id,
                "audio": {"input": given}, "include": []}

    def transcription_fields(self) -> dict[str, Any]:
        t = self.transcription
        shown = {"model": t.model, "language": t.language, "prompt": t.prompt or ""}
        return {**shown, "hotwords": t.hotwords} if t.hotwords else shown  # this server's field, when set

    def check_language(self, language: str) -> None:
        """`language` is one of the model's (an InputError naming it otherwise), checked when the session is
        updated rather than at its first step."""
        language_id(speech_settings(self.model)[0], language)

    def detection_fields(self) -> dict[str, Any] | None:
        d = self.detection
        return None if d is None else {"type": "server_vad", "threshold": d.threshold,
                                       "prefix_padding_ms": d.prefix_padding_ms,
                                       "silence_duration_ms": d.silence_duration_ms}

    def configure(self, update: Update) -> None:
        """A checked update's settings (serve.realtime_fields); the items that follow use them."""
        if update.transcription is not None:
            self.transcription = update.transcription
        if update.has_detection:
            self.detection = update.detection
            self.turns = None if self.detection is None else TurnDetector(self.detection)

    # ---- audio ----------------------------------------------------------------------------------------

    def samples(self, event: dict[str, Any]) -> np.ndarray:
        """An append's audio at 16 kHz; a bad one is Refused."""
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise Refused("input_audio_buffer.append needs `audio`: base64 PCM16 at 24 kHz", param="audio")
        if len(audio) * 3 // 4 > MAX_APPEND_BYTES:
            raise Refused(f"an append carries at most {MAX_APPEND_BYTES} bytes of audio; send smaller chunks",
                          code="input_audio_buffer_too_large", param="audio")
        try:
            raw = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise Refused("audio is not base64", param="audio") from None
        if len(raw) % 2:
            raise Refused("audio must be 16-bit PCM (audio/pcm, little-endian): got an odd number of bytes",
                          code="invalid_audio_format", param="audio")
        pcm = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
        return self.resampler.resample_chunk(pcm)

    def room(self, seconds: float) -> None:
        held = self.item.seconds if self.item is not None else 0.0
        if held + seconds > self.max_seconds:
            raise Refused(f"the input audio buffer would hold {held + seconds:.1f} s, over this server's "
                          f"--max-audio-seconds {self.max_seconds:g}; commit it first",
                          code="input_audio_buffer_too_large", param="audio")

    def add(self, samples: np.ndarray) -> None:
        if self.item is None:
            options = {} if self.state.get("windows") is None else {"runner": self.state["windows"].runner(
                self.gone.is_set)}
            t = self.transcription
            if t.hotwords:
                options["hotwords"] = t.hotwords
            stream = StreamTranscriber(self.model, language=t.language, prompt=t.prompt, options=STREAM_OPTIONS,
                                       **options)
            self.item = Item(new_id("item"), stream)
        self.item.pending.append(samples)
        self.item.seconds += len(samples) / 16000
        self.work.put_nowait((self.item, "audio"))

    async def append(self, samples: np.ndarray) -> None:
        self.room(len(samples) / 16000)
        if self.turns is None:
            self.add(samples)
            return
        for action in self.turns.feed(samples):
            await TURN_ACTIONS[action[0]](self, *action[1:])

    async def commit(self) -> None:
        item, self.item = self.item, None
        if item is None or item.seconds < MIN_COMMIT_S:
            raise Refused(f"the input audio buffer holds {item.seconds if item else 0:.2f} s; commit at least "
                          f"{MIN_COMMIT_S * 1000:.0f} ms", code="input_audio_buffer_commit_empty")
        await self.send("input_audio_buffer.committed", item_id=item.id, previous_item_id=self.previous)
        self.previous = item.id
        self.work.put_nowait((item, "commit"))

    async def speech_started(self, ms: int, before: np.ndarray) -> None:
        self.item = None
        self.add(before)
        await self.send("input_audio_buffer.speech_started", audio_start_ms=ms, item_id=self.item.id)

    async def speech_stopped(self, ms: int) -> None:
        await self.send("input_audio_buffer.speech_stopped", audio_end_ms=ms, item_id=self.item.id)
        await self.commit()

    async def audio(self, samples: np.ndarray) -> None:
        self.add(samples)

    # ---- transcription (one step at a time, in the order the audio came) --------------------------------

    async def run_steps(self) -> None:
        while True:
            item, kind = await self.work.get()
            if item.cleared:
                continue
            if item.pending:
                item.stream.append(np.concatenate(item.pending))
                item.pending.clear()
            try:
                if kind == "commit":
                    update = await self.on_workers(item.stream.finish)
                    await self.deltas(item, [update])
                    await self.send("conversation.item.input_audio_transcription.completed", item_id=item.id,
                                    content_index=0, transcript=update.text,
                                    usage={"type": "duration", "seconds": round(item.seconds, 3)})
                elif item.stream.due:
                    await self.deltas(item, [await self.on_workers(item.stream.step)])
            except Cancelled:
                return
            except TfmExportError as exc:
                await self.error(str(exc), "transcription_failed")

    async def on_workers(self, step: Any) -> StreamUpdate:
        while True:
            try:
                return await self.state["transcriber"].submit_call(step)
            except QueueFull:
                await asyncio.sleep(RETRY_S)

    async def deltas(self, item: Item, updates: list[StreamUpdate]) -> None:
        for update in updates:
            if update.confirmed and not item.cleared:
                await self.send("conversation.item.input_audio_transcription.delta", item_id=item.id,
                                content_index=0, delta=update.confirmed)


# server VAD's actions (serve.turns.TurnDetector) -> what the session does
TURN_ACTIONS = {"start": Session.speech_started, "stop": Session.speech_stopped, "audio": Session.audio}
