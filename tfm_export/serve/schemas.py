"""The server's request and response bodies as pydantic models: what FastAPI validates and what the
OpenAPI schema at /openapi.json shows. Limits that depend on the served model (max_texts, source
lengths, vocabulary, language codes) are added to the schema by serve.contract.

Types are strict (no "1" for 1, no 1 for true): the schema says integer or boolean, so a server that
coerced would accept requests its own contract calls invalid.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from ..runtime.options.generation import OPTIONS
from ..runtime.options.spec import BOUNDS, render_help


def integral(value: Any) -> Any:
    """2.0 as 2: JSON Schema's integer is any number without a fraction, and JSON writers differ."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(**bounds: int) -> Any:
    """An int that takes 2.0 but (strict) no "2" and no true; `bounds` (ge, lt) before the conversion,
    where pydantic writes them into the schema as minimum/maximum."""
    return Annotated[int, Field(**bounds), BeforeValidator(integral)]


def number(**bounds: float) -> Any:
    """A finite float: JSON has no NaN or Infinity (Python's parser reads them)."""
    return Annotated[float, Field(allow_inf_nan=False, **bounds)]


# A decoding option's kind -> its request field's type, given pydantic's bounds.
TYPES = {"integer": integer, "number": number, "boolean": lambda: bool}


class RequestFields(BaseModel):
    """One request: exactly one of `texts` (needs the export's tokenizer) or `ids`. Unknown options are
    refused, so decoding options can be added later without old servers silently ignoring them."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = Field(None, description=(
        "The export to translate with (GET /v1/models lists them), as OpenAI's `model`. A server of several "
        "exports otherwise picks one by source_lang and target_lang; a server of one takes its own name only."))
    texts: list[str] | None = Field(None, description="Source texts, encoded with the export's tokenizer.")
    ids: list[list[integer()]] | None = Field(None, description="Source token ids, used as given.")
    source_lang: str | None = Field(None, description="Language code of the texts (GET /languages lists them).")
    target_lang: str | None = Field(None, description="Language code to translate into (multilingual models).")
    stream: bool = Field(False, description="Server-sent events: one `token` event per token, then `done`.")
    split_sentences: bool = Field(False, description=(
        "Translate each text as a document: split into sentences, each translated (a sentence over the source "
        "limit cut at it) and joined back with the text's own whitespace. A text's `ids` are then its "
        "sentences' ids one after another, without a score; the k-th of `hypotheses` joins each sentence's "
        "k-th. For `texts`, not `ids`, and not with `stream`. Without it a text is one source (413 over the "
        "limit)."))
    # CTranslate2's decoding fields (serve.ct2); their rules across fields are in /openapi.json by
    # serve.contract_ct2, but one prefix per source (JSON Schema cannot compare lengths), said here
    target_prefix: list[str | list[integer()]] = Field(None, description=(
        "CTranslate2's target_prefix: one per source (as many as `texts` or `ids` has), the start its translation "
        "must have (text, or target ids; \"\" or [] for none); the translation completes it and includes it. "
        "Omitted: no prefixes (not null). Not with `split_sentences`; with `stream`, decoded first, then sent as "
        "token events and `done`."), json_schema_extra=lambda schema: schema.pop("default", None))
    return_alternatives: bool = Field(False, description=(
        "CTranslate2's alternatives: the num_return_sequences (default 1) most likely tokens at the first position "
        "after the prefix, each continued greedily, under `hypotheses`; decoded greedily, so not with num_beams > 1 "
        "or do_sample. Not with `split_sentences`; with `stream`, decoded first (the best's tokens, then `done`)."))


def option_field(option: Any) -> tuple[Any, Any]:
    """A decoding option's request field (GenerationConfig's declaration): its type with the server's
    bounds, where pydantic refuses a bad value with a 422 naming the field before any work (the runtime
    keeps the same checks for the Python API); unset (null) takes the export's default."""
    kind = TYPES[option.kind](**{BOUNDS[k][1]: limit for k, limit in option.serve_bounds.items()})
    if option.choices:
        kind = kind | Literal[option.choices]
    return kind | None, Field(None, description=render_help(option.help, lambda name: name))


# The request body: RequestFields, then the decoding options the server takes, as GenerationConfig
# declares them (runtime.options.generation: same names, meanings and checks).
TranslateRequest = create_model("TranslateRequest", __base__=RequestFields, __doc__=RequestFields.__doc__,
                                **{o.name: option_field(o) for o in OPTIONS if o.serve})

ACCEPTED = tuple(TranslateRequest.model_fields)
# Not decoding options: the sources, and max_new_tokens (the engine's token budget for each job).
REQUEST_ONLY = (*RequestFields.model_fields, "max_new_tokens")


class ErrorBody(BaseModel):
    """Every error: one line naming the problem, and the request field or server limit it is about."""

    error: str = Field(description="What is wrong and what to do, one line.")
    field: str | None = Field(None, description="The request field at fault.")
    fields: list[str] | None = Field(None, description="The request fields at fault.")
    limit: str | None = Field(None, description="The server setting whose limit the request exceeds.")


class Hypothesis(BaseModel):
    ids: list[int] = Field(description="Generated ids, without BOS and EOS.")
    text: str | None = Field(None, description="The ids decoded (exports with a tokenizer).")
    score: float | None = Field(None, description="Beam: sum(log p) / length ** length_penalty; else sum(log p).")


class Translation(Hypothesis):
    hypotheses: list[Hypothesis] | None = Field(None, description="All num_return_sequences, best first.")


class TranslateResponse(BaseModel):
    translations: list[Translation] = Field(description="One per source, in order.")


class Health(BaseModel):
    status: Literal["ok"]
    batching: str = Field(description="The engine: inflight or request.")
    queue_depth: int = Field(description="Sources waiting for a row.")
    active: int = Field(description="Rows decoding now.")


class Language(BaseModel):
    """A LibreTranslate language entry."""

    code: str
    name: str = Field(description="The code: exports carry codes, not names.")
    targets: list[str] = Field(description="Codes this language translates into.")


# One server-sent event of a streamed translation (OpenAPI 3.1: an event stream's schema is its events'),
# as clients parse them: the event's name and its data line, which is JSON.
STREAM_EVENT = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"enum": ["token", "done", "error"]},
    "data": {"type": "string", "contentMediaType": "application/json",
             "description": "token: {index, id, text?} (text: what the token adds to the source's text); "
                            "done: the JSON answer (TranslateResponse); error: {error}."}}}


def error_responses(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses=` entries: each status with the JSON error body (ErrorBody)."""
    return {status: {"model": ErrorBody, "description": descriptions.get(f"s{status}", ERRORS[status])}
            for status in statuses}


ERRORS = {
    400: "The body is not a JSON object (or, for /translate, a form) or a parameter is missing or bad.",
    401: "Missing or wrong API key: send `Authorization: Bearer KEY`.",
    403: "Missing or wrong API key: send `api_key` or `Authorization: Bearer KEY`.",
    404: "No model of that name (GET /v1/models/{model}): the answer names the one served.",
    413: "Over a size limit (`limit` names it): sources per request (max_texts), tokens per source (max_len, "
         "max_src_len), decoder rows per request (max_rows: sources x beams or samples), the body's bytes "
         "(max_body_bytes: what max_texts sources of the longest length can need).",
    422: "A bad or unknown field (`field`/`fields` name it; any value the schema refuses but a size limit's, "
         "e.g. num_beams above its maximum), or a text the tokenizer cannot encode.",
    429: "The queue is full; retry after `Retry-After` seconds.",
    500: "The decode engine failed (a bug; the server log has the traceback).",
    503: "The server is shutting down; retry on another replica.",
}
