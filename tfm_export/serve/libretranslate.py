"""LibreTranslate's API over the same engine, so that its clients (libretranslatepy, apps and plugins
made for LibreTranslate) work unchanged:

    POST /translate   q (a text or a list of texts), source (a code or "auto"), target, format,
                      alternatives (how many other translations), api_key; as JSON or as a
                      url-encoded form (libretranslatepy posts forms)
    GET  /languages   [{"code", "name", "targets"}]

Answers as LibreTranslate's: {"translatedText": str | [str], "alternatives": [...] (when asked),
"detectedLanguage": {"confidence", "language"} (source "auto")}; errors {"error": "..."} with 400
(a bad or missing parameter, any limit), 403 (API key), 429 (queue full, Retry-After), 503
(shutting down). Where an export differs from LibreTranslate's language packs:

- every text is translated sentence by sentence (serve.documents), as LibreTranslate does: a sentence-level
  model given several sentences drops some; a sentence over the source limit is cut at it, not refused.
  Alternatives join each sentence's n-th hypothesis.
- format "html" (and "markdown", which LibreTranslate has not) translates the text nodes and keeps the markup
  (text.markup: tags, attributes, comments, code and <pre>/<script>/<style> byte for byte, inline tags carried
  to the translated words, as LibreTranslate's translate_html does); alternatives are [] there, as LibreTranslate's.
- source "auto" detects the language among the model's source codes (text.detect, py3langid), a batch as one
  (LibreTranslate's way); a model without source codes reports its default source ("und": none) with
  confidence 0, as before: there is nothing to choose between.
- /detect, /frontend/settings, /translate_file and its /download_file/{name} are serve.libretranslate_routes'
  (added by serve.app next to these).
- a model without language codes lists no languages and takes any source and target: they cannot be
  checked (the model translates its one direction). A model with target codes but no source codes
  (multi-target Marian) checks the target only.
- the key may come as `api_key` or as `Authorization: Bearer KEY`; /languages is open, as LibreTranslate's.
  Reading the parameters, the key and LibreTranslate's statuses are serve.libretranslate_params'.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import FastAPI, Request

from ..text import detect, markup
from .contract import LanguageView, text_schema
from .documents import translate_documents, translate_markup_texts
from .engine import ServeSettings, limits
from .libretranslate_params import FORM, codes_of, keyed_params, libretranslate_errors, require
from .schemas import Language, error_responses, integral
from .translation import HTTPFailure

DIGITS = re.compile(r"[0-9]+")


def add_libretranslate(app: FastAPI, settings: ServeSettings, state: dict[str, Any]) -> None:
    """POST /translate and GET /languages on `app`, over the engine in state["engine"]."""
    model = state["engine"].model
    view, bounds = LanguageView.of(model), limits(model, settings)
    most_alternatives = min(bounds.max_beams, bounds.max_rows) - 1

    @app.get("/languages", response_model=list[Language])
    async def languages() -> list[dict[str, Any]]:
        """The export's language codes (none for a model without codes), LibreTranslate's way."""
        return language_entries(view)

    body = openapi_body(model, view, bounds, most_alternatives)

    @app.post("/translate", response_model=None, openapi_extra=body, responses={
        200: {"description": "The translation(s).", "content": {"application/json": {"schema": ANSWER}}},
        **error_responses(400, *((403,) if settings.api_key else ()), 429, 500, 503)})
    async def translate(request: Request) -> Any:
        """LibreTranslate's translate: `q` from `source` into `target` (see GET /languages)."""
        return await translate_params(state, settings, await keyed_params(request, settings.api_key), request)


async def translate_params(state: dict[str, Any], settings: ServeSettings, params: dict[str, Any],
                           request: Request) -> Any:
    """LibreTranslate's answer to `params` (read, key checked) from the engine in state["engine"]; {} when
    the client went away. A server of several exports (serve.multi) runs it on the export it picks, once
    per leg when it pivots."""
    model = state["engine"].model
    view, bounds = LanguageView.of(model), limits(model, settings)
    most_alternatives = min(bounds.max_beams, bounds.max_rows) - 1
    texts, batch, alternatives, form = read_texts(params, bounds.max_texts, most_alternatives)
    source, target, detected = pick_languages(params, view)
    if detected is not None and view.sources:  # "auto": the texts' language among the model's
        detected = await asyncio.to_thread(detect_source, texts, form, view)
        source = detected["language"]
    if form != "text":  # markup: its text nodes as documents (serve.documents), no alternatives
        return await translate_markup_answer(state, settings, texts, form, source, target, request, batch,
                                             alternatives, detected)
    options = {}
    if alternatives:  # n-best: one more beam than alternatives, whatever the export's default
        wanted = alternatives + 1
        options = {"num_beams": max(model.generation.num_beams, wanted), "num_return_sequences": wanted,
                   "do_sample": False}
    with libretranslate_errors():  # every text a document, split into sentences as LibreTranslate splits
        rendered = await translate_documents(state, settings, texts, None, options, source, target, request)
    if rendered is None:
        return {}  # the client went away: nobody reads this
    # an empty text's translation is empty (answered without decoding: engine.prepare_sources)
    hypotheses = [[text for _, text in renderings] for renderings in rendered]
    return answer(hypotheses, batch, alternatives, detected)


async def translate_markup_answer(state: dict[str, Any], settings: ServeSettings, texts: list[str], form: str,
                                  source: str | None, target: str | None, request: Request, batch: bool,
                                  alternatives: int, detected: dict | None) -> Any:
    """format html or markdown: the texts' markup kept, their text nodes translated (serve.documents)."""
    with libretranslate_errors():
        rendered = await translate_markup_texts(state, settings, texts, form, {}, source, target, request)
    if rendered is None:
        return {}  # the client went away
    return answer([[text] for text in rendered], batch, alternatives, detected)


def detect_source(texts: list[str], form: str, view: LanguageView) -> dict[str, Any]:
    """detectedLanguage for source "auto": the texts' language among the model's sources (their text
    nodes for markup); the model's default with confidence 0 when nothing tells."""
    plain = texts if form == "text" else [markup.plain_text(text, form) for text in texts]
    return detect.detect_many(plain, view.sources, view.default or view.sources[0])


def language_entries(view: LanguageView) -> list[dict[str, Any]]:
    """LibreTranslate's /languages: every code, with the targets a source code translates into (not
    itself, as LibreTranslate's). A model with target codes only (multi-target Marian) reads whatever
    source it was trained on, so every code lists every target."""
    entries = []
    for code in sorted(set(view.sources) | set(view.targets)):
        if not view.sources:
            targets = list(view.targets)
        else:
            targets = [t for t in view.targets if t != code] if code in view.sources else []
        entries.append({"code": code, "name": code, "targets": targets})
    return entries


def read_texts(params: dict[str, Any], max_texts: int, most_alternatives: int) -> tuple[list[str], bool, int, str]:
    """(texts, whether q was a list, alternatives, format), checked as LibreTranslate does (400s)."""
    require(params, "q")
    codes_of(params)
    q, batch = params["q"], isinstance(params["q"], list)
    texts = q if batch else [q]
    if not all(isinstance(text, str) for text in texts):
        raise HTTPFailure(400, "Invalid request: q must be a text or a list of texts")
    if len(texts) > max_texts:
        raise HTTPFailure(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({max_texts})")
    form = params.get("format")
    form = "text" if form is None or form == "" else form
    if not isinstance(form, str) or form not in markup.FORMATS:
        raise HTTPFailure(400, f"{form} format is not supported: send text, html or markdown")
    alternatives = integral(params.get("alternatives", 0))
    if isinstance(alternatives, str) and DIGITS.fullmatch(alternatives):  # a form's value
        alternatives = int(alternatives)
    if not isinstance(alternatives, int) or isinstance(alternatives, bool) or alternatives < 0:
        raise HTTPFailure(400, "Invalid request: alternatives parameter is not a number of 0 or more")
    if alternatives > most_alternatives:
        raise HTTPFailure(400, f"Invalid request: alternatives parameter must be <= {most_alternatives}")
    return texts, batch, alternatives, form


def pick_languages(params: dict[str, Any], view: LanguageView) -> tuple[str | None, str | None, dict | None]:
    """(source_lang, target_lang for the model, detectedLanguage when source is "auto")."""
    source, target = codes_of(params)
    if target not in view.targets and view.targets:
        raise HTTPFailure(400, f"{target} is not supported; this model translates into {listed(view.targets)}")
    if source == "auto":
        confidence = 100.0 if len(view.sources) == 1 else 0.0  # nothing is detected: see the module docstring
        return view.default, target if view.targets else None, {"confidence": confidence,
                                                                "language": view.default or "und"}
    if source not in view.sources and view.sources:
        raise HTTPFailure(400, f"{source} is not supported; this model translates from "
                               f"{listed(['auto', *view.sources])}")
    return source if view.sources else None, target if view.targets else None, None


def listed(codes: list[str], most: int = 40) -> str:
    """Codes for a one-line message (NLLB has 202)."""
    return ", ".join(codes[:most]) + (", ..." if len(codes) > most else "")


def answer(texts: list[list[str]], batch: bool, alternatives: int, detected: dict | None) -> dict[str, Any]:
    """LibreTranslate's answer from each source's translations (best first)."""
    best = [options[0] for options in texts]
    others = [list(dict.fromkeys(t for t in options[1:] if t != options[0])) for options in texts]
    result: dict[str, Any] = {"translatedText": best if batch else best[0]}
    if alternatives:
        result["alternatives"] = others if batch else others[0]
    if detected is not None:
        result["detectedLanguage"] = [detected] * len(texts) if batch else detected
    return result


DETECTED = {"type": "object", "required": ["confidence", "language"],
            "properties": {"confidence": {"type": "number", "minimum": 0, "maximum": 100},
                           "language": {"type": "string"}}}
STRINGS = {"type": "array", "items": {"type": "string"}}
ANSWER = {"type": "object", "required": ["translatedText"], "properties": {
    "translatedText": {"anyOf": [{"type": "string"}, STRINGS], "description": "A text per text of q."},
    "alternatives": {"anyOf": [STRINGS, {"type": "array", "items": STRINGS}],
                     "description": "Other translations (n-best, distinct), when alternatives > 0."},
    "detectedLanguage": {"anyOf": [DETECTED, {"type": "array", "items": DETECTED}],
                         "description": 'The language detected for source "auto".'}}}


def alternatives_rows(model: Any, alternatives: int) -> int:
    """Decoder rows per text for `alternatives` (translate above: one more beam, at least the default's)."""
    defaults = model.generation
    if not alternatives:
        return max(defaults.num_beams, defaults.num_return_sequences)
    return max(defaults.num_beams, alternatives + 1)


def openapi_body(model: Any, view: LanguageView, bounds: Any, most_alternatives: int) -> dict[str, Any]:
    """The request body's schema, JSON and form: LibreTranslate's parameters with this server's limits
    (a list q holds the texts whose rows fit max_rows: fewer with more alternatives)."""
    # any length: a text over the source limit is split into sentences, and those cut at it (serve.documents)
    text = {k: v for k, v in text_schema(model, bounds).items() if k != "maxLength"}
    one = {**text, "minLength": 1}  # an empty q is "missing", as LibreTranslate says
    source = {"type": "string", "enum": ["auto", *view.sources]} if view.sources else {"type": "string",
                                                                                       "minLength": 1}
    target = {"type": "string", "enum": view.targets} if view.targets else {"type": "string", "minLength": 1}
    common = {"source": source, "target": target,
              "alternatives": {"type": "integer", "minimum": 0, "maximum": most_alternatives,
                               "description": "Other translations wanted (n-best)."},
              "api_key": {"type": "string", "description": "The API key (or Authorization: Bearer KEY)."}}
    texts = {"type": "array", "minItems": 1, "maxItems": bounds.max_texts, "items": text}
    as_json = {"type": "object", "required": ["q", "source", "target"], "properties": {
        "q": {"anyOf": [one, texts]}, "format": {"enum": [*markup.FORMATS, "", None]}, **common}}
    caps = [min(bounds.max_texts, bounds.max_rows // alternatives_rows(model, a)) for a in range(most_alternatives + 1)]
    if min(caps) < bounds.max_texts:  # one branch per alternatives value; absent is 0
        as_json["anyOf"] = [{"properties": {"alternatives": {"const": a}, "q": {"maxItems": cap}},
                             "required": [] if a == 0 else ["alternatives"]} for a, cap in enumerate(caps)]
    as_form = {"type": "object", "required": ["q", "source", "target"], "properties": {
        "q": one, "format": {"type": "string", "enum": [*markup.FORMATS, ""]}, **common}}
    if not model.manifest.tokenizer:  # text in, text out: nothing is valid without a tokenizer
        as_json = as_form = {"not": {}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": as_json},
                                                          FORM: {"schema": as_form}}}}
