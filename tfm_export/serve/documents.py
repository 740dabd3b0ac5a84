"""A request's texts as documents: each split into sentences (text.sentences; a sentence over the source
limit cut at it, logged), every sentence of the request decoded through the engine, and each text joined
back with its own whitespace. Used by /v1/translate's `split_sentences` and LibreTranslate's /translate
(which splits by default, as LibreTranslate does).

The sentences go to the engine in waves of at most max_texts sentences and max_rows decoder rows, each wave
waited for before the next: a document of thousands of sentences takes no more of the server at once than
the largest request it accepts, and never floods the queue (a full queue is still a 429). The limits on a
request hold for its texts (max_texts); its sentences are counted in waves.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generator, Sequence

from ..errors import InputError
from ..text import markup, sentences
from .engine import LimitError, ServeSettings, check_codes, limits, naming, prepare_sources, rows_per_source
from .translation import collect, submit

# One translation of a document: the ids of its sentences one after another, and its text.
Rendering = tuple[list[int], str]


def plan_documents(model: Any, settings: ServeSettings, texts: Sequence[str], source_lang: str | None,
                   target_lang: str | None) -> list[list[sentences.Piece]]:
    """Each text's pieces (its sentences, cut at the source limit), checked as prepare_sources checks a
    request's texts: their count (413), the codes and the tokenizer (422)."""
    bounds = limits(model, settings)
    if len(texts) > bounds.max_texts:
        raise LimitError(f"{len(texts)} sources exceed the limit of {bounds.max_texts} per request "
                         f"({{max_texts}}); split the request", options={"max_texts": None})
    if not model.manifest.tokenizer:
        raise InputError("this export has no tokenizer, so it cannot split {texts} into sentences; send token ids",
                         options={"texts": None})
    if source_lang is not None or target_lang is not None:
        check_codes(model, source_lang, target_lang)
    language = source_lang or model.tokenizer.languages.source_default
    count = lambda text: len(model.encode(text, source_lang, target_lang))  # noqa: E731
    with naming("texts"):
        return [sentences.plan(text, language, count, bounds.src_len) for text in texts]


async def translate_documents(state: dict[str, Any], settings: ServeSettings, texts: Sequence[str],
                              max_new_tokens: int | None, options: dict[str, Any], source_lang: str | None,
                              target_lang: str | None, request: Any) -> list[list[Rendering]] | None:
    """Per text, its translations (num_return_sequences of them, best first: the k-th joins each sentence's
    k-th hypothesis); None when the client went away. Library errors are raised for the caller to answer."""
    engine = state["engine"]
    model = engine.model
    plans = plan_documents(model, settings, texts, source_lang, target_lang)
    pieces = [text for plan in plans for text in sentences.texts_of(plan)]
    config = model.generation_config(**{**model.language_options(target_lang), **options})
    bounds = limits(model, settings)
    rows = len(texts) * rows_per_source(config)
    if rows > bounds.max_rows:  # the request's own texts, as prepare_sources counts them: its sentences go in waves
        raise LimitError(f"{len(texts)} sources x {rows_per_source(config)} rows each (num_beams, "
                         f"num_return_sequences) = {rows} decoder rows exceed the limit of {bounds.max_rows} per "
                         f"request ({{max_rows}}, a server setting: tfm-export serve --max-rows); send fewer "
                         f"sources or beams", options={"max_rows": None})
    wave = max(1, min(bounds.max_texts, bounds.max_rows // rows_per_source(config)))
    narrow = dataclasses.replace(settings, max_texts=wave)  # the request's own count was checked above
    decoded = []
    for start in range(0, len(pieces), wave):
        sources, steps, wave_config = prepare_sources(model, narrow, pieces[start:start + wave], None,
                                                      max_new_tokens, options, source_lang, target_lang)
        work = submit(engine, state["mailbox"], sources, steps, wave_config)
        if not await collect(work, state["metrics"], request):
            return None
        decoded += work.best()
    return join_documents(model, plans, decoded, config.num_return_sequences)


def join_documents(model: Any, plans: list[list[sentences.Piece]], decoded: list[list[Any]],
                   wanted: int) -> list[list[Rendering]]:
    """Each text's `wanted` translations from its sentences' hypotheses (in order, across the texts)."""
    it, out = iter(decoded), []
    for plan in plans:
        hypotheses = [next(it) for _ in sentences.texts_of(plan)]
        renderings = []
        for k in range(wanted):
            chosen = [hyps[min(k, len(hyps) - 1)] for hyps in hypotheses]
            ids = [token for h in chosen for token in h.ids]
            renderings.append((ids, sentences.join(plan, [model.tokenizer.decode(h.ids) for h in chosen])))
        out.append(renderings)
    return out


async def translate_texts(state: dict[str, Any], settings: ServeSettings, texts: Sequence[str], options: dict[str, Any],
                          source_lang: str | None, target_lang: str | None, request: Any) -> list[str] | None:
    """Any number of texts (a page's text nodes: serve.libretranslate's markup), max_texts at a time, as
    documents; the best translation of each, or None when the client went away."""
    size, out = limits(state["engine"].model, settings).max_texts, []
    for start in range(0, len(texts), size):
        rendered = await translate_documents(state, settings, texts[start:start + size], None, options, source_lang,
                                             target_lang, request)
        if rendered is None:
            return None
        out += [renderings[0][1] for renderings in rendered]
    return out


async def translate_markup_texts(state: dict[str, Any], settings: ServeSettings, texts: Sequence[str], form: str,
                                 options: dict[str, Any], source_lang: str | None, target_lang: str | None,
                                 request: Any) -> list[str] | None:
    """Texts with markup (`form` "html" or "markdown"): their text nodes translated as documents, the markup
    kept (text.markup); None when the client went away."""
    run = markup.steps_many([markup.parse(text, form) for text in texts])
    return await run_steps(state, settings, run, options, source_lang, target_lang, request)


async def run_steps(state: dict[str, Any], settings: ServeSettings, run: Generator[list[str], list[str], Any],
                    options: dict[str, Any], source_lang: str | None, target_lang: str | None, request: Any) -> Any:
    """text.markup's protocol (markup, a .docx file) on the engine: each round's texts (the blocks and
    inline elements of every document in one batch, then the blocks that fell back) translated as documents;
    the protocol's result, or None when the client went away."""
    try:
        wanted = next(run)
        while True:
            got = await translate_texts(state, settings, wanted, options, source_lang, target_lang, request) \
                if wanted else []
            if got is None:
                run.close()
                return None
            wanted = run.send(got)
    except StopIteration as done:
        return done.value


def document_results(rendered: list[list[Rendering]]) -> dict[str, Any]:
    """/v1/translate's answer for documents: each text's best, and every one under `hypotheses` for n-best."""
    rows = []
    for renderings in rendered:
        entries = [{"ids": ids, "text": text} for ids, text in renderings]
        rows.append({**entries[0], **({"hypotheses": entries} if len(entries) > 1 else {})})
    return {"translations": rows}
