"""CTranslate2's routes in the server's OpenAPI schema (serve.ct2): /v1/translate's `target_prefix` and
`return_alternatives`, and POST /v1/score, with the rules serve.ct2 enforces (a 422 naming the field, a 413
over a size limit):

- a prefix or a target is text the target tokenizer encodes (a character tokenizer's characters, as many as
  fit) or target ids within the vocabulary, short enough to leave room in the decoder (a prefix at least one
  token to generate; a scored target its EOS). A multilingual model puts its forced first token in front of
  a prefix (unless the prefix starts with it) and of a text target, so the schema leaves room for it;
- prefixes and alternatives translate each text as one sentence (not with `split_sentences`); streamed, they
  are decoded first and sent as the plain stream's events;
- alternatives decode greedily (num_beams 1 or unset, do_sample false or unset), num_return_sequences of them
  per source (default 1), with the sources that fit max_rows (that many rows each): one more decoding branch
  per run of those, beside serve.contract's;
- a scored source is not empty (a character tokenizer: at least one character).

One rule is in the fields' descriptions only: one prefix (target) per source (serve.ct2 answers a 422 naming
the field). JSON Schema cannot compare two arrays' lengths, and a branch per source count, times the decoding
branches, is past what schema-driven generators take (schemathesis' canonical form gives up at about 50
branches). So that valid prefixed requests are sent on every run, both request schemas carry `examples` of this
model's (`translate_examples`, `score_examples`: ids within its vocabularies, a text target where its tokenizer
encodes one), which schemathesis' examples phase sends and checks against the response schema.

serve.app installs them with serve.contract's (install_openapi's `more`: CONSTRAINTS), TranslateRequest's after
serve.contract.constrain (its decoding branches at allOf[1], its split_sentences rule at allOf[2]).
"""

from __future__ import annotations

from typing import Any

from ..runtime.options.generation import GenerationConfig
from .contract import LanguageView, _nullable, _runs, served_name, sources_for, text_schema
from .engine import Limits, ServeSettings, limits


def step_limit(model: Any) -> int:
    """The decoder positions a row has: a prefix and what follows it, or a scored target with its EOS."""
    return model._step_limit(GenerationConfig())[0]


def forces_first(model: Any) -> bool:
    """Whether the export puts a forced first token in front of a target (forced_bos_token_id, or a
    multilingual tokenizer's target language)."""
    return model.generation.forced_bos_token_id is not None or bool(LanguageView.of(model).targets)


def target_schemas(model: Any, longest: int) -> list[dict[str, Any]]:
    """A target (a prefix, a translation to score) of at most `longest` tokens: target ids, and text where
    the tokenizer encodes target text (a character tokenizer's characters, exactly)."""
    ids = {"type": "array", "maxItems": max(longest, 0),
           "items": {"type": "integer", "minimum": 0, "maximum": model.config.tgt_vocab_size - 1}}
    tokenizer = model.manifest.tokenizer or {}
    if not tokenizer or getattr(model.tokenizer, "encode_target", None) is None:
        return [ids]
    if tokenizer.get("type") != "chars":
        return [{"type": "string"}, ids]
    chars = tokenizer["tgt_vocab"][tokenizer.get("specials", 3):]
    text: dict[str, Any] = {"type": "string", "maxLength": max(longest, 0)}
    if all(ord(ch) <= 0xFFFF for ch in chars):
        text["pattern"] = "^[" + "".join(f"\\u{ord(ch):04x}" for ch in chars) + "]*$"
    return [text, ids]


def alternatives_branches(bounds: Limits, settings: ServeSettings) -> list[dict[str, Any]]:
    """return_alternatives: greedy, num_return_sequences (default 1) rows per source, the sources max_rows fits."""
    branches = []
    for lo, hi in _runs([sources_for(n, bounds) for n in range(1, settings.max_beams + 1)]):  # n = lo + 1 ..
        count = {"anyOf": [{"type": "integer", "minimum": lo + 1, "maximum": hi}] + ([{"type": "null"}] if not lo else [])}
        props: dict[str, Any] = {"return_alternatives": {"const": True}, "num_beams": {"enum": [1, None]},
                                 "do_sample": {"enum": [False, None]}, "num_return_sequences": count,
                                 "split_sentences": {"const": False}}
        most = sources_for(hi, bounds)
        if most < bounds.max_texts:
            props.update({name: {"maxItems": most} for name in ("texts", "ids")})
        branches.append({"properties": props, "required": ["return_alternatives"] + ([] if not lo else
                                                                                    ["num_return_sequences"])})
    return branches


def constrain_translate(request: dict[str, Any], model: Any, settings: ServeSettings) -> None:
    """TranslateRequest's schema (serve.contract.constrain's, its decoding branches at allOf[1]) with the
    prefix's and the alternatives' rules."""
    bounds, props = limits(model, settings), request["properties"]
    targets = target_schemas(model, step_limit(model) - 1 - forces_first(model))
    kept = {k: v for k, v in props["target_prefix"].items() if k in ("title", "description")}
    props["target_prefix"] = {**kept, "type": "array", "minItems": 1, "maxItems": bounds.max_texts,
                              "items": {"anyOf": targets}}  # not null: omitted for none
    decoding = request["allOf"][1]["anyOf"]
    for branch in decoding:  # the plain decoding branches: without alternatives
        branch["properties"]["return_alternatives"] = {"const": False}
    decoding += alternatives_branches(bounds, settings)
    # split_sentences translates documents, sentence by sentence: not streamed, and no prefix or alternatives
    request["allOf"][2] = {"anyOf": [{"properties": {"split_sentences": {"const": False}}}, {"properties": {
        "stream": {"const": False}, "return_alternatives": {"const": False}}, "not": {"required": ["target_prefix"]}}]}
    request["examples"] = translate_examples(model, bounds)


def _example_ids(vocab: int, count: int) -> list[int]:
    """`count` ids of a vocabulary of `vocab` for the examples: past the usual specials where there is room."""
    return [min(4 + i, vocab - 1) for i in range(count)]


def _target_text(model: Any) -> str | None:
    """A short target text the tokenizer encodes (a character tokenizer's first characters), or None."""
    tokenizer = model.manifest.tokenizer or {}
    if not tokenizer or getattr(model.tokenizer, "encode_target", None) is None:
        return None
    return "".join(tokenizer["tgt_vocab"][tokenizer.get("specials", 3):][:2]) if tokenizer.get("type") == "chars" \
        else "a"


def translate_examples(model: Any, bounds: Limits) -> list[dict[str, Any]]:
    """Valid prefixed and alternatives requests for this model (the schema's `examples`): one prefix per source,
    ids and (where the tokenizer encodes target text) text; alternatives after no prefix and after one."""
    src, (tgt,) = _example_ids(bounds.src_vocab, 2), _example_ids(model.config.tgt_vocab_size, 1)
    pair = min(2, bounds.max_texts)
    text = _target_text(model)
    first: str | list[int] = text if text else [tgt]
    out: list[dict[str, Any]] = [{"ids": [src], "target_prefix": [[tgt]]},
                                 {"ids": [src[:1]] * pair, "target_prefix": [first] + [[]] * (pair - 1)}]
    n = min(2, bounds.max_beams, bounds.max_rows)
    out.append({"ids": [src], "return_alternatives": True, **({"num_return_sequences": n} if n > 1 else {})})
    out.append({"ids": [src], "target_prefix": [[tgt]], "return_alternatives": True})
    return out


def score_examples(model: Any, bounds: Limits) -> list[dict[str, Any]]:
    """Valid /v1/score requests for this model (the schema's `examples`): one target per source, ids and text."""
    src, tgt = _example_ids(bounds.src_vocab, 2), _example_ids(model.config.tgt_vocab_size, 2)
    pair = min(2, bounds.max_texts)
    text = _target_text(model)
    out: list[dict[str, Any]] = [{"ids": [src] * pair, "target_ids": [tgt, tgt[:1]][:pair]}]
    if text:
        out.append({"ids": [src], "targets": [text]})
    return out


def constrain_score(request: dict[str, Any], model: Any, settings: ServeSettings) -> None:
    """ScoreRequest's schema, narrowed to what this server accepts (a server of several exports states only
    their names: serve.multi)."""
    props = request["properties"]
    bounds, view = limits(model, settings), LanguageView.of(model)
    longest = step_limit(model) - 1  # and EOS
    text_targets, target_ids = target_schemas(model, longest - forces_first(model)), target_schemas(model, longest)
    many = {"type": "array", "minItems": 1, "maxItems": bounds.max_texts}
    source_ids = {"type": "array", "minItems": 1, "maxItems": bounds.src_len,
                  "items": {"type": "integer", "minimum": 0, "maximum": bounds.src_vocab - 1}}
    texts = {**text_schema(model, bounds), "minLength": 1}
    _nullable(props, "model", {"type": "string", "enum": [served_name(settings.folder)]})
    _nullable(props, "texts", {**many, "items": texts} if model.manifest.tokenizer else None)
    _nullable(props, "ids", {**many, "items": source_ids})
    _nullable(props, "targets", {**many, "items": text_targets[0]} if len(text_targets) > 1 else None)
    _nullable(props, "target_ids", {**many, "items": target_ids[-1]})
    _nullable(props, "source_lang", {"type": "string", "enum": view.sources} if view.sources else None)
    _nullable(props, "target_lang", {"type": "string", "enum": view.targets} if view.targets else None)
    request["allOf"] = [{"oneOf": [{"required": [name], "properties": {name: {"type": "array"}}} for name in pair]}
                        for pair in (("texts", "ids"), ("targets", "target_ids"))]
    request["examples"] = score_examples(model, bounds)


CONSTRAINTS = {"TranslateRequest": constrain_translate, "ScoreRequest": constrain_score}  # install_openapi's `more`
