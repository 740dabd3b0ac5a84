"""`generate`, `generate_ids`, `translate` and `stream`: one front end for the ONNX and eager runners.

A runner (runtime.exported.ExportedModel, model.eager.EagerModel) provides its config, default
`generation` settings, tokenizer, `source_input` (ids -> its encoder input) and `cache_for` (the
runtime.decode.loop.DecoderCache a decode runs on); this mixin turns options into a GenerationConfig,
picks the strategy (runtime.decode.strategies) and runs the one driver (runtime.decode.loop.decode). Torch-free.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

from ..errors import InputError
from ..text import markup, sentences
from .decode import speculative
from .decode.loop import DecodeTimings, DecoderCache, Observer, decode, run
from .decode.prefix import prefixed_generate
from .decode.scoring import ScoreResult, score as score_targets
from .decode.draft_length import DraftLength
from .options.generation import GenerationConfig, Hypothesis
from .sources import resolve_max_new_tokens, trim
from .decode.strategies import Greedy, strategy_for
from .speculating import speculative_hypotheses, speculative_rows

log = logging.getLogger(__name__)

# Sentences of a document decoded together: a document's sentences are many short sources, and a batch this
# wide keeps the decoder busy without a cache of thousands of rows.
DOCUMENT_BATCH = 32


class GenerateMixin:
    """Decoding methods shared by the runners; see the module docstring."""

    config: Any  # TransformerConfig
    generation: GenerationConfig  # defaults: the export's `generation` section, else greedy
    tokenizer: Any
    # the speculative draft-length policies, kept across calls (runtime.speculating); each runner sets it when built
    draft_lengths: dict[tuple, DraftLength]

    def source_input(self, sources: Sequence[Sequence[int]]) -> Any:
        """The checked sources as the runner's encoder input (batch, src_len) (runtime.sources)."""
        ...

    def cache_for(self, config: GenerationConfig, steps: int) -> DecoderCache:
        """The decoder cache a decode of `config` for `steps` tokens runs on."""
        ...

    def checking_cache(self) -> DecoderCache | None:
        """The cache a speculative decode checks drafts on (runtime.decode.speculative); None: this runner has
        none (an export made before earlier_logits, the eager model), and speculation is plain greedy."""
        return None

    def generation_config(self, config: GenerationConfig | None = None, **options: Any) -> GenerationConfig:
        """`config` (default: this model's `generation`) with `options` (None values ignored) applied."""
        config = (config or self.generation).replace(**options)
        forced = config.forced_bos_token_id
        if forced is not None and forced >= self.config.tgt_vocab_size:
            raise InputError(f"{{forced_bos_token_id}} {forced} is out of range for a vocabulary of "
                             f"{self.config.tgt_vocab_size} ids", options={"forced_bos_token_id": forced})
        return config

    def steps_for(self, config: GenerationConfig) -> int:
        """How many tokens to generate per row: `config.max_new_tokens`, checked against what fits."""
        limit, what = self._step_limit(config)
        return resolve_max_new_tokens(config.max_new_tokens, 1, limit, what)

    def _step_limit(self, config: GenerationConfig) -> tuple[int, str]:
        """The most tokens a row can take and what sets it (a static cache may hold fewer than max_len)."""
        return self.config.max_len, "the model's max_len"

    def generate(self, sources: Sequence[Sequence[int]], config: GenerationConfig | None = None,
                 timings: DecodeTimings | None = None, row_offset: int = 0, observer: Observer | None = None,
                 target_prefix: Sequence[Sequence[int]] | None = None, return_alternatives: bool = False,
                 use_vmap: bool = False, assistant: Any = None, **options: Any) -> list[list[Hypothesis]]:
        """Per source, `num_return_sequences` hypotheses (ids without BOS/EOS, score), best first.

        `options` are GenerationConfig fields (num_beams=4, do_sample=True, seed=1, ...). `row_offset`:
        these sources are the rows from row_offset on of a larger call, whose samples they reproduce
        (a server decoding one source of a request alone). `observer` watches every step
        (runtime.decode.loop.Observer: export validation records the logits). `target_prefix`: each source's
        first target ids, completed (CTranslate2's; hypotheses start with them); `return_alternatives`:
        num_return_sequences alternatives at the first position after the prefix (runtime.decode.prefix);
        `use_vmap`: the output head restricted to the sources' shortlist under the model's vocabulary map.
        `assistant` or `prompt_lookup_num_tokens` with num_beams 1: speculative decoding (`generate_ids`';
        sampling: num_return_sequences rows per source), whose hypotheses carry no score (nan)."""
        if use_vmap:
            return self.shortlisted(sources).generate(sources, config, timings, row_offset, observer, target_prefix,
                                                      return_alternatives, **options)
        if target_prefix is not None or return_alternatives:
            return self._prefixed(sources, config, target_prefix, return_alternatives, options)
        config = self.generation_config(config, **options)
        if speculative.wanted(config, assistant) and config.num_beams == 1 and observer is None:
            hyps = speculative_hypotheses(self, sources, config, assistant, timings, row_offset)
            if hyps is not None:
                return hyps
        src, steps = self.source_input(sources), self.steps_for(config)
        strategy = strategy_for(src.shape[0], steps, config, self.config, row_offset)
        return run(self.cache_for(config, steps), src, strategy, timings, observer)

    def _prefixed(self, sources: Sequence[Sequence[int]], config: GenerationConfig | None,
                  target_prefix: Sequence[Sequence[int]] | None, alternatives: bool, options: dict[str, Any]
                  ) -> list[list[Hypothesis]]:
        """`generate` with a target prefix or alternatives (runtime.decode.prefix): the alternatives' count is
        num_return_sequences, decoded greedily whatever num_beams says."""
        n = options.pop("num_return_sequences", None) if alternatives else None
        config = self.generation_config(config, **options)
        if alternatives:
            n = n or config.num_return_sequences
            config = GenerationConfig.from_dict({**config.to_dict(), "num_return_sequences": 1, "num_beams": 1})
        return prefixed_generate(self, sources, target_prefix, config, n or 0)

    def generate_ids(self, sources: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                     stop_at_eos: bool = True, timings: DecodeTimings | None = None,
                     config: GenerationConfig | None = None, assistant: Any = None, **options: Any
                     ) -> list[list[int]]:
        """The best hypothesis' ids per source (without BOS/EOS). With `stop_at_eos=False` every row
        gets exactly max_new_tokens ids (benchmarks; beam search then bans EOS until the last step).
        `assistant`: an opened draft export of the same vocabulary; with it or `prompt_lookup_num_tokens`, greedy
        decoding speculates, source by source (runtime.decode.speculative: the same ids; `timings` counts the
        drafted and accepted ids), greedy decoding under processors too (repetition_penalty,
        no_repeat_ngram_size, min_new_tokens, forced EOS: runtime.decode.checking), and sampling (the same
        distribution, seeded: runtime.decode.speculative_sampling)."""
        config = self.generation_config(config, max_new_tokens=max_new_tokens, **options)
        src, steps = self.source_input(sources), self.steps_for(config)
        # Forced EOS as a greedy row's last token returns the row one step shorter (EOS is not returned).
        forced = stop_at_eos and config.forced_eos
        if config.is_greedy or (forced and config.replace(forced_eos=False).is_greedy):
            if stop_at_eos and speculative.wanted(config, assistant):
                rows = speculative_rows(self, sources, steps - forced, config, assistant, timings)
                if rows is not None:
                    return rows
            greedy = Greedy(src.shape[0], steps - forced, self.config, stop_at_eos, config.forced_bos_token_id)
            run(self.cache_for(config, steps - forced), src, greedy, timings)
            return [trim(r, self.config.eos_id) if stop_at_eos else r for r in greedy.generated()]
        if stop_at_eos and speculative.wanted(config, assistant) and (speculative.checkable(config)
                                                                      or config.do_sample):
            rows = speculative_rows(self, sources, steps, config, assistant, timings, processed=True)
            if rows is not None:  # greedy under processors: TokenPicker's ids; sampling: its distribution
                return rows
        elif speculative.wanted(config, assistant):
            log.warning("speculative decoding speeds up greedy decoding and sampling only: decoding without it")
        if not stop_at_eos:
            config = config.replace(min_new_tokens=steps, forced_eos=False)
        hyps = run(self.cache_for(config, steps), src, strategy_for(src.shape[0], steps, config, self.config),
                   timings)
        return [h[0].ids for h in hyps]

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text -> ids with the tokenizer; a multilingual model's `source_lang` marks the source
        (and a Marian model's `target_lang`); InputError naming the valid codes otherwise."""
        return self.tokenizer.encode(text, source_lang, target_lang)

    def language_options(self, target_lang: str | None) -> dict[str, int]:
        """GenerationConfig options that make the output `target_lang` (the forced first token)."""
        forced = self.tokenizer.forced_bos(target_lang) if target_lang is not None else None
        return {} if forced is None else {"forced_bos_token_id": forced}

    def translate(self, texts: Sequence[str], max_new_tokens: int | None = None,
                  config: GenerationConfig | None = None, source_lang: str | None = None,
                  target_lang: str | None = None, split_sentences: bool = False, format: str = "text",
                  target_prefix: Sequence[str | Sequence[int]] | None = None, return_alternatives: bool = False,
                  num_hypotheses: int = 1, use_vmap: bool = False, **options: Any) -> list[Any]:
        """Encode texts with the tokenizer, decode (the export's default decoding unless configured),
        return the best texts; `source_lang`/`target_lang`: language codes (tokenizer.languages).

        `split_sentences`: each text is a document, translated sentence by sentence (text.sentences: the
        sentences of every text decoded together, DOCUMENT_BATCH at a time by length) and joined back with its own
        whitespace; a sentence over max_len is cut at the limit (logged). Without it each text is one
        source, as always, except a text over max_len: rather than refuse it, it is translated as a
        document, with a logged warning (a call that used to raise an InputError now translates).
        `format` "html" or "markdown": each text's text nodes translated as documents and its markup kept
        (text.markup: tags, attributes, comments, code byte for byte; inline tags carried to the words).

        CTranslate2's `target_prefix` (each text's translation starts with it), `return_alternatives` and
        `num_hypotheses` (> 1: per text a list of translations, best first) decode through `hypotheses`;
        `use_vmap` (CTranslate2's): the output head scores only the texts' shortlist under the model's vocabulary
        map (runtime.decode.vmap; one shortlist for the call)."""
        if format != "text":
            return markup.translate_markup(texts, format, lambda pieces: self.translate(
                pieces, max_new_tokens, config, source_lang, target_lang, split_sentences=True, use_vmap=use_vmap,
                **options))
        if use_vmap:
            runner = self.shortlisted([self.encode(t, source_lang, target_lang) for t in texts])
            return runner.translate(texts, max_new_tokens, config, source_lang=source_lang, target_lang=target_lang,
                                    split_sentences=split_sentences, target_prefix=target_prefix,
                                    return_alternatives=return_alternatives, num_hypotheses=num_hypotheses, **options)
        if target_prefix is not None or return_alternatives or num_hypotheses > 1:
            rows = self.hypotheses(texts, target_prefix, return_alternatives, num_hypotheses, source_lang, target_lang,
                                   config, max_new_tokens=max_new_tokens, **options)
            return rows if return_alternatives or num_hypotheses > 1 else [row[0] for row in rows]
        options = {**self.language_options(target_lang), **options}
        memo: dict[str, list[int]] = {}  # each text and sentence encoded once: the plan counts, the batch reuses

        def encoded(text: str) -> list[int]:
            if text not in memo:
                memo[text] = self.encode(text, source_lang, target_lang)
            return memo[text]

        limit = self.config.max_len
        sources = None if split_sentences else [encoded(t) for t in texts]  # documents need no whole encoding
        if sources is not None and all(len(ids) <= limit for ids in sources):  # the plain call: one batch
            rows = self.generate_ids(sources, max_new_tokens, config=config, **options)
            return [self.tokenizer.decode(ids) for ids in rows]
        split = [True] * len(texts) if sources is None else [len(ids) > limit for ids in sources]
        for n, ids in ((n, ids) for n, ids in enumerate(sources or [], 1) if len(ids) > limit):
            log.warning("text %d has %d tokens, more than the model's max_len of %d: translated sentence by "
                        "sentence (split_sentences=True)", n, len(ids), limit)
        language = source_lang or self.tokenizer.languages.source_default
        plans = [sentences.plan(text, language, lambda t: len(encoded(t)), limit) if cut
                 else [sentences.Piece("", text, "")] for text, cut in zip(texts, split)]
        pieces = [encoded(text) for plan in plans for text in sentences.texts_of(plan)]
        rows = sentences.by_length(pieces, DOCUMENT_BATCH, lambda batch: self.generate_ids(
            batch, max_new_tokens, config=config, **options))
        decoded = iter(self.tokenizer.decode(ids) for ids in rows)
        return [sentences.join(plan, [next(decoded) for _ in sentences.texts_of(plan)]) for plan in plans]

    def shortlisted(self, sources: Sequence[Sequence[int]]) -> "GenerateMixin":
        """This runner with its output head restricted to the sources' vocabulary shortlist (use_vmap)."""
        raise InputError("use_vmap: this runner has no vocabulary shortlist (an opened export has)")

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids without EOS (a target prefix, a translation to score)."""
        encode = getattr(self.tokenizer, "encode_target", None)
        if encode is None:
            raise InputError("this export's tokenizer cannot encode target text; give target ids instead")
        return encode(text)

    def hypotheses(self, texts: Sequence[str], target_prefix: Sequence[str | Sequence[int]] | None = None,
                   return_alternatives: bool = False, num_hypotheses: int = 1, source_lang: str | None = None,
                   target_lang: str | None = None, config: GenerationConfig | None = None, **options: Any
                   ) -> list[list[str]]:
        """`translate` with CTranslate2's decoding options: per text its `num_hypotheses` translations, best
        first (the n-best, or with `return_alternatives` the alternatives after the prefix), each completing its
        `target_prefix` (text, or target ids; None or "" for none) when given."""
        sources = [self.encode(t, source_lang, target_lang) for t in texts]
        prefixes = None if target_prefix is None else [
            self.encode_target(p) if isinstance(p, str) else list(p) for p in target_prefix]
        options = {**self.language_options(target_lang), **options, "num_return_sequences": num_hypotheses}
        if not return_alternatives and num_hypotheses > 1 and not options.get("do_sample"):
            options.setdefault("num_beams", max(num_hypotheses, self.generation.num_beams))
        rows = self.generate(sources, config, target_prefix=prefixes, return_alternatives=return_alternatives,
                             **options)
        return [[self.tokenizer.decode(h.ids) for h in row] for row in rows]

    def score(self, sources: Sequence[str | Sequence[int]], targets: Sequence[str | Sequence[int]],
              source_lang: str | None = None, target_lang: str | None = None) -> list[ScoreResult]:
        """CTranslate2's score_batch: per (source, target) the log-probability of each target token, EOS
        included, and their sum and mean (runtime.decode.scoring). Texts or ids; a text target gets the model's
        forced first token in front (the target language's, or forced_bos_token_id), as its translations have."""
        srcs = [self.encode(s, source_lang, target_lang) if isinstance(s, str) else list(s) for s in sources]
        forced = {**{"forced_bos_token_id": self.generation.forced_bos_token_id},
                  **self.language_options(target_lang)}["forced_bos_token_id"]
        tgts = []
        for t in targets:
            ids = self.encode_target(t) if isinstance(t, str) else list(t)
            tgts.append([forced, *ids] if isinstance(t, str) and forced is not None and ids[:1] != [forced] else ids)
        return score_targets(self, srcs, tgts)

    def stream(self, source: str | Sequence[int], config: GenerationConfig | None = None,
               source_lang: str | None = None, target_lang: str | None = None, **options: Any) -> Iterator[Any]:
        """Yield one source's output as it is decoded: token ids for an id list, text pieces for a str.

        Greedy and sampling yield each id as it is chosen (EOS is not yielded). Beam search cannot
        know its result before it ends (a later step can overtake every running beam), so it yields
        the best hypothesis' ids (or text) once, when the search is done."""
        options = {**self.language_options(target_lang), **options}
        config = self.generation_config(config, num_return_sequences=1, **options)
        ids = self.encode(source, source_lang, target_lang) if isinstance(source, str) else list(source)
        pieces = _ids_stream(self, ids, config)
        yield from (text_pieces(self.tokenizer, pieces) if isinstance(source, str) else pieces)


def _ids_stream(model: GenerateMixin, ids: list[int], config: GenerationConfig) -> Iterator[int]:
    """The new ids of one source as they are decided (all at the end for beam search)."""
    src, steps = model.source_input([ids]), model.steps_for(config)
    strategy = strategy_for(1, steps, config, model.config)
    eos = model.config.eos_id
    for strategy in decode(model.cache_for(config, steps), src, strategy):
        if config.num_beams == 1:
            token = int(strategy.ids[0, strategy.step - 1])
            if token == eos:
                break
            yield token
    if config.num_beams > 1:
        yield from strategy.results()[0][0].ids


def text_pieces(tokenizer: Any, ids: Iterator[int]) -> Iterator[str]:
    """Text pieces from growing ids: each yield is what decoding all ids so far adds to the text so
    far (held back while a piece would change earlier text, e.g. in the middle of a multi-byte token)."""
    seen, shown = [], ""
    for token in ids:
        seen.append(token)
        text = tokenizer.decode(seen)
        if text.startswith(shown) and len(text) > len(shown):
            yield text[len(shown):]
            shown = text
