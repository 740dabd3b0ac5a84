"""The server's request and response bodies as pydantic models: what FastAPI validates and what the
OpenAPI schema at /openapi.json shows. Limits that depend on the served model (max_texts, source
lengths, vocabulary, language codes) are added to the schema by serve.contract.

Types are strict (no "1" for 1, no 1 for true): the schema says integer or boolean, so a server that
coerced would accept requests its own contract calls invalid.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

# The options GenerationConfig checks, with its bounds: pydantic refuses a bad value with a 422 naming
# the field before any work; runtime.generation keeps the same checks for the Python API.
SEED_END = 2**64  # the runtime's SplitMix64 seed is an unsigned 64-bit integer
# The server's own ranges where GenerationConfig only says "> 0" or "a number": beyond them the
# runtime's float64 arithmetic overflows (logits / 5e-324 is inf: NaN probabilities; length ** 1e300
# raises), which would fail the decode instead of the request. Far outside anything used in practice
# (transformers' defaults are 1.0).
SMALLEST_DIVISOR = 1e-6  # temperature, repetition_penalty
LARGEST_FACTOR = 1e6  # repetition_penalty multiplies negative log-probabilities by it
LENGTH_PENALTY = 50.0  # |length_penalty|: 1e6 tokens ** 50 is still a float


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


class TranslateRequest(BaseModel):
    """One request: exactly one of `texts` (needs the export's tokenizer) or `ids`. Unknown options are
    refused, so decoding options can be added later without old servers silently ignoring them."""

    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str] | None = Field(None, description="Source texts, encoded with the export's tokenizer.")
    ids: list[list[integer()]] | None = Field(None, description="Source token ids, used as given.")
    source_lang: str | None = Field(None, description="Language code of the texts (GET /languages lists them).")
    target_lang: str | None = Field(None, description="Language code to translate into (multilingual models).")
    max_new_tokens: integer(ge=1) | None = Field(None, description="Most tokens per source (default: all that fit).")
    stream: bool = Field(False, description="Server-sent events: one `token` event per token, then `done`.")
    # Decoding options: runtime.generation.GenerationConfig's fields, same meaning. Unset ones come from
    # the export's `generation` section, else greedy.
    num_beams: integer(ge=1) | None = Field(None, description="Beam search when > 1 (tokens are sent when it ends).")
    length_penalty: number(ge=-LENGTH_PENALTY, le=LENGTH_PENALTY) | None = Field(
        None, description="Beam search: score = sum(log p) / length ** this.")
    early_stopping: bool | Literal["never"] | None = Field(None, description='Beam search: true, false or "never".')
    num_return_sequences: integer(ge=1) | None = Field(None, description="Hypotheses per source (n-best or "
                                                                      "samples); at most num_beams unless sampling.")
    do_sample: bool | None = Field(None, description="Sample (with num_beams 1) instead of taking the best token.")
    temperature: number(ge=SMALLEST_DIVISOR) | None = Field(None, description="Sampling: logits / temperature.")
    top_k: integer(ge=0) | None = Field(None, description="Sampling: keep the k most likely tokens (0: all).")
    top_p: number(gt=0, le=1) | None = Field(None, description="Sampling: nucleus probability in (0, 1].")
    seed: integer(ge=0, lt=SEED_END) | None = Field(None, description="Sampling: the same seed, the same tokens.")
    min_new_tokens: integer(ge=0) | None = Field(None, description="EOS is banned before this many tokens.")
    repetition_penalty: number(ge=SMALLEST_DIVISOR, le=LARGEST_FACTOR) | None = Field(
        None, description="Penalise the tokens so far (> 1).")
    no_repeat_ngram_size: integer(ge=0) | None = Field(None, description="Never repeat an n-gram of this size.")
    forced_eos: bool | None = Field(None, description="The last allowed token is EOS.")


ACCEPTED = tuple(TranslateRequest.model_fields)
REQUEST_ONLY = ("texts", "ids", "max_new_tokens", "stream", "source_lang", "target_lang")  # not decoding options


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
    413: "Over a server limit (`limit` names it): sources per request, source length, beams.",
    422: "A bad or unknown field (`field`/`fields` name it), or a text the tokenizer cannot encode.",
    429: "The queue is full; retry after `Retry-After` seconds.",
    500: "The decode engine failed (a bug; the server log has the traceback).",
    503: "The server is shutting down; retry on another replica.",
}
