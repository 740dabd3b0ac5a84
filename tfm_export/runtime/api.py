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
from ..text import sentences
from .decode.loop import DecodeTimings, DecoderCache, Observer, decode, run
from .options.generation import GenerationConfig, Hypothesis
from .sources import resolve_max_new_tokens, trim
from .decode.strategies import Greedy, strategy_for

log = logging.getLogger(__name__)

# Sentences of a document decoded together: a document's sentences are many short sources, and a batch this
# wide keeps the decoder busy without a cache of thousands of rows.
DOCUMENT_BATCH = 32


class GenerateMixin:
    """Decoding methods shared by the runners; see the module docstring."""

    config: Any  # TransformerConfig
    generation: GenerationConfig  # defaults: the export's `generation` section, else greedy
    tokenizer: Any

    def source_input(self, sources: Sequence[Sequence[int]]) -> Any:
        """The checked sources as the runner's encoder input (batch, src_len) (runtime.sources)."""
        ...

    def cache_for(self, config: GenerationConfig, steps: int) -> DecoderCache:
        """The decoder cache a decode of `config` for `steps` tokens runs on."""
        ...

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
                 **options: Any) -> list[list[Hypothesis]]:
        """Per source, `num_return_sequences` hypotheses (ids without BOS/EOS, score), best first.

        `options` are GenerationConfig fields (num_beams=4, do_sample=True, seed=1, ...). `row_offset`:
        these sources are the rows from row_offset on of a larger call, whose samples they reproduce
        (a server decoding one source of a request alone). `observer` watches every step
        (runtime.decode.loop.Observer: export validation records the logits)."""
        config = self.generation_config(config, **options)
        src, steps = self.source_input(sources), self.steps_for(config)
        strategy = strategy_for(src.shape[0], steps, config, self.config, row_offset)
        return run(self.cache_for(config, steps), src, strategy, timings, observer)

    def generate_ids(self, sources: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                     stop_at_eos: bool = True, timings: DecodeTimings | None = None,
                     config: GenerationConfig | None = None, **options: Any) -> list[list[int]]:
        """The best hypothesis' ids per source (without BOS/EOS). With `stop_at_eos=False` every row
        gets exactly max_new_tokens ids (benchmarks; beam search then bans EOS until the last step)."""
        config = self.generation_config(config, max_new_tokens=max_new_tokens, **options)
        src, steps = self.source_input(sources), self.steps_for(config)
        # Forced EOS as a greedy row's last token returns the row one step shorter (EOS is not returned).
        forced = stop_at_eos and config.forced_eos
        if config.is_greedy or (forced and config.replace(forced_eos=False).is_greedy):
            greedy = Greedy(src.shape[0], steps - forced, self.config, stop_at_eos, config.forced_bos_token_id)
            run(self.cache_for(config, steps - forced), src, greedy, timings)
            return [trim(r, self.config.eos_id) if stop_at_eos else r for r in greedy.generated()]
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
                  target_lang: str | None = None, split_sentences: bool = False, **options: Any) -> list[str]:
        """Encode texts with the tokenizer, decode (the export's default decoding unless configured),
        return the best texts; `source_lang`/`target_lang`: language codes (tokenizer.languages).

        `split_sentences`: each text is a document, translated sentence by sentence (text.sentences: the
        sentences of every text decoded together, DOCUMENT_BATCH at a time) and joined back with its own
        whitespace; a sentence over max_len is cut at the limit (logged). Without it each text is one
        source, as always, except a text over max_len: rather than refuse it, it is translated as a
        document, with a logged warning (a call that used to raise an InputError now translates)."""
        sources = [self.encode(t, source_lang, target_lang) for t in texts]
        options = {**self.language_options(target_lang), **options}
        limit = self.config.max_len
        split = [split_sentences or len(ids) > limit for ids in sources]
        if not any(split):  # the plain call: one batch, as it always was
            rows = self.generate_ids(sources, max_new_tokens, config=config, **options)
            return [self.tokenizer.decode(ids) for ids in rows]
        for n in (n for n, ids in enumerate(sources, 1) if len(ids) > limit and not split_sentences):
            log.warning("text %d has %d tokens, more than the model's max_len of %d: translated sentence by "
                        "sentence (split_sentences=True)", n, len(sources[n - 1]), limit)
        language = source_lang or self.tokenizer.languages.source_default
        count = lambda text: len(self.encode(text, source_lang, target_lang))  # noqa: E731
        plans = [sentences.plan(text, language, count, limit) if cut else [sentences.Piece("", text, "")]
                 for text, cut in zip(texts, split)]
        pieces = [self.encode(text, source_lang, target_lang) for plan in plans for text in sentences.texts_of(plan)]
        rows = [row for start in range(0, len(pieces), DOCUMENT_BATCH)
                for row in self.generate_ids(pieces[start:start + DOCUMENT_BATCH], max_new_tokens, config=config,
                                             **options)]
        decoded = iter(self.tokenizer.decode(ids) for ids in rows)
        return [sentences.join(plan, [next(decoded) for _ in sentences.texts_of(plan)]) for plan in plans]

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
