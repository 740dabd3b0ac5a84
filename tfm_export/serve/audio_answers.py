"""What OpenAI's audio routes (serve.audio) answer: each response_format's answer of a finished transcription
(json, text, verbose_json, srt, vtt), a stream's server-sent events and their logprobs, and the OpenAPI schemas of
the answers and errors. No route here.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ..runtime.speech.prompt import LANGUAGES
from ..runtime.speech.subtitles import to_srt, to_vtt
from .transcriber import Done


def verbose(done: Done, task: str) -> dict[str, Any]:
    result = done.result
    language = LANGUAGES.get(result["language"] or "", result["language"])  # OpenAI names it: "german"
    answer = {"task": task, "language": language, "duration": round(done.seconds, 3), "text": result["text"],
              "segments": [{"id": n, **{k: v for k, v in segment.items() if k != "words"}}
                           for n, segment in enumerate(result["segments"])],
              "usage": {"type": "duration", "seconds": round(done.seconds, 3)}}
    if "words" in result:  # asked for (timestamp_granularities[]=word): OpenAI's top-level list
        answer["words"] = result["words"]
    return answer


def logprobs_of(result: dict[str, Any]) -> dict[str, Any]:
    """{"logprobs": [...]} where include[]=logprobs asked for them (transcribe added them), else {}."""
    return {"logprobs": result["logprobs"]} if "logprobs" in result else {}


# response_format -> the answer, given the finished transcription and the task
FORMATS: dict[str, Callable[[Done, str], Response]] = {
    "json": lambda done, task: JSONResponse({"text": done.result["text"], **logprobs_of(done.result), "usage": {
        "type": "duration", "seconds": round(done.seconds, 3)}}),
    "text": lambda done, task: PlainTextResponse(done.result["text"]),
    "verbose_json": lambda done, task: JSONResponse(verbose(done, task)),
    "srt": lambda done, task: PlainTextResponse(to_srt(done.result["segments"])),
    "vtt": lambda done, task: PlainTextResponse(to_vtt(done.result["segments"])),
}

# One server-sent event: its data line, JSON (OpenAI's events carry their type inside).
STREAM_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "contentMediaType": "application/json",
             "description": '{"type": "transcript.text.delta", "delta", "logprobs"? (include[]=logprobs: its '
                            'tokens\')} per window, then {"type": '
                            '"transcript.text.done", "text", "logprobs"? (include[]=logprobs)}, or {"type": '
                            '"error", "error": {"message"}}.'}}}
ERRORS = {"s400": "The body is not a multipart/form-data form with one file.",
          "s413": "The upload is over --max-upload-mb or the recording over --max-audio-seconds (`limit` names it).",
          "s422": "A bad or unknown field (`field`/`fields` name it), or a file the decoder cannot read (`file`)."}
NUMBER, MAYBE_NUMBER = {"type": "number"}, {"type": ["number", "null"]}
# A verbose_json segment: OpenAI's fields, with openai-whisper's values (runtime.speech.whisper.segment_fields)
SEGMENT = {"type": "object", "required": ["id", "seek", "start", "end", "text", "tokens", "temperature",
                                          "avg_logprob", "compression_ratio", "no_speech_prob"], "properties": {
    "id": {"type": "integer"},
    "seek": {"type": "integer", "description": "Where its 30 s window starts, in mel frames (10 ms)."},
    "start": NUMBER, "end": NUMBER, "text": {"type": "string"},
    "tokens": {"type": "array", "items": {"type": "integer"}, "description": "Its token ids, timestamps included."},
    "temperature": {**NUMBER, "description": "The temperature its window was decoded at (0: greedy)."},
    "avg_logprob": {**MAYBE_NUMBER, "description": "Its window's mean log-probability per generated token, "
                                                   "end of text included (transformers')."},
    "compression_ratio": {**NUMBER, "description": "Its window's token ids' bytes over their zlib-compressed "
                                                   "bytes, end of text included (transformers')."},
    "no_speech_prob": {**MAYBE_NUMBER, "description": "P(<|nospeech|>) at its window's <|startoftranscript|>."}}}
JSON_ANSWER = {"type": "object", "required": ["text"], "properties": {
    "text": {"type": "string"}, "usage": {"type": "object"}, "task": {"type": "string"},
    "language": {"type": "string"}, "duration": NUMBER,
    "logprobs": {"type": "array", "description": "json with include[]=logprobs only: the text's tokens.",
                 "items": {"type": "object", "required": ["token", "logprob", "bytes"], "properties": {
                     "token": {"type": "string"}, "logprob": NUMBER,
                     "bytes": {"type": "array", "items": {"type": "integer"}}}}},
    "segments": {"type": "array", "items": SEGMENT, "description": "verbose_json only."},
    "words": {"type": "array", "description": "verbose_json with timestamp_granularities[]=word only.",
              "items": {"type": "object", "required": ["word", "start", "end"], "properties": {
                  "word": {"type": "string"}, "start": NUMBER, "end": NUMBER}}}}}
ANSWERS = {"description": "json and verbose_json: JSON; text, srt, vtt: text; stream: server-sent events.",
           "content": {"application/json": {"schema": JSON_ANSWER},
                       "text/plain": {"schema": {"type": "string"}},
                       "text/event-stream": {"schema": STREAM_EVENT}}}


def new_logprobs(so_far: list[dict[str, Any]] | None, sent: int) -> tuple[dict[str, Any], int]:
    """A delta's {"logprobs": the entries after the `sent` ones} (include[]=logprobs), and how many are sent."""
    if so_far is None:
        return {}, sent
    return {"logprobs": so_far[sent:]}, max(sent, len(so_far))


def sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
