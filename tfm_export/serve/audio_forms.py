"""The forms of OpenAI's audio routes (serve.audio): their fields, checked, and their OpenAPI request bodies.

A form's values are text ("0" is a number); OpenAI's clients send a list as `name[]` once per value and an
object as `name[key]` once per key (chunking_strategy), which are gathered here before the fields are
checked. A bad or unknown field is a 422 naming it (serve.translation.HTTPFailure).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from ..runtime.options.generation import SEED_END
from ..runtime.speech.vad import VadParameters
from .translation import HTTPFailure

__all__ = ["ServerVad", "TranscriptionForm", "TranslationForm", "chunking_parameters", "form_fields", "request_body"]


class TranslationForm(BaseModel):
    """POST /v1/audio/translations' fields besides `file` (form values are text: "0" is a number)."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, description="Any name: this server serves one export.")
    # text fields without null: a form has no null, leaving a field out is its default
    prompt: str = Field("", description="Text the transcript is conditioned on (spellings, names).")
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] = Field(
        "json", description="verbose_json, srt and vtt decode with timestamps (segments with their times).")
    # OpenAI's meaning and default (runtime.speech.fallback.openai_fallback): left out is 0, the fallback
    temperature: float = Field(
        0.0, ge=0, le=1, allow_inf_nan=False,
        description="0 (the default, OpenAI's): the temperature fallback (0, 0.2, ..., 1 while a window misses "
                    "the thresholds: the folder's, else openai-whisper's); above 0: sampling at it.")
    # this server's, not OpenAI's (whose answers do not repeat); OpenAI's clients send it as extra_body
    seed: int = Field(0, ge=0, lt=SEED_END, description="The sampled tries' seed (SplitMix64, transcribe's `seed`): "
                                                        "an answer is transcribe's with the same seed.")


class ServerVad(BaseModel):
    """OpenAI's chunking_strategy object (its defaults): the VAD's settings."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["server_vad"]
    threshold: float = Field(0.5, gt=0, lt=1, description="P(speech) from which a 32 ms window is speech.")
    prefix_padding_ms: int = Field(300, ge=0, description="Audio kept before (and after) each stretch of speech.")
    silence_duration_ms: int = Field(200, ge=0, description="Silence that ends a stretch of speech.")

    def parameters(self) -> VadParameters:
        return VadParameters(threshold=self.threshold, speech_pad_ms=self.prefix_padding_ms,
                             min_silence_duration_ms=self.silence_duration_ms)


# "auto" (text) or the server_vad object: each value is checked against its own kind only, so that a bad
# threshold is named as that, not as "should be 'auto'"
ChunkingStrategy = Annotated[Union[Annotated[Literal["auto"], Tag("auto")], Annotated[ServerVad, Tag("server_vad")]],
                             Discriminator(lambda value: "auto" if isinstance(value, str) else "server_vad")]


def chunking_parameters(strategy: Any) -> VadParameters | None:
    """A form's chunking_strategy as the VAD's parameters (None: the recording as one block)."""
    if strategy is None:
        return None
    return VadParameters() if strategy == "auto" else strategy.parameters()


class TranscriptionForm(TranslationForm):
    """POST /v1/audio/transcriptions' fields besides `file`."""

    language: str = Field("", description="The spoken language (ISO-639-1, e.g. de); default: detected "
                                          "from the first window.")
    timestamp_granularities: list[Literal["segment", "word"]] = Field(
        [], alias="timestamp_granularities[]", description="word: `words` with their times (verbose_json); "
                                                             "segments come with every verbose_json answer.")
    stream: bool = Field(False, description="Server-sent events: transcript.text.delta per window, then "
                                            "transcript.text.done (response_format json or text).")
    include: list[Literal["logprobs"]] = Field(
        [], alias="include[]", description="logprobs: each text token's {token, logprob, bytes} as `logprobs` "
                                           "(response_format json; in a stream, each transcript.text.delta its tokens' and "
                                           "transcript.text.done all).")
    chunking_strategy: ChunkingStrategy | None = Field(
        None, description='auto: only the speech is transcribed (Silero VAD, its defaults); or {"type": '
                          '"server_vad", "threshold", "prefix_padding_ms", "silence_duration_ms"} (JSON text or '
                          'chunking_strategy[...] fields). Left out: the recording as one block.')

    @field_validator("chunking_strategy", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        """The object as curl sends it: JSON text."""
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object ({exc.msg})") from None
        return value


# The forms' fields that are lists, as OpenAI's clients send them: the name with [] once per value.
LISTS = {"timestamp_granularities[]", "include[]"}
# ... and those that are objects: OpenAI's clients send `name[key]` once per key
OBJECTS = {"chunking_strategy"}
# A refused value of these fields is something OpenAI's service does and this server does not: say so
NOT_DONE: dict[str, str] = {}
# What a bad value of these fields should have been
EXPECTED = {"chunking_strategy": 'auto, or {"type": "server_vad", "threshold", "prefix_padding_ms", '
                                 '"silence_duration_ms"}'}


def form_fields(fields: dict[str, list[str]], form: type[BaseModel]) -> BaseModel:
    """The form's text fields, checked: a 422 naming unknown or bad fields."""
    values: dict[str, Any] = {}
    for name, given in fields.items():
        if len(given) > 1 and name not in LISTS:
            raise HTTPFailure(422, f"{name} is given {len(given)} times; send it once", field=name)
        outer, _, key = name.partition("[")
        if outer in OBJECTS and key.endswith("]"):  # chunking_strategy[threshold]: a key of the object
            if not isinstance(values.setdefault(outer, {}), dict):
                raise HTTPFailure(422, f"{outer} is given both as text and as {outer}[...] fields; send one",
                                  field=outer)
            values[outer][key[:-1]] = given[0]
            continue
        if isinstance(values.get(name), dict):  # its [key] fields came first
            raise HTTPFailure(422, f"{name} is given both as text and as {name}[...] fields; send one", field=name)
        values[name] = given if name in LISTS else given[0]
    try:
        return form.model_validate(values)
    except ValidationError as exc:
        raise form_failure(exc.errors(), form) from None


def form_failure(errors: list[Any], form: type[BaseModel]) -> HTTPFailure:
    """A 422 naming the first bad field (and, in an object, its key and what the field takes)."""
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if unknown:
        accepted = ", ".join(["file", *(f.alias or name for name, f in form.model_fields.items())])
        return HTTPFailure(422, f"unknown field(s): {', '.join(unknown)}; this route accepts {accepted}",
                           fields=unknown)
    loc = errors[0]["loc"]
    where = str(loc[0])
    key = "".join(f"[{part}]" for part in loc[2:]) if where in OBJECTS else ""  # loc[1]: the kind's tag
    why = f"; {NOT_DONE[where]}" if where in NOT_DONE else ""
    expected = f" (it takes {EXPECTED[where]})" if where in EXPECTED else ""
    return HTTPFailure(422, f"{where}{key}: {errors[0]['msg']}{expected}{why}", field=where)


def request_body(form: type[BaseModel]) -> dict[str, Any]:
    """The route's OpenAPI requestBody: multipart/form-data with `file` and the form's fields."""
    schema = _inlined(form.model_json_schema(by_alias=True))
    schema["properties"] = {"file": {"type": "string", "format": "binary", "description":
                                     "The recording: WAV, FLAC, MP3 or OGG."}, **schema["properties"]}
    schema["required"] = ["file", *schema.get("required", [])]
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its `$defs` written where they are referred to: the requestBody sits inside the
    OpenAPI document, where pydantic's `#/$defs/...` references would resolve against the document's root."""
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline({**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}})
            return {key: inline(value) for key, value in node.items()}
        return [inline(item) for item in node] if isinstance(node, list) else node

    return inline(schema)
