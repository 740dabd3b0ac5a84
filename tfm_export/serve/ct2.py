"""CTranslate2's decoding API on the server: /v1/translate's `target_prefix` and `return_alternatives`, and
POST /v1/score (score_batch).

    POST /v1/translate {"texts": [...], "target_prefix": ["Das", ...] or [[ids], ...], "return_alternatives"?,
                        "num_return_sequences"?}
    POST /v1/score     {"texts": [...] or "ids": [[...]], "targets": [...] or "target_ids": [[...]]}
                       -> {"scores": [{"tokens", "log_probs", "score", "normalized_score"}, ...]}

Both decode on the served model directly (runtime.decode.prefix, runtime.decode.scoring) in a worker thread,
not through the in-flight batcher, whose rows join and leave one token at a time and have no forced prompt: a
request with a prefix or alternatives waits for none of the batcher's and is not batched with them. The limits
hold as for any request (max_texts, the source length, max_rows for the alternatives' rows); the library's
errors are answered as every route answers them (serve.translation.failure_from). Alternatives decode greedily
(a request asking for beams or sampling with them is a 422). With `"stream": true` the answer is decoded first,
then sent as the plain stream's events (each source's best ids as `token` events, then `done`). Both are in
/openapi.json (serve.contract_ct2).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, AsyncIterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import TfmExportError
from .contract import served_name
from .engine import LimitError, ServeSettings, limits, naming, prepare_sources
from .schemas import REQUEST_ONLY, error_responses, integer
from .translation import HTTPFailure, failure_from, text_delta


class ScoreRequest(BaseModel):
    """Sources and the translations to score: one target per source, texts or ids on each side."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = Field(None, description=(
        "The export to score with (GET /v1/models); a server of several exports otherwise picks it by "
        "source_lang and target_lang (one export: no pivot), a server of one takes its own name only."))
    texts: list[str] | None = Field(None, description="Source texts (not empty), encoded with the export's tokenizer.")
    ids: list[list[integer()]] | None = Field(None, description="Source token ids, used as given.")
    targets: list[str] | None = Field(None, description=(
        "Translations to score, one per source (text, encoded with the target tokenizer; a multilingual model's "
        "forced first token is put in front, as its translations have it)."))
    target_ids: list[list[integer()]] | None = Field(None, description=(
        "Translations as target ids, one per source, without EOS (it is appended and scored)."))
    source_lang: str | None = Field(None, description="Language code of the texts (GET /languages lists them).")
    target_lang: str | None = Field(None, description="Language code of the targets (its forced first token).")


class Score(BaseModel):
    tokens: list[int] = Field(description="The scored target ids: the target, then EOS.")
    log_probs: list[float] = Field(description="log P(token | source, the tokens before it), one per token.")
    score: float = Field(description="Their sum: log P(target | source).")
    normalized_score: float = Field(description="Their mean (minus transformers' loss of these labels).")


class ScoreResponse(BaseModel):
    scores: list[Score] = Field(description="One per source, in order.")


def wants_prefix(body: Any) -> bool:
    """Whether a /v1/translate body asks for CTranslate2's prefix or alternatives (this module answers it)."""
    return getattr(body, "target_prefix", None) is not None or bool(getattr(body, "return_alternatives", False))


async def translate_prefixed(state: dict[str, Any], settings: ServeSettings, body: Any) -> dict[str, Any]:
    """/v1/translate with `target_prefix` or `return_alternatives`: the answer of serve.translation.results."""
    if body.split_sentences:
        raise HTTPFailure(422, "target_prefix and return_alternatives translate each text as one sentence; drop "
                               "split_sentences", fields=["split_sentences", "target_prefix"])
    model = state["engine"].model
    options = body.model_dump(exclude=set(REQUEST_ONLY), exclude_none=True)
    count = options.pop("num_return_sequences", 1) if body.return_alternatives else None
    if count is not None:
        options.update(_greedy(body))
    try:
        sources, steps, config = prepare_sources(model, settings, body.texts, body.ids, body.max_new_tokens, options,
                                                 body.source_lang, body.target_lang)
        if count is not None and len(sources) * count > limits(model, settings).max_rows:
            raise LimitError(f"{len(sources)} sources x {count} alternatives exceed the limit of "
                             f"{limits(model, settings).max_rows} decoder rows per request ({{max_rows}})",
                             options={"max_rows": None})
        with naming("target_prefix"):
            prefixes = _prefixes(model, body.target_prefix, len(sources))
        rows = await asyncio.to_thread(_decode, model, sources, prefixes, config, steps, count)
    except TfmExportError as exc:
        raise failure_from(exc) from None
    answer = {"translations": [_row(model, hyps) for hyps in rows]}
    return StreamingResponse(_events(model, answer), media_type="text/event-stream") if body.stream else answer


async def _events(model: Any, answer: dict[str, Any]) -> AsyncIterator[str]:
    """A decoded answer as the stream's events (serve.translation.stream): each source's best ids as `token`
    events (with the text each adds), then `done` with the answer."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None
    events = []
    for index, row in enumerate(answer["translations"]):
        shown = ""
        for n, token in enumerate(row["ids"], 1):
            event: dict[str, Any] = {"index": index, "id": token}
            if tokenizer:
                event["text"], shown = text_delta(tokenizer.decode(row["ids"][:n]), shown)
            events.append(f"event: token\ndata: {json.dumps(event, ensure_ascii=False)}\n\n")
    yield "".join(events) + f"event: done\ndata: {json.dumps(answer, ensure_ascii=False)}\n\n"


def _greedy(body: Any) -> dict[str, Any]:
    """The decoding of `return_alternatives` (greedy, one row per alternative, whatever the export's defaults);
    a request asking for beams or sampling with it is refused."""
    beams, sample = getattr(body, "num_beams", None), getattr(body, "do_sample", None)
    asked = [name for name, bad in (("num_beams", beams not in (None, 1)), ("do_sample", sample is True)) if bad]
    if asked:
        raise HTTPFailure(422, f"return_alternatives continues each alternative greedily; drop {' and '.join(asked)}",
                          fields=[*asked, "return_alternatives"])
    return {"num_beams": 1, "do_sample": False, "num_return_sequences": 1}


def _prefixes(model: Any, given: Any, count: int) -> list[list[int]] | None:
    if given is None:
        return None
    if len(given) != count:
        raise HTTPFailure(422, f"target_prefix: {len(given)} prefixes for {count} sources; give one each "
                               "(\"\" or [] for none)", fields=["target_prefix"])
    return [model.encode_target(p) if isinstance(p, str) else list(p) for p in given]


def _decode(model: Any, sources: list[list[int]], prefixes: list[list[int]] | None, config: Any, steps: int,
            count: int | None) -> list[list[Any]]:
    """The hypotheses of each source; an empty source (an empty text) translates to nothing."""
    todo = [i for i, s in enumerate(sources) if s]
    out: list[list[Any]] = [[] for _ in sources]
    if todo:
        picked = None if prefixes is None else [prefixes[i] for i in todo]
        extra = {} if count is None else {"num_return_sequences": count}
        rows = model.generate([sources[i] for i in todo], config, max_new_tokens=steps, target_prefix=picked,
                              return_alternatives=count is not None, **extra)
        for i, hyps in zip(todo, rows):
            out[i] = hyps
    return out


def _row(model: Any, hyps: list[Any]) -> dict[str, Any]:
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def entry(h: Any) -> dict[str, Any]:
        return {"ids": h.ids, **({"text": tokenizer.decode(h.ids)} if tokenizer else {}),
                **({"score": h.score} if math.isfinite(h.score) else {})}

    if not hyps:
        return {"ids": [], **({"text": ""} if tokenizer else {})}
    row = entry(hyps[0])
    if len(hyps) > 1:
        row["hypotheses"] = [entry(h) for h in hyps]
    return row


def add_score(app: FastAPI, settings: ServeSettings, state: dict[str, Any]) -> None:
    """POST /v1/score over the model of state["engine"]."""
    keyed = (401,) if settings.api_key else ()
    name = served_name(settings.folder)

    @app.post("/v1/score", response_model=ScoreResponse, responses=error_responses(400, *keyed, 413, 422, 500))
    async def score(body: ScoreRequest) -> dict[str, Any]:
        """CTranslate2's score_batch: each target's per-token log-probabilities given its source."""
        if body.model is not None and body.model != name:
            raise HTTPFailure(422, f"model: no model {body.model!r}; this server serves {name!r} (GET /v1/models)",
                              field="model")
        return await answer_score(state, settings, body)


async def answer_score(state: dict[str, Any], settings: ServeSettings, body: ScoreRequest) -> dict[str, Any]:
    """POST /v1/score's answer with the model of state["engine"] (serve.multi: the export it picks)."""
    model = state["engine"].model
    if (body.targets is None) == (body.target_ids is None):
        raise HTTPFailure(422, "give exactly one of targets or target_ids", fields=["targets", "target_ids"])
    field = "targets" if body.targets is not None else "target_ids"
    targets = body.targets if body.targets is not None else body.target_ids
    try:
        sources, _, _ = prepare_sources(model, settings, body.texts, body.ids, None, {}, body.source_lang,
                                        body.target_lang)
        if len(targets) != len(sources):
            raise HTTPFailure(422, f"{field}: {len(targets)} targets for {len(sources)} sources; give one each",
                              fields=[field])
        if any(not s for s in sources):
            raise HTTPFailure(422, "texts: an empty source has nothing to score against", fields=["texts"])
        with naming(field):
            results = await asyncio.to_thread(model.score, sources, targets, body.source_lang, body.target_lang)
    except TfmExportError as exc:
        failure = failure_from(exc)
        if failure.body.get("field") == "targets":  # the runtime's name for either kind
            failure.body["field"] = field
        raise failure from None
    return {"scores": [r.to_dict() for r in results]}
