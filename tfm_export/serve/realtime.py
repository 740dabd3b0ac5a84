"""OpenAI's Realtime transcription API on a Whisper export: `GET /v1/realtime?intent=transcription`, a WebSocket.

Client events: `session.update` (session.type "transcription", GA) or `transcription_session.update` (beta),
`input_audio_buffer.append` (base64 PCM16, mono, 24 kHz), `input_audio_buffer.commit`, `input_audio_buffer.clear`.
Server events: `session.created`, `session.updated` / `transcription_session.updated`,
`input_audio_buffer.speech_started` / `speech_stopped` (server VAD), `input_audio_buffer.committed` / `cleared`,
`conversation.item.input_audio_transcription.delta` and `.completed`, `error`.

Each item (a turn: from speech_started to speech_stopped under server VAD, else what the client appended up to its
commit) is transcribed live by runtime.speech.streaming (LocalAgreement-2): a delta carries newly confirmed text,
so the deltas of an item add up to its transcript, and they come while it is spoken. Audio is resampled to
16 kHz (soxr, one stream per session); server VAD is Silero's (serve.turns). Each step of each session runs on the
server's transcription workers (serve.transcriber) and its windows in the in-flight window batch (serve.windows):
sessions share decoder rows with each other and with uploads. A dropped connection stops its work at the next
window. Bad input (bad JSON, an unknown event, a wrong format, an append over the limits, a setting of the wrong
type or range, one not done or not known: serve.realtime_fields, which checks an update whole before any of it is
applied) is one `error` event naming the field in its `param`, and the session goes on. A client that stops reading (an event not taken within SEND_TIMEOUT_S) stops its
session at once, as a dropped one does, and gets one `error` event (client_not_reading) and a close should it read
again; the other sessions go on. Where this differs from OpenAI's service: `model` may be any name; semantic_vad,
noise reduction, logprobs and the conversation.item.* events besides transcription's are not done (a session
asking for them is refused); `hotwords` in the transcription settings is this server's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import FastAPI, WebSocket

from ..errors import TfmExportError
from .guard import authorized
from .realtime_fields import Refused, beta_update, ga_update
from .realtime_session import Session

KEY_PROTOCOL = "openai-insecure-api-key."  # browsers cannot set headers: OpenAI's key as a subprotocol


# ---- client events ------------------------------------------------------------------------------------

async def session_update(session: Session, event: dict[str, Any]) -> None:
    """GA: {"session": {"type": "transcription", "audio": {"input": {format, transcription, turn_detection}}}}."""
    session.configure(ga_update(event.get("session"), session.check_language))
    await session.send("session.updated", session=session.session_fields())


async def transcription_session_update(session: Session, event: dict[str, Any]) -> None:
    """Beta: {"session": {input_audio_format, input_audio_transcription, turn_detection}}."""
    session.configure(beta_update(event.get("session"), session.check_language))
    await session.send("transcription_session.updated", session={
        "id": session.id, "object": "realtime.transcription_session", "input_audio_format": "pcm16",
        "input_audio_transcription": session.transcription_fields(), "turn_detection": session.detection_fields(),
        "modalities": ["text"], "include": []})


async def append(session: Session, event: dict[str, Any]) -> None:
    await session.append(session.samples(event))


async def commit(session: Session, event: dict[str, Any]) -> None:
    if session.turns is not None:
        session.turns.reset()
    await session.commit()


async def clear(session: Session, event: dict[str, Any]) -> None:
    if session.item is not None:
        session.item.cleared = True
        session.item = None
    if session.turns is not None:
        session.turns.reset()
    await session.send("input_audio_buffer.cleared")


# client event type -> its handler
EVENTS = {"session.update": session_update, "transcription_session.update": transcription_session_update,
          "input_audio_buffer.append": append, "input_audio_buffer.commit": commit,
          "input_audio_buffer.clear": clear}


def parse(message: dict[str, Any]) -> dict[str, Any]:
    """A client frame as an event with a known type, or Refused."""
    text = message.get("text")
    if text is None:
        raise Refused("send each event as a JSON text frame (got a binary frame)", code="invalid_json")
    try:
        event = json.loads(text)
    except ValueError as exc:
        raise Refused(f"the event is not JSON: {exc}", code="invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise Refused("an event is a JSON object with a `type`", code="invalid_event", param="type")
    if event["type"] not in EVENTS:
        raise Refused(f"unknown event type {event['type']!r}; a transcription session takes "
                      f"{', '.join(EVENTS)}", code="unknown_event", param="type")
    return event


def key_given(ws: WebSocket, key: str) -> bool:
    """The API key in `Authorization: Bearer` (serve.guard's rule) or as OpenAI's browser subprotocol."""
    protocols = ws.scope.get("subprotocols") or []
    return authorized(ws.scope, key) or any(p == KEY_PROTOCOL + key for p in protocols)


def add_realtime(app: FastAPI, settings: Any, state: dict[str, Any]) -> None:
    """GET /v1/realtime?intent=transcription on `app` (a Whisper export's server; after serve.audio's routes,
    whose workers in state["transcriber"] it shares)."""
    from .windows import WindowBatcher

    engine = state["engine"]
    state["windows"] = engine if isinstance(engine, WindowBatcher) else None

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        if settings.api_key and not key_given(ws, settings.api_key):
            await ws.close(code=1008, reason="missing or wrong API key; send Authorization: Bearer KEY")
            return  # before accepting: the handshake is refused (403)
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        session = Session(ws, state, settings.max_audio_seconds)
        if ws.query_params.get("intent") != "transcription":
            await session.error("this server runs transcription sessions only: connect to "
                                "/v1/realtime?intent=transcription", "invalid_intent", "intent")
            await ws.close(code=1008)
            if "metrics" in state:
                state["metrics"].realtime_ended.labels("refused").inc()
            return
        await session.send("session.created", session=session.session_fields())
        metrics = state.get("metrics")  # none before the app's lifespan (a test's bare app)
        if metrics is not None:
            metrics.realtime_sessions.inc()
        try:
            await run(session, metrics)
        finally:
            if metrics is not None:
                metrics.realtime_sessions.dec()


async def run(session: Session, metrics: Any) -> None:
    """A session's steps and events until its client closes or stops reading (then its farewell); counted in
    `metrics` by why it ended as soon as it stops, before a farewell that may wait for its client."""
    tasks = [asyncio.create_task(work) for work in (session.run_steps(), receive(session), session.stalled.wait())]
    try:
        done, _ = await asyncio.wait(tasks[1:], return_when=asyncio.FIRST_COMPLETED)  # gone, or not reading
    finally:
        session.gone.set()  # the windows in flight stop; the rows are freed
        for task in tasks:
            task.cancel()
    if metrics is not None:
        metrics.realtime_ended.labels("client_not_reading" if session.stalled.is_set() else "client_closed").inc()
    if session.stalled.is_set():
        await session.farewell()
    for task in done:
        task.result()  # receive's own error, if any, as before: raised here


async def receive(session: Session) -> None:
    while True:
        message = await session.ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        event_id = None
        try:
            event = parse(message)
            event_id = event.get("event_id")
            await EVENTS[event["type"]](session, event)
        except Refused as exc:
            await session.error(str(exc), exc.code, exc.param, event_id)
        except TfmExportError as exc:
            await session.error(str(exc), "invalid_value", None, event_id)
