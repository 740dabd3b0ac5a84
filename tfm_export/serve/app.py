"""The translation server: FastAPI around one decode engine (serve.batcher). OpenAPI docs at /docs.

    POST /v1/translate  {"texts": [...]} or {"ids": [[...]]}, "max_new_tokens"?, "stream"?
    GET  /healthz       {"status": "ok", ...}
    GET  /metrics       Prometheus text format (serve.metrics)

Every error is JSON `{"error": one line, ...}`: unknown options and bad values 422 (naming them),
a body that is not JSON 400, too many texts or too long a source 413 (naming the limit), a full
queue 429 with Retry-After, shutting down 503, a missing or wrong API key 401.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from ..errors import TfmExportError
from ..runtime.generation import GenerationConfig, Hypothesis
from .batcher import Closed, Job, QueueFull
from .cors import add_cors
from .engine import LimitError, ServeSettings, open_engine, prepare_sources
from .guard import Guard
from .mailbox import Mailbox
from .metrics import CONTENT_TYPE, ServerMetrics

log = logging.getLogger(__name__)

RETRY_AFTER_S = "1"  # a queue drains in about one request's decode time


class TranslateRequest(BaseModel):
    """One request: `texts` (needs the export's tokenizer) or `ids`. Unknown options are refused, so
    decoding options can be added later without old servers silently ignoring them."""

    model_config = ConfigDict(extra="forbid")
    texts: list[str] | None = Field(None, description="Source texts, encoded with the export's tokenizer.")
    ids: list[list[StrictInt]] | None = Field(None, description="Source token ids, used as given.")
    max_new_tokens: StrictInt | None = Field(None, description="Most tokens per source (default: max_len).")
    stream: bool = Field(False, description="Server-sent events: one `token` event per token, then `done`.")
    # Decoding options: runtime.generation.GenerationConfig's fields, same meaning and checks (a bad value
    # is a 422 naming it). Unset ones come from the export's `generation` section, else greedy.
    num_beams: StrictInt | None = Field(None, description="Beam search when > 1 (tokens are sent when it ends).")
    length_penalty: float | None = Field(None, description="Beam search: score = sum(log p) / length ** this.")
    early_stopping: bool | str | None = Field(None, description='Beam search: true, false or "never".')
    num_return_sequences: StrictInt | None = Field(None, description="Hypotheses per source (n-best or samples).")
    do_sample: bool | None = Field(None, description="Sample instead of taking the most likely token.")
    temperature: float | None = Field(None, description="Sampling: logits / temperature.")
    top_k: StrictInt | None = Field(None, description="Sampling: keep the k most likely tokens (0: all).")
    top_p: float | None = Field(None, description="Sampling: nucleus probability in (0, 1].")
    seed: StrictInt | None = Field(None, description="Sampling: the same seed gives the same tokens everywhere.")
    min_new_tokens: StrictInt | None = Field(None, description="EOS is banned before this many tokens.")
    repetition_penalty: float | None = Field(None, description="Penalise tokens already generated (> 1).")
    no_repeat_ngram_size: StrictInt | None = Field(None, description="Never repeat an n-gram of this size.")
    forced_eos: bool | None = Field(None, description="The last allowed token is EOS.")


ACCEPTED = tuple(TranslateRequest.model_fields)
REQUEST_ONLY = ("texts", "ids", "max_new_tokens", "stream")  # the rest are decoding options


class HTTPFailure(Exception):
    """An error answered as JSON: status, one line, extra fields (e.g. the limit's name)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.headers, self.body = status, headers, {"error": message, **extra}


# Library errors as HTTP answers: (status, Retry-After?, the key naming the option in the body);
# anything else is a bad request field (422).
STATUS = {QueueFull: (429, True, "limit"), Closed: (503, True, "limit"), LimitError: (413, False, "limit")}


def failure_from(exc: TfmExportError) -> HTTPFailure:
    """A library error as JSON naming the option or limit by its request/settings name."""
    status, retry, named = STATUS.get(type(exc), (422, False, "field"))
    extra = {named: next(iter(exc.options))} if exc.options else {}
    return HTTPFailure(status, exc.render(lambda key, value=None: key),
                       {"Retry-After": RETRY_AFTER_S} if retry else None, **extra)


def validation_failure(exc: RequestValidationError) -> HTTPFailure:
    """pydantic's error list as one line: unknown options by name, else the first bad field."""
    errors = exc.errors()
    if any(e["type"] == "json_invalid" or tuple(e["loc"]) == ("body",) for e in errors):  # not an object
        return HTTPFailure(400, "the request body must be a JSON object, e.g. {\"texts\": [\"...\"]}")
    unknown = [str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return HTTPFailure(422, f"unknown option(s): {', '.join(unknown)}; this server accepts "
                                f"{', '.join(ACCEPTED)}", fields=unknown)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"] if part != "body") or "body"
    return HTTPFailure(422, f"{where}: {first['msg']}", fields=[where])


class Translation:
    """One request's jobs and the events the decode thread sends back to the event loop."""

    def __init__(self, sources: list[list[int]], max_new_tokens: int, config: GenerationConfig, mailbox: Mailbox):
        self.events: asyncio.Queue = asyncio.Queue()
        self.jobs = [Job(ids, max_new_tokens, self._emitter(mailbox, n), config, row=n) for n, ids in enumerate(sources)]
        self.ids: list[list[int]] = [[] for _ in sources]
        # per source, from its "done" event: None (plain greedy, no score) or its Hypothesis list
        self.hypotheses: list[list[Hypothesis] | None] = [None for _ in sources]
        self.started, self.first_token = time.perf_counter(), None

    def _emitter(self, mailbox: Mailbox, index: int):
        return lambda kind, value: mailbox.post(self.events.put_nowait, (index, kind, value))

    async def events_until_done(self) -> AsyncIterator[tuple[int, str, Any]]:
        """(index, kind, value) until every job is done; raises HTTPFailure on an engine error."""
        pending = len(self.jobs)
        while pending:
            index, kind, value = await self.events.get()
            if kind == "error":
                raise HTTPFailure(500, value)
            if kind == "done":
                pending -= 1
                self.hypotheses[index] = value
            else:
                self.first_token = self.first_token or time.perf_counter()
                self.ids[index].append(value)
            yield index, kind, value

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()


def create_app(settings: ServeSettings, engine: Any = None) -> FastAPI:
    """The app; its lifespan opens the export and starts the engine (or starts `engine` given)."""
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["mailbox"] = Mailbox(asyncio.get_running_loop())
        state["engine"] = engine or open_engine(settings)
        state["engine"].start()
        state["metrics"] = ServerMetrics(state["engine"])
        yield
        # uvicorn has waited for the open requests; close() finishes whatever is still queued
        await asyncio.to_thread(state["engine"].close)

    app = FastAPI(title="tfm-export translation server", lifespan=lifespan)

    _add_error_handling(app, settings, state)
    add_cors(app, settings.cors_origins)  # after the key check: the outermost middleware

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """Liveness: the engine's kind, queue depth and busy rows."""
        live = state["engine"]
        return {"status": "ok", "batching": live.name, "queue_depth": live.queue_depth, "active": live.active}

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text format."""
        return Response(state["metrics"].render(), media_type=CONTENT_TYPE)

    @app.post("/v1/translate")
    async def translate(body: TranslateRequest, request: Request) -> Any:
        """Translate `texts` (or decode `ids`); `"stream": true` answers with server-sent events."""
        live = state["engine"]
        options = body.model_dump(exclude=set(REQUEST_ONLY), exclude_none=True)
        try:
            sources, steps, config = prepare_sources(live.model, settings, body.texts, body.ids,
                                                     body.max_new_tokens, options)
        except TfmExportError as exc:
            raise failure_from(exc) from None
        work = Translation(sources, steps, config, state["mailbox"])
        try:
            live.submit(work.jobs)
        except TfmExportError as exc:
            raise failure_from(exc) from None
        if body.stream:
            return StreamingResponse(_stream(work, live.model, state["metrics"]), media_type="text/event-stream")
        return await _collect(work, live.model, state["metrics"], request)

    return app


def _add_error_handling(app: FastAPI, settings: ServeSettings, state: dict[str, Any]) -> None:
    """JSON errors for our failures and FastAPI's validation, the API key check, request counting."""

    @app.exception_handler(HTTPFailure)
    async def _failure(request: Request, exc: HTTPFailure) -> JSONResponse:
        return JSONResponse(exc.body, exc.status, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _failure(request, validation_failure(exc))

    def count(status: int) -> None:
        if "metrics" in state:  # made when the lifespan starts
            state["metrics"].requests.labels(str(status)).inc()

    app.add_middleware(Guard, api_key=settings.api_key, count=count)


def _results(work: Translation, model: Any) -> dict[str, Any]:
    """Per source: ids (and text); with a score when decoding computed one; n-best under `hypotheses`."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def entry(ids: list[int], score: float | None = None) -> dict[str, Any]:
        return {"ids": ids, **({"text": tokenizer.decode(ids)} if tokenizer else {}),
                **({"score": score} if score is not None else {})}

    rows = []
    for ids, hyps in zip(work.ids, work.hypotheses):
        row = entry(ids, hyps[0].score if hyps else None)
        if hyps and len(hyps) > 1:
            row["hypotheses"] = [entry(h.ids, h.score) for h in hyps]
        rows.append(row)
    return {"translations": rows}


def _observe(work: Translation, metrics: ServerMetrics) -> None:
    now = time.perf_counter()
    metrics.latency.observe(now - work.started)
    metrics.first_token.observe((work.first_token or now) - work.started)


async def _collect(work: Translation, model: Any, metrics: ServerMetrics, request: Request) -> dict[str, Any]:
    """Wait for every job; a client that disconnects meanwhile frees its rows."""
    events = work.events_until_done()
    waiting = asyncio.ensure_future(_drain(events))
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=0.25)
            if not waiting.done() and await request.is_disconnected():
                work.cancel()
                waiting.cancel()
                return {}
        waiting.result()
    finally:
        if not waiting.done():
            waiting.cancel()
    _observe(work, metrics)
    return _results(work, model)


async def _drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def _stream(work: Translation, model: Any, metrics: ServerMetrics) -> AsyncIterator[str]:
    """Server-sent events: `token` {index, id, text} per token (text: what it adds), then `done`."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None
    shown = [""] * len(work.jobs)  # text sent so far per source
    pending: list[str] = []  # events not written yet: a burst of tokens goes out in one write
    try:
        async for index, kind, value in work.events_until_done():
            if kind == "token":
                event: dict[str, Any] = {"index": index, "id": value}
                if tokenizer:
                    event["text"], shown[index] = _delta(tokenizer.decode(work.ids[index]), shown[index])
                pending.append(f"event: token\ndata: {json.dumps(event, ensure_ascii=False)}\n\n")
            if pending and work.events.empty():
                yield "".join(pending)
                pending.clear()
        _observe(work, metrics)
        yield f"event: done\ndata: {json.dumps(_results(work, model), ensure_ascii=False)}\n\n"
    except HTTPFailure as exc:
        yield f"event: error\ndata: {json.dumps(exc.body)}\n\n"
    finally:  # the client went away (or the stream ended): free whatever is still decoding
        work.cancel()


def _delta(text: str, shown: str) -> tuple[str, str]:
    """What `text` adds to what was sent; nothing while a tokenizer rewrites earlier characters."""
    return (text[len(shown):], text) if text.startswith(shown) else ("", shown)
