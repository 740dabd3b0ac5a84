"""The translation server: FastAPI around one decode engine (serve.batcher). OpenAPI docs at /docs.

    POST /v1/translate  {"texts": [...]} or {"ids": [[...]]}, "source_lang"?, "target_lang"?,
                        "max_new_tokens"?, "stream"?, decoding options (serve.schemas.TranslateRequest)
    POST /v1/score      CTranslate2's score_batch (serve.ct2; /v1/translate takes its target_prefix too)
    POST /translate     LibreTranslate's API (serve.libretranslate), with GET /languages
    POST /v1/audio/transcriptions, /v1/audio/translations   OpenAI's audio API (serve.audio)
    GET  /v1/realtime?intent=transcription   OpenAI's Realtime transcription, a WebSocket (serve.realtime)
    GET  /v1/models     OpenAI's model list: the one export served (serve.model_list)
    GET  /healthz       {"status": "ok", ...}
    GET  /metrics       Prometheus text format (serve.metrics)

A server serves one export: a text model's has the text routes, a Whisper export's the audio routes, and
each answers the other kind's routes with a 400 saying which model it serves (OTHER_KIND).

Every error is JSON `{"error": one line, ...}`: unknown options and bad values 422 (naming them;
num_beams or num_return_sequences above max_beams too: every value the schema refuses but the size
limits'), a body that is not a JSON object 400, too many texts, too long a source or too many decoder
rows (sources x beams) 413 (naming the limit), a full queue 429 with Retry-After, shutting down 503, a
missing or wrong API key 401 (LibreTranslate: 400/403/429, its own statuses). /openapi.json declares
each of them, with the limits of the model being served (serve.contract). An empty text is
translated into an empty text without decoding.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from ..errors import TfmExportError
from .audio import add_audio
from .contract import install_openapi, served_name
from .contract_ct2 import CONSTRAINTS as CT2_CONSTRAINTS
from .cors import add_cors
from .ct2 import add_score, translate_prefixed, wants_prefix
from .documents import document_results, translate_documents
from .engine import ServeSettings, limits, open_engine, prepare_sources
from .guard import BodyTooLarge, Guard, body_limit
from .libretranslate import add_libretranslate
from .libretranslate_routes import add_routes as add_libretranslate_routes
from .libretranslate_served import engine_served
from .mailbox import Mailbox
from .metrics import CONTENT_TYPE, ServerMetrics
from .model_list import add_model_list
from .realtime import add_realtime
from .schemas import (ACCEPTED, REQUEST_ONLY, STREAM_EVENT, Health, TranslateRequest, TranslateResponse,
                      error_responses)
from .translation import HTTPFailure, collect, failure_from, results, stream, submit

log = logging.getLogger(__name__)

# is the export a speech model -> the routes of the other kind, and what they answer there
OTHER_KIND = {
    False: ({"/v1/audio/transcriptions": "POST", "/v1/audio/translations": "POST"},
            "this export is a text model; the audio routes need a Whisper export served on its own "
            "(tfm-export serve WHISPER_EXPORT); send text to POST /v1/translate"),
    True: ({"/v1/translate": "POST", "/translate": "POST", "/languages": "GET"},
           "this export is a speech model (Whisper); send audio to POST /v1/audio/transcriptions or "
           "/v1/audio/translations, and serve a text model on its own server for text"),
}

# pydantic's messages for fields with several accepted types name each type tried; this says it once
REQUIREMENTS = {"early_stopping": 'must be true, false or "never"'}


def validation_failure(exc: RequestValidationError, content_type: str) -> HTTPFailure:
    """pydantic's error list as one line: unknown options by name, else the first bad field."""
    errors = exc.errors()
    if any(e["type"] == "json_invalid" or tuple(e["loc"]) == ("body",) for e in errors):  # not an object
        if content_type and "json" not in content_type:
            return HTTPFailure(400, f"send the body as JSON with Content-Type: application/json (got {content_type})")
        return HTTPFailure(400, "the request body must be a JSON object, e.g. {\"texts\": [\"...\"]}")
    unknown = [str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return HTTPFailure(422, f"unknown option(s): {', '.join(unknown)}; this server accepts "
                                f"{', '.join(ACCEPTED)}", fields=unknown)
    loc = [part for part in errors[0]["loc"] if part != "body"]
    # the field, then list indices; union branches ("bool", "literal['never']") are not where it is
    where = ".".join(str(part) for part in loc[:1] + [p for p in loc[1:] if isinstance(p, int)]) or "body"
    return HTTPFailure(422, f"{where}: {REQUIREMENTS.get(where, errors[0]['msg'])}", fields=[where])


def create_app(settings: ServeSettings, engine: Any = None) -> FastAPI:
    """The app over `engine` (default: opened from `settings` here); its lifespan starts the engine
    and closes it. The model is open before the app exists, so /openapi.json states its limits."""
    engine = engine or open_engine(settings)
    state: dict[str, Any] = {"engine": engine}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["mailbox"] = Mailbox(asyncio.get_running_loop())
        engine.start()
        state["metrics"] = ServerMetrics(engine)
        yield
        # uvicorn has waited for the open requests; close() finishes whatever is still queued: the
        # recordings first, whose windows the engine may still be decoding
        if "transcriber" in state:
            await asyncio.to_thread(state["transcriber"].close)
        await asyncio.to_thread(engine.close)

    app = FastAPI(title="tfm-export translation server", lifespan=lifespan)
    bounds = limits(engine.model, settings)
    _add_error_handling(app, settings, state, body_limit(bounds.max_texts, bounds.src_len))
    add_cors(app, settings.cors_origins)  # after the key check: the outermost middleware
    keyed = (401,) if settings.api_key else ()

    @app.get("/healthz", response_model=Health)
    async def healthz() -> dict[str, Any]:
        """Liveness: the engine's kind, queue depth and busy rows."""
        return {"status": "ok", "batching": engine.name, "queue_depth": engine.queue_depth, "active": engine.active}

    @app.get("/metrics", response_class=Response, responses={
        200: {"description": "Prometheus text format.", "content": {"text/plain": {"schema": {"type": "string"}}}},
        **error_responses(*keyed)})
    async def metrics() -> Response:
        """Prometheus text format."""
        return Response(state["metrics"].render(), media_type=CONTENT_TYPE)

    add_model_list(app, settings)
    speech = engine.model.manifest.features is not None
    if speech:
        add_audio(app, settings, state)
        add_realtime(app, settings, state)  # after add_audio: it shares its workers
    else:
        _add_translate(app, settings, state)
        add_score(app, settings, state)
        add_libretranslate(app, settings, state)
        add_libretranslate_routes(app, settings, state, engine_served(state))  # /detect, /translate_file, ...
    _refuse_other_kind(app, speech)
    install_openapi(app, engine.model, settings, CT2_CONSTRAINTS)
    return app


def _refuse_other_kind(app: FastAPI, speech: bool) -> None:
    """The other kind's routes answer 400 with what this server serves (left out of its schema)."""
    routes, message = OTHER_KIND[speech]

    async def refuse() -> None:
        raise HTTPFailure(400, message)

    for path, method in routes.items():
        app.add_api_route(path, refuse, methods=[method], include_in_schema=False)


def _add_translate(app: FastAPI, settings: ServeSettings, state: dict[str, Any]) -> None:
    """POST /v1/translate over the engine in state["engine"]."""
    keyed = (401,) if settings.api_key else ()
    name = served_name(settings.folder)

    @app.post("/v1/translate", response_model=None, responses={
        200: STREAM_DOC, **error_responses(400, *keyed, 413, 422, 429, 500, 503)})
    async def translate(body: TranslateRequest, request: Request) -> Any:
        """Translate `texts` (or decode `ids`); `"stream": true` answers with server-sent events."""
        if body.model is not None and body.model != name:
            raise HTTPFailure(422, f"model: no model {body.model!r}; this server serves {name!r} (GET /v1/models)",
                              field="model")
        return await answer_translate(state, settings, body, request)


STREAM_DOC = {"description": "The translations (JSON), or with `stream` server-sent events: `token` "
                             "{index, id, text?} per token, then `done` (the JSON answer) or `error`.",
              "model": TranslateResponse, "content": {"text/event-stream": {"schema": STREAM_EVENT}}}


async def answer_translate(state: dict[str, Any], settings: ServeSettings, body: Any, request: Request) -> Any:
    """POST /v1/translate's answer to `body` from the engine in state["engine"] (a server of several exports,
    serve.multi, runs it on the export it picks, once per leg when it pivots); {} when the client went away."""
    engine = state["engine"]
    if wants_prefix(body):  # CTranslate2's target_prefix / return_alternatives (serve.ct2)
        return await translate_prefixed(state, settings, body)
    options = body.model_dump(exclude=set(REQUEST_ONLY), exclude_none=True)
    if body.split_sentences and body.texts is not None:
        return await _translate_split(state, settings, body, options, request)
    try:
        sources, steps, config = prepare_sources(engine.model, settings, body.texts, body.ids, body.max_new_tokens,
                                                 options, body.source_lang, body.target_lang)
    except TfmExportError as exc:
        raise failure_from(exc) from None
    work = submit(engine, state["mailbox"], sources, steps, config)
    if body.stream:
        return StreamingResponse(stream(work, engine.model, state["metrics"]), media_type="text/event-stream")
    if not await collect(work, state["metrics"], request):
        return {}  # the client went away: nobody reads this
    return results(work, engine.model)


async def _translate_split(state: dict[str, Any], settings: ServeSettings, body: Any, options: dict[str, Any],
                           request: Request) -> Any:
    """split_sentences: the texts as documents (serve.documents)."""
    if body.stream:
        raise HTTPFailure(422, "split_sentences answers once the documents are translated; drop stream",
                          fields=["split_sentences", "stream"])
    try:
        rendered = await translate_documents(state, settings, body.texts, body.max_new_tokens, options,
                                             body.source_lang, body.target_lang, request)
    except TfmExportError as exc:
        raise failure_from(exc) from None
    return {} if rendered is None else document_results(rendered)


def _add_error_handling(app: FastAPI, settings: ServeSettings, state: dict[str, Any], max_body: int | None) -> None:
    """JSON errors for our failures, FastAPI's validation and Starlette's 404/405, the API key check,
    request counting, bodies up to `max_body` bytes (serve.guard)."""

    @app.exception_handler(HTTPFailure)
    async def _failure(request: Request, exc: HTTPFailure) -> JSONResponse:
        return JSONResponse(exc.body, exc.status, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _failure(request, validation_failure(exc, request.headers.get("content-type", "")))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:  # unknown paths, methods (Allow)
        if isinstance(exc, BodyTooLarge):  # a chunked body past the limit (serve.guard)
            return JSONResponse({"error": exc.detail, "limit": "max_body_bytes"}, exc.status_code)
        return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}"}, exc.status_code,
                            exc.headers)

    def count(status: int) -> None:
        if "metrics" in state:  # made when the lifespan starts
            state["metrics"].requests.labels(str(status)).inc()

    app.add_middleware(Guard, api_key=settings.api_key, count=count, max_body=max_body)
