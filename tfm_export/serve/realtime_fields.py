"""The settings a Realtime transcription client sends (serve.realtime's `session.update`, GA, and
`transcription_session.update`, beta), checked whole before any is applied.

A value of the wrong type or range (a language the model does not know, a threshold outside 0..1, a negative
duration), a field of OpenAI's that this server does not do (semantic_vad, noise reduction, logprobs, a temperature
above 0) and a field it does not know are each one Refused naming the field by its path in the event (OpenAI's
`param`: `session.audio.input.transcription.language`); the session then keeps its settings, and goes on. None is
silently ignored. No web framework here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import InputError
from .turns import TurnDetection

CLIENT_RATE = 24000  # OpenAI's: audio/pcm is 24 kHz mono PCM16
NO_RESPONSES = "a transcription session makes no responses"


class Refused(Exception):
    """A client event the session cannot take: answered as one `error` event."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


@dataclass(frozen=True)
class Transcription:
    """OpenAI's transcription fields, and this server's hotwords (faster-whisper's: before every window's text)."""

    model: str = "whisper-1"
    language: str | None = None
    prompt: str | None = None
    hotwords: str | None = None


@dataclass(frozen=True)
class Update:
    """What one session update sets: None where it left that part out (`detection` None with `has_detection`:
    turn_detection null, the client commits)."""

    transcription: Transcription | None = None
    detection: TurnDetection | None = None
    has_detection: bool = False


# ---- the values --------------------------------------------------------------------------------------

def fields(given: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    """`given` as an object of `known` fields; another value, or an unknown field, is Refused."""
    if not isinstance(given, dict):
        raise Refused(f"{where} must be an object, got {json.dumps(given)}", param=where)
    unknown = [key for key in given if key not in known]
    if unknown:
        raise Refused(f"unknown parameter {where}.{unknown[0]}; {where} takes {', '.join(known)}",
                      code="unknown_parameter", param=f"{where}.{unknown[0]}")
    return given


def text(value: Any, where: str) -> str | None:
    """A string field (null and "": none)."""
    if value is not None and not isinstance(value, str):
        raise Refused(f"{where} must be a string, got {json.dumps(value)}", param=where)
    return value or None


def number(value: Any, where: str, low: float, high: float = math.inf, whole: bool = False) -> float:
    """A number in low..high (a whole one with `whole`: JSON's 500 or 500.0); true/false are not numbers."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low <= value <= high and (not whole or float(value).is_integer()):
        return int(value) if whole else float(value)
    kind = "a whole number" if whole else "a number"
    span = f"of {low:g} or more" if high == math.inf else f"from {low:g} to {high:g}"
    raise Refused(f"{where} must be {kind} {span}, got {json.dumps(value)}", param=where)


def not_done(value: Any, where: str, why: str, allowed: Callable[[Any], bool] = lambda v: v is None) -> None:
    """A field this server does not do: its neutral value is taken, another is Refused saying why."""
    if not allowed(value):
        raise Refused(f"{where} {json.dumps(value)} is not done here ({why})", param=where)


# ---- the parts of a session --------------------------------------------------------------------------

def transcription(given: Any, where: str, check_language: Callable[[str], None]) -> Transcription:
    body = fields(given, where, ("model", "language", "prompt", "hotwords", "temperature"))
    language = text(body.get("language"), f"{where}.language")
    if language is not None:
        try:
            check_language(language)
        except InputError as exc:
            raise Refused(exc.render(lambda key, value: f"{where}.language {value!r}"),
                          param=f"{where}.language") from None
    temperature = body.get("temperature")
    if temperature is not None:
        number(temperature, f"{where}.temperature", 0)
    not_done(temperature, f"{where}.temperature", "live text decodes greedily: each step's words are confirmed "
             "where two steps agree; send 0 or leave it out", lambda t: not t)
    return Transcription(text(body.get("model"), f"{where}.model") or "whisper-1", language,
                         text(body.get("prompt"), f"{where}.prompt"), text(body.get("hotwords"), f"{where}.hotwords"))


DETECTION_FIELDS = ("type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response",
                    "interrupt_response", "idle_timeout_ms")


def turn_detection(given: Any, where: str) -> TurnDetection | None:
    """null (the client commits) or server_vad with OpenAI's settings (each checked; its defaults)."""
    if given is None:
        return None
    body = fields(given, where, DETECTION_FIELDS + ("eagerness",))
    kind = body.get("type", "server_vad")
    if kind != "server_vad":
        raise Refused(f"{where}.type {json.dumps(kind)} is not done here: use server_vad or null",
                      param=f"{where}.type")
    for flag in ("create_response", "interrupt_response"):  # OpenAI's clients send them with server_vad
        not_done(body.get(flag), f"{where}.{flag}", NO_RESPONSES, lambda v: v is None or isinstance(v, bool))
    not_done(body.get("idle_timeout_ms"), f"{where}.idle_timeout_ms", NO_RESPONSES)
    not_done(body.get("eagerness"), f"{where}.eagerness", "semantic_vad's; server_vad has none")
    defaults = TurnDetection()
    return TurnDetection(
        number(body.get("threshold", defaults.threshold), f"{where}.threshold", 0, 1),
        number(body.get("prefix_padding_ms", defaults.prefix_padding_ms), f"{where}.prefix_padding_ms", 0, whole=True),
        number(body.get("silence_duration_ms", defaults.silence_duration_ms), f"{where}.silence_duration_ms", 0,
               whole=True))


def include(given: Any, where: str) -> None:
    if not isinstance(given, list) or not all(isinstance(v, str) for v in given):
        raise Refused(f"{where} must be a list of strings, got {json.dumps(given)}", param=where)
    not_done(given, where, "live text has no logprobs yet", lambda v: not v)


def update(where: str, body: dict[str, Any], keys: tuple[str, str], check_language: Callable[[str], None]) -> Update:
    """The Update of the object `body` at `where`, whose transcription and noise reduction are at `keys`."""
    transcription_key, noise_key = keys
    if noise_key in body:
        not_done(body[noise_key], f"{where}.{noise_key}", "this server does no noise reduction: send null")
    said = body.get(transcription_key) is not None
    return Update(transcription(body[transcription_key], f"{where}.{transcription_key}", check_language)
                  if said else None,
                  turn_detection(body.get("turn_detection"), f"{where}.turn_detection"), "turn_detection" in body)


# ---- the two events ------------------------------------------------------------------------------------

GA_SESSION = ("type", "audio", "include", "id", "object")  # id, object: a client echoing session.created's back
GA_INPUT = ("format", "transcription", "turn_detection", "noise_reduction")
BETA_SESSION = ("input_audio_format", "input_audio_transcription", "turn_detection", "input_audio_noise_reduction",
                "include", "modalities", "id", "object")


def ga_update(body: Any, check_language: Callable[[str], None]) -> Update:
    """GA: {"session": {"type": "transcription", "audio": {"input": {format, transcription, turn_detection,
    noise_reduction}}, "include": [...]}}."""
    session = fields(body, "session", GA_SESSION)
    if session.get("type", "transcription") != "transcription":
        raise Refused("this server runs transcription sessions: send session.type \"transcription\"",
                      param="session.type")
    if "include" in session:
        include(session["include"], "session.include")
    audio = fields(session.get("audio") or {}, "session.audio", ("input",))
    given = fields(audio.get("input") or {}, "session.audio.input", GA_INPUT)
    audio_format = given.get("format")
    if audio_format is not None and (not isinstance(audio_format, dict) or audio_format.get("type") != "audio/pcm"
                                     or audio_format.get("rate", CLIENT_RATE) != CLIENT_RATE):
        raise Refused(f"session.audio.input.format must be {{\"type\": \"audio/pcm\", \"rate\": {CLIENT_RATE}}}, "
                      f"got {json.dumps(audio_format)}", code="invalid_audio_format",
                      param="session.audio.input.format")
    return update("session.audio.input", given, ("transcription", "noise_reduction"), check_language)


def beta_update(body: Any, check_language: Callable[[str], None]) -> Update:
    """Beta: {"session": {input_audio_format, input_audio_transcription, turn_detection, input_audio_noise_reduction,
    include, modalities}}."""
    session = fields(body, "session", BETA_SESSION)
    if session.get("input_audio_format", "pcm16") != "pcm16":
        raise Refused(f"session.input_audio_format must be pcm16 (24 kHz), got "
                      f"{json.dumps(session['input_audio_format'])}", code="invalid_audio_format",
                      param="session.input_audio_format")
    not_done(session.get("modalities"), "session.modalities", "a transcription session writes text: send [\"text\"]",
             lambda v: v is None or v == ["text"])
    if "include" in session:
        include(session["include"], "session.include")
    return update("session", session, ("input_audio_transcription", "input_audio_noise_reduction"), check_language)
