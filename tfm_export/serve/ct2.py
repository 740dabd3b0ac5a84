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
errors are answered as every route answers them (serve.translation.failure_from).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from ..errors import TfmExportError
from .engine import LimitError, ServeSettings, limits, prepare_sources
from .schemas import REQUEST_ONLY, error_responses, integer
from .translation import HTTPFailure, failure_from


class ScoreRequest(BaseModel):
    """Sources and the translations to score: one target per source, texts or ids on each side."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = Field(None, description="The export to score with (GET /v1/models).")
    texts: list[str] | None = Field(None, description="Source texts, encoded with the export's tokenizer.")
    ids: list[list[integer()]] | None = Field(None, description="Source token ids, used as given.")
    targets: list[str] | None = Field(None, description="Translations to score, one per source (text).")
    target_ids: list[list[integer()]] | None = Field(None, description="Translations as target ids, without EOS.")
    source_lang: str | None = Field(None, description="Language code of the texts.")
    target_lang: str | None = Field(None, description="Language code of the targets (its forced first token).")


def wants_prefix(body: Any) -> bool:
    """Whether a /v1/translate body asks for CTranslate2's prefix or alternatives (this module answers it)."""
    return getattr(body, "target_prefix", None) is not None or bool(getattr(body, "return_alternatives", False))


async def translate_prefixed(state: dict[str, Any], settings: ServeSettings, body: Any) -> dict[str, Any]:
    """/v1/translate with `target_prefix` or `return_alternatives`: the answer of serve.translation.results."""
    if body.stream or body.split_sentences:
        field = "stream" if body.stream else "split_sentences"
        raise HTTPFailure(422, f"target_prefix and return_alternatives answer once, sentence as given; drop {field}",
                          fields=[field, "target_prefix"])
    model = state["engine"].model
    options = body.model_dump(exclude=set(REQUEST_ONLY), exclude_none=True)
    count = options.pop("num_return_sequences", 1) if body.return_alternatives else None
    try:
        sources, steps, config = prepare_sources(model, settings, body.texts, body.ids, body.max_new_tokens, options,
                                                 body.source_lang, body.target_lang)
        if count is not None and len(sources) * count > limits(model, settings).max_rows:
            raise LimitError(f"{len(sources)} sources x {count} alternatives exceed the limit of "
                             f"{limits(model, settings).max_rows} decoder rows per request ({{max_rows}})",
                             options={"max_rows": None})
        prefixes = _prefixes(model, body.target_prefix, len(sources))
        rows = await asyncio.to_thread(_decode, model, sources, prefixes, config, steps, count)
    except TfmExportError as exc:
        raise failure_from(exc) from None
    return {"translations": [_row(model, hyps) for hyps in rows]}


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

    # not in /openapi.json yet: one target per source is a rule across fields the contract's schema cannot state
    @app.post("/v1/score", responses=error_responses(400, *keyed, 413, 422), include_in_schema=False)
    async def score(body: ScoreRequest) -> dict[str, Any]:
        """CTranslate2's score_batch: each target's per-token log-probabilities given its source."""
        model = state["engine"].model
        if (body.targets is None) == (body.target_ids is None):
            raise HTTPFailure(422, "give exactly one of targets or target_ids", fields=["targets"])
        targets = body.targets if body.targets is not None else body.target_ids
        try:
            sources, _, _ = prepare_sources(model, settings, body.texts, body.ids, None, {}, body.source_lang,
                                            body.target_lang)
            if len(targets) != len(sources):
                raise HTTPFailure(422, f"targets: {len(targets)} targets for {len(sources)} sources; give one each",
                                  fields=["targets"])
            if any(not s for s in sources):
                raise HTTPFailure(422, "texts: an empty source has nothing to score against", fields=["texts"])
            results = await asyncio.to_thread(model.score, sources, targets, body.source_lang, body.target_lang)
        except TfmExportError as exc:
            raise failure_from(exc) from None
        return {"scores": [r.to_dict() for r in results]}
