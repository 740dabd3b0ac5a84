"""OpenAI's audio API on a Whisper export, so that OpenAI's clients (the `openai` package, curl scripts made
for api.openai.com) work unchanged:

    POST /v1/audio/transcriptions   multipart/form-data: file, model, language?, prompt?, response_format?,
                                    temperature?, seed?, timestamp_granularities[]?, include[]?, stream?,
                                    chunking_strategy?
    POST /v1/audio/translations     multipart/form-data: file, model, prompt?, response_format?, temperature?, seed?

Each answer is what `transcribe` of the same export returns for the same recording (runtime.speech.whisper):
json {"text", "usage"}; text the text; verbose_json {"task", "language", "duration", "text", "segments":
[{"id", "seek", "start", "end", "text", "tokens", ...}]}; srt and vtt the segments as subtitles
(runtime.speech.subtitles.to_srt/to_vtt, as `tfm-export transcribe --format`). verbose_json, srt and vtt decode
with timestamps (segments with their times), json and text without. Where this differs from OpenAI's service:

- `model` may be any name: a server serves one export (GET /v1/models lists it by its folder's name, serve.model_list).
- `temperature` (0 to 1) means what OpenAI's does (runtime.speech.fallback.openai_fallback): 0 is the
  temperature fallback (each window decoded at 0, then 0.2, ..., 1.0 while its compression ratio or
  log-probability misses the folder's thresholds, else openai-whisper's 2.4 and -1.0; a silent window,
  no_speech_prob over 0.6 with a low log-probability, is skipped), above 0 sampling at it. Left out, it
  is 0 (OpenAI's default): the fallback.
- `seed` (this server's field, not OpenAI's; its clients send it as `extra_body`): sampled tries draw from it
  (default 0, transcribe's), so an answer is repeatable, where OpenAI's service is not, and equals
  `transcribe(..., seed=seed)`'s, with chunking_strategy too (each window's sampling starts from the seed,
  so the chunks' order on the server's windows changes nothing).
- `include[]=logprobs` (response_format json): `logprobs` [{token, logprob, bytes}] of the text's tokens, as
  `transcribe(..., logprobs=True)` (the chunks' in order with chunking_strategy); `bytes` are the token's own,
  as OpenAI's (byte-level BPE: a token that is part of a character gives its raw bytes, its text U+FFFD;
  all tokens' bytes together decode to the text: runtime.speech.logprobs.bytes_reader). With `stream=true`, each
  transcript.text.delta carries the logprobs of the tokens it adds (held back with its text while a tokenizer
  rewrites it; those of a window's tokens that add no text come with the next delta), and
  transcript.text.done all of them: the deltas' together.
- verbose_json segments carry OpenAI's fields (id, seek, start, end, text, tokens, temperature,
  avg_logprob, compression_ratio, no_speech_prob) with transformers' values: compression_ratio is that of
  the window's token ids (transformers'), not of its text (openai-whisper's), so the numbers differ from
  OpenAI's service for the same text; temperature is the try that stayed.
- `prompt` goes before every window, as `transcribe`'s prompt (with the folder's condition_on_prev_tokens
  it is the first window's previous text instead, carried on as openai-whisper's initial_prompt).
- `timestamp_granularities[]=word` (verbose_json): `words` [{word, start, end}] as OpenAI's, timed by the export's
  alignment.onnx (runtime.speech.words: transformers' token timestamps); an export without it is a 422.
- `chunking_strategy` (transcriptions): `auto` transcribes only the recording's speech, found by Silero VAD
  with its defaults (runtime.speech.chunks, as `tfm-export transcribe --vad`); OpenAI's server_vad object
  {"type": "server_vad", "threshold", "prefix_padding_ms", "silence_duration_ms"} sets the VAD's threshold,
  padding and the silence that ends speech (JSON text, or the client's `chunking_strategy[threshold]` fields).
  Left out, the recording is transcribed as one block, as OpenAI's. OpenAI normalises loudness first; this
  server does not.
- `stream=true` (transcriptions, json or text): server-sent events, one `transcript.text.delta` per 30 s
  window as it is decoded, then `transcript.text.done` with the whole text.
- errors are this server's `{"error": one line, "field"|"limit"}` (serve.app); a recording the decoder
  cannot read is a 422 naming `file`, one over --max-upload-mb or --max-audio-seconds a 413 naming the limit.

A recording runs on serve.transcriber's worker pool, never on the event loop; its upload is spooled to a
temporary file that is removed when the request ends (serve.upload). The forms are serve.audio_forms'; the answers,
events and their schemas serve.audio_answers'.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from ..errors import AudioTooLong, TfmExportError
from ..runtime.speech.logprobs import logprobs_so_far
from ..runtime.speech.words import GRAPH as ALIGNMENT
from .audio_answers import ANSWERS, ERRORS, FORMATS, logprobs_of, new_logprobs, sse
from .audio_forms import TranscriptionForm, TranslationForm, chunking_parameters, form_fields, request_body
from .engine import ServeSettings, audio_workers
from .schemas import error_responses
from .transcriber import Cancelled, Done, Recording, Transcriber
from .translation import HTTPFailure, failure_from, text_delta
from .upload import spooled_form
from .windows import WindowBatcher

log = logging.getLogger(__name__)

TIMESTAMPED = ("verbose_json", "srt", "vtt")  # formats that show segment times: decoded with timestamps
STREAMED = ("json", "text")  # formats a stream can stand for: events carry text only


def failure_of(exc: BaseException, settings: ServeSettings) -> HTTPFailure:
    """A transcription's library error as an answer: too long 413, unreadable audio 422 naming `file`."""
    if isinstance(exc, AudioTooLong):
        return HTTPFailure(413, f"{exc}; this server's limit is --max-audio-seconds {settings.max_audio_seconds:g}",
                           limit="max_audio_seconds")
    if isinstance(exc, TfmExportError):
        failure = failure_from(exc)
        if failure.status == 422 and "field" not in failure.body:  # the only unnamed input is the audio
            failure.body["field"] = "file"
        return failure
    raise exc  # a bug: FastAPI answers 500 and logs the traceback


def add_audio(app: FastAPI, settings: ServeSettings, state: dict[str, Any]) -> None:
    """The audio routes on `app`, over a worker pool kept in state["transcriber"] (the lifespan closes it)."""
    from ..audio import load_audio  # noqa: F401  # fails here, at start, without the audio extra (ConfigError)

    engine = state["engine"]
    windows = engine if isinstance(engine, WindowBatcher) else None
    transcriber = state["transcriber"] = Transcriber(engine.model, audio_workers(settings), settings.engine.max_queue,
                                                     settings.max_audio_seconds, windows)
    responses = {200: ANSWERS, **error_responses(400, *((401,) if settings.api_key else ()), 413, 422, 429, 503,
                                                 **ERRORS)}

    async def answer(request: Request, form_type: type[BaseModel], task: str) -> Response:
        async with spooled_form(request, int(settings.max_upload_mb * 2**20), settings.upload_dir) as upload:
            form = form_fields(upload.fields, form_type)
            if upload.file_field != "file":
                got = f" (got a file as {upload.file_field})" if upload.file_field else ""
                raise HTTPFailure(422, f"file: send the recording as the form's `file` field{got}", field="file")
            stream = getattr(form, "stream", False)
            words = "word" in getattr(form, "timestamp_granularities", [])
            if words and form.response_format != "verbose_json":  # OpenAI's rule: only verbose_json has words
                raise HTTPFailure(422, "timestamp_granularities[]: word timestamps come with response_format "
                                       f"verbose_json, not {form.response_format}", field="timestamp_granularities[]")
            if words and ALIGNMENT not in engine.model.manifest.graphs:
                raise HTTPFailure(422, "timestamp_granularities[]: this export has no alignment.onnx for word "
                                       "timestamps (export the Whisper folder again)",
                                  field="timestamp_granularities[]")
            logprobs = "logprobs" in getattr(form, "include", [])
            if logprobs and form.response_format != "json":  # OpenAI's rule
                raise HTTPFailure(422, f"include[]: logprobs come with response_format json, not "
                                       f"{form.response_format}", field="include[]")
            if stream and form.response_format not in STREAMED:
                raise HTTPFailure(422, f"stream: a stream carries text; use response_format json or text, not "
                                       f"{form.response_format}", field="stream")
            recording = Recording(str(upload.path), f"the uploaded file {upload.filename!r}",
                                  getattr(form, "language", "") or None, task, form.response_format in TIMESTAMPED,
                                  form.prompt or None, words,
                                  chunking_parameters(getattr(form, "chunking_strategy", None)),
                                  form.temperature, logprobs, form.seed)
            if stream:
                return await streamed(recording, transcriber, state, settings)
            done = await finished(recording, transcriber, request, settings)
            observe(state, done)
            return FORMATS[form.response_format](done, task)

    @app.post("/v1/audio/transcriptions", response_model=None, responses=responses,
              openapi_extra=request_body(TranscriptionForm))
    async def transcriptions(request: Request) -> Response:
        """Speech to text in the spoken language (OpenAI's create transcription)."""
        return await answer(request, TranscriptionForm, "transcribe")

    @app.post("/v1/audio/translations", response_model=None, responses=responses,
              openapi_extra=request_body(TranslationForm))
    async def translations(request: Request) -> Response:
        """Speech to English text (OpenAI's create translation)."""
        return await answer(request, TranslationForm, "translate")


def observe(state: dict[str, Any], done: Done | None) -> None:
    if done is not None and "metrics" in state:
        state["metrics"].audio_seconds.inc(done.seconds)
        state["metrics"].real_time_factor.observe(done.elapsed / max(done.seconds, 1e-9))


def submit(transcriber: Transcriber, recording: Recording, gone: threading.Event,
           on_text: Callable[[str], None] | None = None) -> "asyncio.Future[Done]":
    try:
        return transcriber.submit(recording, on_text, gone.is_set)
    except TfmExportError as exc:  # full (429) or closing (503)
        raise failure_from(exc) from None


async def finished(recording: Recording, transcriber: Transcriber, request: Request, settings: ServeSettings
                   ) -> Done:
    """The transcription, once done; stopped at its next window when the client goes away."""
    gone = threading.Event()
    future = submit(transcriber, recording, gone)
    try:
        while not future.done():
            await asyncio.wait({future}, timeout=0.25)
            if not future.done() and await request.is_disconnected():
                gone.set()
        return future.result()
    except Cancelled:
        raise HTTPFailure(400, "the client went away") from None  # nobody reads it
    except TfmExportError as exc:
        raise failure_of(exc, settings) from None
    finally:
        gone.set()  # a cancelled wait (server shutdown) stops the worker too


async def streamed(recording: Recording, transcriber: Transcriber, state: dict[str, Any],
                   settings: ServeSettings) -> StreamingResponse:
    """Server-sent events of the text as windows are decoded. The first window (or the end) comes before
    the answer starts, so a recording the decoder cannot read is still a 4xx, not an error event."""
    texts: asyncio.Queue = asyncio.Queue()
    gone = threading.Event()
    future = submit(transcriber, recording, gone, lambda text: state["mailbox"].post(texts.put_nowait, text))
    future.add_done_callback(lambda _: texts.put_nowait(None))  # after the texts: both go through the loop
    first = await texts.get()
    if first is None and future.exception() is not None:
        raise failure_of(future.exception(), settings)

    async def events(text: str | None) -> AsyncIterator[str]:
        shown, sent = "", 0  # the text and the logprobs sent so far
        try:
            while text is not None:
                delta, shown = text_delta(text, shown)
                if delta:
                    pieces, sent = new_logprobs(logprobs_so_far(text), sent)
                    yield sse({"type": "transcript.text.delta", "delta": delta, **pieces})
                text = await texts.get()
            done = future.result()
            observe(state, done)
            delta, _ = text_delta(done.result["text"], shown)
            pieces, _ = new_logprobs(done.result.get("logprobs"), sent)
            if delta or pieces.get("logprobs"):
                yield sse({"type": "transcript.text.delta", "delta": delta, **pieces})
            yield sse({"type": "transcript.text.done", "text": done.result["text"], **logprobs_of(done.result)})
        except TfmExportError as exc:
            yield sse({"type": "error", "error": {"message": str(exc)}})
        finally:
            gone.set()  # the client went away (or the stream ended): stop at the next window

    return StreamingResponse(events(first), media_type="text/event-stream")
