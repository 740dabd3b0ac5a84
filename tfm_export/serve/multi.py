"""A server of several exports (`tfm-export serve A B C`): a one-export server's text routes, each request
run on the export serve.registry picks for it, with that export's engine and limits.

    POST /v1/translate   as one export's (serve.app), the export named by `model` or chosen by
                         source_lang/target_lang; through the pivot language (two exports) for `texts`,
                         not streamed: the first leg's best translation is the second's source, and the
                         answer is the second leg's (n-best there only)
    POST /translate      LibreTranslate's (serve.libretranslate), chosen by source and target (or `model`);
                         pivoting likewise (`alternatives` from the second leg); source "auto" detects
                         q's language among the codes that reach the target (text.detect)
    GET  /languages      every code, with the targets it reaches directly or through the pivot
    POST /detect, /translate_file, GET /frontend/settings, /download_file/{name}
                         LibreTranslate's other routes, as one export's (serve.libretranslate_routes) over
                         every export's codes (serve.libretranslate_served): /detect among every source
                         code, a file to the export(s) /translate would pick (through the pivot likewise)
    POST /v1/score       CTranslate2's score_batch (serve.ct2), with the export `model` names or the one that
                         translates source_lang into target_lang directly (no pivot)
    GET  /v1/models      every export; /v1/models/{model} one by name or alias (404 otherwise)
    GET  /healthz        the engines together, and `loaded`: the exports open now
    GET  /metrics        the engines together

An unknown `model` is a 422 naming `model` (LibreTranslate: 400), a pair no export reaches a 422 naming
target_lang (400), an export that cannot be opened when first needed a 503. Exports open on first use and
close when idle (--idle-unload) or beyond --max-loaded (serve.registry).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi import Path as PathParameter
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field

from ..errors import TfmExportError
from ..text import detect, markup
from .app import STREAM_DOC, _add_error_handling, _refuse_other_kind, answer_translate
from .contract import add_security
from .cors import add_cors
from .ct2 import ScoreRequest, ScoreResponse, answer_score
from .engine import ServeSettings
from .guard import body_limit
from .libretranslate import ANSWER, translate_params
from .libretranslate_params import codes_of, keyed_params
from .libretranslate_routes import add_routes as add_libretranslate_routes
from .libretranslate_served import Served, Translator, leased, registry_served
from .mailbox import Mailbox
from .metrics import CONTENT_TYPE, ServerMetrics
from .model_list import ModelCard, ModelList
from .catalog import Leg
from .registry import ModelRegistry
from .schemas import Language, TranslateRequest, error_responses
from .translation import HTTPFailure, failure_from


class MultiHealth(BaseModel):
    status: str = "ok"
    batching: str = Field(description="multi: each export has its own engine.")
    queue_depth: int = Field(description="Sources waiting for a row, every export's.")
    active: int = Field(description="Rows decoding now, every export's.")
    loaded: list[str] = Field(description="The exports open now (GET /v1/models lists every one).")


def create_multi_app(settings: ServeSettings, registry: ModelRegistry) -> FastAPI:
    """The app over `registry`'s exports; its lifespan sweeps idle engines and closes every one at the end."""
    state: dict[str, Any] = {"engine": registry}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["mailbox"] = Mailbox(asyncio.get_running_loop())
        state["metrics"] = ServerMetrics(registry)
        watcher = asyncio.ensure_future(registry.watch())
        yield
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await registry.close()

    app = FastAPI(title="tfm-export translation server (several exports)", lifespan=lifespan)
    longest = max(export.src_len for export in registry.exports)
    _add_error_handling(app, settings, state, body_limit(settings.max_texts, longest))
    add_cors(app, settings.cors_origins)
    keyed = (401,) if settings.api_key else ()

    @app.get("/healthz", response_model=MultiHealth)
    async def healthz() -> dict[str, Any]:
        """Liveness: queue depth and busy rows of every open engine, and which exports are open."""
        return {"status": "ok", "batching": registry.name, "queue_depth": registry.queue_depth,
                "active": registry.active, "loaded": registry.loaded()}

    @app.get("/metrics", response_class=Response, responses=error_responses(*keyed))
    async def metrics() -> Response:
        """Prometheus text format, every export's engine together."""
        return Response(state["metrics"].render(), media_type=CONTENT_TYPE)

    _add_models(app, registry, keyed)
    _add_translate(app, settings, state, registry, keyed)
    _add_score(app, settings, state, registry, keyed)
    served = registry_served(registry, state)
    _add_libretranslate(app, settings, state, registry, served)
    add_libretranslate_routes(app, settings, state, served)  # /detect, /translate_file, /frontend/settings
    _refuse_other_kind(app, False)
    _install_openapi(app, registry, settings)
    return app


def _add_models(app: FastAPI, registry: ModelRegistry, keyed: tuple[int, ...]) -> None:
    cards = {e.name: ModelCard(id=e.name, created=e.created) for e in registry.exports}

    @app.get("/v1/models", response_model=ModelList, responses=error_responses(*keyed))
    async def list_models() -> ModelList:
        """Every export this server serves (OpenAI's list models), opened or not."""
        return ModelList(data=list(cards.values()))

    @app.get("/v1/models/{model:path}", response_model=ModelCard, responses=error_responses(*keyed, 404))
    async def retrieve_model(model: str = PathParameter(description="An export's name (GET /v1/models).")) -> ModelCard:
        """One export, by its name or an alias (OpenAI's retrieve model)."""
        try:
            return cards[registry.find(model).name]
        except TfmExportError as exc:
            raise HTTPFailure(404, str(exc), field="model") from None


def _legs(registry: ModelRegistry, model: str | None, source: str | None, target: str | None) -> list[Leg]:
    try:
        return registry.pick(model, source, target)
    except TfmExportError as exc:
        raise failure_from(exc) from None


def _add_translate(app: FastAPI, settings: ServeSettings, state: dict[str, Any], registry: ModelRegistry,
                   keyed: tuple[int, ...]) -> None:
    @app.post("/v1/translate", response_model=None, responses={
        200: STREAM_DOC, **error_responses(400, *keyed, 413, 422, 429, 500, 503)})
    async def translate(body: TranslateRequest, request: Request) -> Any:
        """Translate `texts` (or decode `ids`) with the export `model` names, or the one(s) that translate
        source_lang into target_lang; `"stream": true` answers with server-sent events (one export)."""
        legs = _legs(registry, body.model, body.source_lang, body.target_lang)
        if len(legs) == 1:
            return await _one_leg(registry, state, settings, body.model_copy(update=_codes(legs[0])), legs[0],
                                  request)
        if body.texts is None or body.stream:
            given = ["ids"] if body.texts is None else ["stream"]
            raise HTTPFailure(422, f"{given[0]}: no export translates {body.source_lang!r} into {body.target_lang!r} "
                                   f"directly; through {registry.pivot!r} this server takes texts, not streamed",
                              fields=given)
        first, second = legs
        async with leased(registry, state, first) as leg_state:  # its best translation only: n-best at the end
            middle = await answer_translate(leg_state, settings, body.model_copy(
                update={**_codes(first), **_last_leg_only(body)}), request)
        if not middle:
            return {}  # the client went away
        texts = [row["text"] for row in middle["translations"]]
        async with leased(registry, state, second) as leg_state:
            return await answer_translate(leg_state, settings, body.model_copy(
                update={**_codes(second), "texts": texts}), request)


def _add_score(app: FastAPI, settings: ServeSettings, state: dict[str, Any], registry: ModelRegistry,
               keyed: tuple[int, ...]) -> None:
    @app.post("/v1/score", response_model=ScoreResponse, responses=error_responses(400, *keyed, 413, 422, 500, 503))
    async def score(body: ScoreRequest) -> dict[str, Any]:
        """CTranslate2's score_batch with the export `model` names, or the one that translates source_lang into
        target_lang directly (through the pivot no one export scores the pair)."""
        legs = _legs(registry, body.model, body.source_lang, body.target_lang)
        if len(legs) > 1:
            raise HTTPFailure(422, f"target_lang: no export translates {body.source_lang!r} into {body.target_lang!r} "
                                   "directly, and scoring takes one export", field="target_lang")
        async with leased(registry, state, legs[0]) as leg_state:
            return await answer_score(leg_state, settings, body.model_copy(update=_codes(legs[0])))


# What only the pivot's second leg is asked for (the n-best, a target's prefix, alternatives), and the
# first leg's value instead; a field this server's request has not is left out.
LAST_LEG_ONLY = {"num_return_sequences": None, "target_prefix": None, "return_alternatives": False}


def _last_leg_only(body: Any) -> dict[str, Any]:
    return {name: value for name, value in LAST_LEG_ONLY.items() if name in type(body).model_fields}


def _codes(leg: Leg) -> dict[str, Any]:
    return {"source_lang": leg.source, "target_lang": leg.target, "model": None}


async def _one_leg(registry: ModelRegistry, state: dict[str, Any], settings: ServeSettings, body: Any, leg: Leg,
                   request: Request) -> Any:
    """One export's answer; a stream holds its engine until the last event."""
    stack = AsyncExitStack()
    leg_state = await stack.enter_async_context(leased(registry, state, leg))
    try:
        reply = await answer_translate(leg_state, settings, body, request)
    except BaseException:
        await stack.aclose()
        raise
    if isinstance(reply, StreamingResponse):
        reply.body_iterator = _then_release(reply.body_iterator, stack)
    else:
        await stack.aclose()
    return reply


async def _then_release(events: AsyncIterator[Any], stack: AsyncExitStack) -> AsyncIterator[Any]:
    try:
        async for event in events:
            yield event
    finally:
        await stack.aclose()


def _add_libretranslate(app: FastAPI, settings: ServeSettings, state: dict[str, Any], registry: ModelRegistry,
                        served: Served) -> None:
    @app.get("/languages", response_model=list[Language])
    async def languages() -> list[dict[str, Any]]:
        """Every code of every export, with the targets it reaches (directly or through the pivot)."""
        return registry.languages()

    @app.post("/translate", response_model=None, responses={
        200: {"description": "The translation(s).", "content": {"application/json": {"schema": ANSWER}}},
        **error_responses(400, *((403,) if settings.api_key else ()), 429, 500, 503)})
    async def translate(request: Request) -> Any:
        """LibreTranslate's translate: `q` from `source` into `target` (GET /languages), with the export
        that translates them (or the one `model` names)."""
        params = await keyed_params(request, settings.api_key)
        source, target = codes_of(params)
        model = params.get("model")
        if model is not None and not isinstance(model, str):
            raise HTTPFailure(400, "Invalid request: model must be a text (GET /v1/models)")
        detected = None
        if source == "auto" and model is None:  # the texts' language among the sources that reach target
            detected = await asyncio.to_thread(_detect, served.candidates(target, None), params)
            params = {**params, "source": detected["language"]}
        translator = served.translator(None if params["source"] == "auto" else params["source"], target, model)
        reply = await _libre_legs(settings, params, translator, request)
        if detected is not None and reply:
            reply["detectedLanguage"] = [detected] * len(params["q"]) if isinstance(params["q"], list) else detected
        return reply


def _detect(codes: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """LibreTranslate's detectedLanguage for source "auto": the language of q (its text nodes for markup)
    among `codes`, those from which target is reached (text.detect)."""
    q, form = params.get("q"), params.get("format") or "text"
    texts = q if isinstance(q, list) else [q]
    if not q or not all(isinstance(text, str) for text in texts):
        raise HTTPFailure(400, "Invalid request: missing q parameter" if not q else
                          "Invalid request: q must be a text or a list of texts")
    if form not in markup.FORMATS:
        raise HTTPFailure(400, f"{form} format is not supported: send text, html or markdown")
    plain = texts if form == "text" else [markup.plain_text(text, form) for text in texts]
    return detect.detect_many(plain, codes, codes[0])


async def _libre_legs(settings: ServeSettings, params: dict[str, Any], translator: Translator,
                      request: Request) -> Any:
    """One export's answer, or the pivot's: a leg's best translation is the next one's q (alternatives at the
    last leg only)."""
    reply, last = None, len(translator.legs) - 1
    for index, (opened, source, target) in enumerate(translator.legs):
        asked = params if not index else {**params, "q": reply["translatedText"], "source": source}
        if index < last:
            asked = {**asked, "target": target, "alternatives": 0}
        async with opened() as leg_state:
            reply = await translate_params(leg_state, settings, asked, request)
        if not reply:
            return {}  # the client went away
    return reply


def _install_openapi(app: FastAPI, registry: ModelRegistry, settings: ServeSettings) -> None:
    """The schema with `model`'s names (and the API key's bearer scheme)."""
    generate = app.openapi
    names = [n for e in registry.exports for n in (e.name, *e.aliases)]

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for request in ("TranslateRequest", "ScoreRequest"):
                props = schema["components"]["schemas"][request]["properties"]
                props["model"] = {**{k: v for k, v in props["model"].items() if k in ("title", "description")},
                                  "anyOf": [{"type": "string", "enum": names}, {"type": "null"}]}
            if settings.api_key:
                add_security(schema)
        return app.openapi_schema

    app.openapi = openapi
