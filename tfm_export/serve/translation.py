"""One translation request on its way through an engine, and its answers: the jobs submitted, the
events coming back from the decode thread, the JSON answer or the server-sent events, and library
errors as HTTP failures. Shared by the native API (serve.app) and LibreTranslate's (serve.libretranslate).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, AsyncIterator

from fastapi import Request

from ..errors import TfmExportError
from ..runtime.options.generation import GenerationConfig, Hypothesis
from .batcher import Closed, Job, QueueFull
from .engine import LimitError
from .jobs import DecodeFailed
from .mailbox import Mailbox
from .metrics import ServerMetrics

RETRY_AFTER_S = "1"  # a queue drains in about one request's decode time


class HTTPFailure(Exception):
    """An error answered as JSON: status, one line, extra fields (e.g. the limit's name)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.headers, self.body = status, headers, {"error": message, **extra}


# Library errors as HTTP answers: (status, Retry-After?, the key naming the option in the body);
# anything else is a bad request field (422).
STATUS = {QueueFull: (429, True, "limit"), Closed: (503, True, "limit"), LimitError: (413, False, "limit"),
          DecodeFailed: (500, False, "limit")}


def request_field(key: str, value: Any = None) -> str:
    """How an answer names an option: the request's field, with the value it was given (`language 'xx'`)."""
    return key if value is None else f"{key} {value!r}"


def failure_from(exc: TfmExportError) -> HTTPFailure:
    """A library error as JSON naming the option or limit by its request/settings name."""
    status, retry, named = STATUS.get(type(exc), (422, False, "field"))
    extra = {named: next(iter(exc.options))} if exc.options else {}
    return HTTPFailure(status, exc.render(request_field),
                       {"Retry-After": RETRY_AFTER_S} if retry else None, **extra)


class Translation:
    """One request's jobs and the events the decode thread sends back to the event loop. An empty
    source (an empty text, see engine.prepare_sources) gets no job: its translation is empty now."""

    def __init__(self, sources: list[list[int]], max_new_tokens: int, config: GenerationConfig, mailbox: Mailbox):
        self.events: asyncio.Queue = asyncio.Queue()
        self.jobs = [Job(ids, max_new_tokens, self._emitter(mailbox, n), config, row=n)
                     for n, ids in enumerate(sources) if ids]
        self.ids: list[list[int]] = [[] for _ in sources]
        # per source, from its "done" event: None (plain greedy, no score) or its Hypothesis list;
        # an empty source's n-best is num_return_sequences empty hypotheses (no score: nothing decoded)
        nothing = [Hypothesis([], math.nan)] * config.num_return_sequences if config.num_return_sequences > 1 else None
        self.hypotheses: list[list[Hypothesis] | None] = [None if ids else nothing for ids in sources]
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

    def best(self) -> list[list[Hypothesis]]:
        """Per source, its hypotheses best first (a plain greedy job's ids without a score: nan)."""
        return [hyps or [Hypothesis(ids, math.nan)] for ids, hyps in zip(self.ids, self.hypotheses)]


def submit(engine: Any, mailbox: Mailbox, sources: list[list[int]], steps: int,
           config: GenerationConfig) -> Translation:
    """The sources' jobs queued on the engine; HTTPFailure when it refuses them (full, closing)."""
    work = Translation(sources, steps, config, mailbox)
    if not work.jobs:  # only empty texts: answered without the engine
        return work
    try:
        engine.submit(work.jobs)
    except TfmExportError as exc:
        raise failure_from(exc) from None
    return work


def results(work: Translation, model: Any) -> dict[str, Any]:
    """Per source: ids (and text); with a score when decoding computed one; n-best under `hypotheses`."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def entry(ids: list[int], score: float | None = None) -> dict[str, Any]:
        # a score of -inf (every candidate banned) has no JSON form: it is left out like a missing one
        return {"ids": ids, **({"text": tokenizer.decode(ids)} if tokenizer else {}),
                **({"score": score} if score is not None and math.isfinite(score) else {})}

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


async def collect(work: Translation, metrics: ServerMetrics, request: Request) -> bool:
    """Wait for every job (True), or until the client disconnects (False): that frees its rows."""
    events = work.events_until_done()
    waiting = asyncio.ensure_future(_drain(events))
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=0.25)
            if not waiting.done() and await request.is_disconnected():
                work.cancel()
                waiting.cancel()
                return False
        waiting.result()
    finally:
        if not waiting.done():
            waiting.cancel()
    _observe(work, metrics)
    return True


async def _drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def stream(work: Translation, model: Any, metrics: ServerMetrics) -> AsyncIterator[str]:
    """Server-sent events: `token` {index, id, text} per token (text: what it adds), then `done`."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None
    shown = [""] * len(work.ids)  # text sent so far per source
    pending: list[str] = []  # events not written yet: a burst of tokens goes out in one write
    try:
        async for index, kind, value in work.events_until_done():
            if kind == "token":
                event: dict[str, Any] = {"index": index, "id": value}
                if tokenizer:
                    event["text"], shown[index] = text_delta(tokenizer.decode(work.ids[index]), shown[index])
                pending.append(f"event: token\ndata: {json.dumps(event, ensure_ascii=False)}\n\n")
            if pending and work.events.empty():
                yield "".join(pending)
                pending.clear()
        _observe(work, metrics)
        yield f"event: done\ndata: {json.dumps(results(work, model), ensure_ascii=False)}\n\n"
    except HTTPFailure as exc:
        yield f"event: error\ndata: {json.dumps(exc.body)}\n\n"
    finally:  # the client went away (or the stream ended): free whatever is still decoding
        work.cancel()


def text_delta(text: str, shown: str) -> tuple[str, str]:
    """What `text` adds to what was sent; nothing while a tokenizer rewrites earlier characters."""
    return (text[len(shown):], text) if text.startswith(shown) else ("", shown)
