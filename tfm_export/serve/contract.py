"""What this server accepts, given its model and settings, written into its OpenAPI schema (serve.contract_ct2:
CTranslate2's target_prefix, return_alternatives and POST /v1/score).

serve.schemas' models carry the constraints every server has (GenerationConfig's ranges); this adds
the ones of the model being served, each enforced by serve.engine.prepare_sources (or the tokenizer)
with a 4xx: sources per request (max_texts), tokens per source, ids within the vocabulary, characters
a character tokenizer knows, max_new_tokens, beams, language codes, exactly one of texts/ids, the
decoding options that only go together (num_return_sequences <= num_beams unless sampling; sampling
with one beam), and decoder rows per request (max_rows: fewer sources when each takes more rows). So a
client generating requests from /openapi.json gets 2xx for every valid one. Over a size limit (the
sources' count or length, the rows) is a 413 naming the limit; any other value the schema refuses is
a 422 naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .engine import Limits, ServeSettings, limits


def served_name(folder: str) -> str:
    """The name a server of one export answers to (GET /v1/models; a request's `model`): its folder's."""
    return Path(folder).resolve().name


@dataclass(frozen=True)
class LanguageView:
    """The export's language codes as a server shows them (serve.libretranslate's GET /languages)."""

    sources: list[str]  # codes a source may be given in (a single pair's source; none: not checked)
    targets: list[str]  # codes to translate into (none: the model has one direction, not checked)
    default: str | None  # the source language when none (or "auto") is given

    @classmethod
    def of(cls, model: Any) -> "LanguageView":
        if not model.manifest.tokenizer:
            return cls([], [], None)
        return cls.of_languages(model.tokenizer.languages)

    @classmethod
    def of_languages(cls, languages: Any) -> "LanguageView":
        """The view of a tokenizer's text.languages.Languages (a manifest's, for an export not opened yet)."""
        sources = languages.codes("source")
        default = languages.source_default or (sources[0] if len(sources) == 1 else None)
        return cls(sources, languages.codes("target"), default)


def text_schema(model: Any, bounds: Limits) -> dict[str, Any]:
    """One source text. A character tokenizer makes one token per character, so its characters and the
    source length are exact; other tokenizers' token counts depend on the text (413 when too long)."""
    tokenizer = model.manifest.tokenizer or {}
    if tokenizer.get("type") != "chars":
        return {"type": "string"}
    chars = tokenizer["src_vocab"][tokenizer.get("specials", 3):]
    longest = bounds.src_len - bool(tokenizer.get("append_eos", True))
    schema: dict[str, Any] = {"type": "string", "maxLength": max(longest, 0)}
    if all(ord(ch) <= 0xFFFF for ch in chars):  # \uXXXX reads the same in ECMA and Python patterns
        schema["pattern"] = "^[" + "".join(f"\\u{ord(ch):04x}" for ch in chars) + "]*$"
    return schema


Constrain = Callable[[dict[str, Any], Any, ServeSettings], None]  # a request's schema, narrowed in place


def install_openapi(app: Any, model: Any, settings: ServeSettings, more: Mapping[str, Constrain] = {}) -> None:
    """app.openapi() with this server's limits in POST /v1/translate's request schema, then `more`'s in the
    request schemas they name (serve.contract_ct2.CONSTRAINTS: CTranslate2's fields, POST /v1/score)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # FastAPI's, cached on the app; constrained in place once
            components = schema.get("components", {}).get("schemas", {})
            if "TranslateRequest" in components:  # a text model's server
                constrain(components["TranslateRequest"], model, settings)
            for name, narrow in more.items():
                if name in components:
                    narrow(components[name], model, settings)
            if settings.api_key:
                add_security(schema)
        return app.openapi_schema

    app.openapi = openapi


def constrain(request: dict[str, Any], model: Any, settings: ServeSettings) -> None:
    """TranslateRequest's schema, narrowed to what this server accepts."""
    bounds, view = limits(model, settings), LanguageView.of(model)
    props = request["properties"]
    source_ids = {"type": "array", "minItems": 1, "maxItems": bounds.src_len,
                  "items": {"type": "integer", "minimum": 0, "maximum": bounds.src_vocab - 1}}
    texts = {"type": "array", "minItems": 1, "maxItems": bounds.max_texts, "items": text_schema(model, bounds)}
    _nullable(props, "model", {"type": "string", "enum": [served_name(settings.folder)]})  # its own name only
    _nullable(props, "texts", texts if model.manifest.tokenizer else None)
    _nullable(props, "ids", {"type": "array", "minItems": 1, "maxItems": bounds.max_texts, "items": source_ids})
    _nullable(props, "source_lang", {"type": "string", "enum": view.sources} if view.sources else None)
    _nullable(props, "target_lang", {"type": "string", "enum": view.targets} if view.targets else None)
    _nullable(props, "max_new_tokens", {"type": "integer", "minimum": 1, "maximum": bounds.max_new_tokens})
    _nullable(props, "num_beams", {"type": "integer", "minimum": 1, "maximum": bounds.max_beams})
    _nullable(props, "num_return_sequences", {"type": "integer", "minimum": 1, "maximum": settings.max_beams})
    given = {"oneOf": [{"required": [name], "properties": {name: {"type": "array"}}} for name in ("texts", "ids")]}
    # split_sentences answers once the documents are translated: not streamed (serve.documents)
    unstreamed = {"not": {"required": ["split_sentences", "stream"],
                          "properties": {"split_sentences": {"const": True}, "stream": {"const": True}}}}
    request["allOf"] = [given, {"anyOf": decoding_branches(model.generation, bounds, settings)}, unstreamed]


def _nullable(props: dict[str, Any], name: str, schema: dict[str, Any] | None) -> None:
    """props[name] := `schema` or null (None: null only), keeping its title and description."""
    kept = {k: v for k, v in props[name].items() if k in ("title", "description", "default")}
    props[name] = {**kept, "anyOf": [schema, {"type": "null"}] if schema else [{"type": "null"}]}


def sources_for(rows: int, bounds: Limits) -> int:
    """How many sources a request may have when each takes `rows` decoder rows (max_rows)."""
    return min(bounds.max_texts, bounds.max_rows // rows)


def decoding_branches(defaults: Any, bounds: Limits, settings: ServeSettings) -> list[dict[str, Any]]:
    """The decoding options that go together (GenerationConfig's checks), one branch each: sampling
    n sequences with one beam, or k beams returning at most k sequences; each with the sources that
    fit max_rows (n or k rows each). An absent or null option is the export's default (`defaults`,
    its GenerationConfig), so a branch allows it only where the default fits."""

    def option(name: str, values: list[Any], fits: bool) -> tuple[dict[str, Any], list[str]]:
        return {name: {"enum": values + [None] if fits else values}}, [] if fits else [name]

    def fewer_sources(props: dict[str, Any], rows: int) -> None:
        most = sources_for(rows, bounds)
        if most < bounds.max_texts:  # texts and ids are null or arrays; maxItems is about arrays
            props.update({name: {"maxItems": most} for name in ("texts", "ids")})

    branches = []
    for lo, hi in _runs([sources_for(n, bounds) for n in range(1, settings.max_beams + 1)]):  # n = lo + 1 ..
        props, required = {}, []
        for more, named in (option("do_sample", [True], defaults.do_sample),
                            option("num_beams", [1], defaults.num_beams == 1)):
            props.update(more)
            required += named
        fits = lo < defaults.num_return_sequences <= hi
        props["num_return_sequences"] = {"anyOf": [{"type": "integer", "minimum": lo + 1, "maximum": hi}]
                                         + ([{"type": "null"}] if fits else [])}
        fewer_sources(props, hi)
        branches.append({"properties": props, "required": required + ([] if fits else ["num_return_sequences"])})
    for k in range(1, bounds.max_beams + 1):
        if not sources_for(k, bounds):
            break
        props, required = {}, []
        for more, named in (option("do_sample", [False], not defaults.do_sample),
                            option("num_beams", [k], defaults.num_beams == k)):
            props.update(more)
            required += named
        fits = defaults.num_return_sequences <= k
        props["num_return_sequences"] = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": k}]
                                         + ([{"type": "null"}] if fits else [])}
        fewer_sources(props, k)
        branches.append({"properties": props, "required": required + ([] if fits else ["num_return_sequences"])})
    return branches


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of equal non-zero values: the indices start .. end - 1."""
    runs: list[tuple[int, int]] = []
    for n, value in enumerate(values):
        if not value:
            break
        if runs and values[runs[-1][0]] == value:
            runs[-1] = (runs[-1][0], n + 1)
        else:
            runs.append((n, n + 1))
    return runs


def add_security(schema: dict[str, Any]) -> None:
    """The API key as a bearer token, on every operation that needs it (serve.guard; /translate also
    takes it as `api_key` in the body, which a security scheme cannot say: its 403 is documented)."""
    from .guard import OPEN_PATHS, SELF_CHECKED

    schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in schema["paths"].items():
        if path not in OPEN_PATHS and path not in SELF_CHECKED:
            for operation in operations.values():
                operation["security"] = [{"bearer": []}]
