"""Speculative decoding's entry points for the runners (runtime.api's `generate` and `generate_ids`).

A runner (a runtime.api.GenerateMixin) speculates when runtime.decode.speculative.wanted says so (an
`assistant`, or prompt_lookup_num_tokens) and it has a cache that checks drafts (`checking_cache`); greedy rows
speculate source by source (runtime.decode.speculative), under processors checked by
runtime.decode.checking.ProcessorCheck, and sampling keeps its distribution
(runtime.decode.speculative_sampling). Each runner keeps its draft-length policies across calls in its
`draft_lengths` (runtime.decode.draft_length). Torch-free.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from .decode import speculative
from .decode.checking import ProcessorCheck
from .decode.loop import DecodeTimings
from .decode.speculative_sampling import sample_hypotheses, sample_sources
from .options.generation import GenerationConfig, Hypothesis

log = logging.getLogger(__name__)


def speculative_hypotheses(model: Any, sources: Sequence[Sequence[int]], config: GenerationConfig, assistant: Any,
                           timings: DecodeTimings | None, row_offset: int) -> list[list[Hypothesis]] | None:
    """`generate`'s speculative decode (num_beams 1): per source num_return_sequences hypotheses with plain
    decoding's score (runtime.decode.speculative.scored: TokenPicker's sum of log p of the processed scores);
    sampled rows are those of rows row_offset.. of the call. None: `model` cannot check drafts."""
    n, steps = config.num_return_sequences, model.steps_for(config)
    if not (config.do_sample or speculative.checkable(config)):
        rows = model.generate_ids(sources, config=config, assistant=assistant, timings=timings)
        return [[Hypothesis(r, float("nan")) for r in rows[i:i + n]] for i in range(0, len(rows), n)]
    cache = model.checking_cache()
    if cache is None:
        log.warning("this export's decoder returns only the last position's logits (exported before "
                    "earlier_logits): decoding without speculation (the same ids)")
        return None
    cfg, tokenizer = model.config, getattr(getattr(model, "manifest", None), "tokenizer", None)
    inputs = [model.source_input(sources[i:i + 1]) for i in range(len(sources))]
    if config.do_sample:
        hyps = sample_hypotheses(cache, inputs, config, cfg, tokenizer, assistant, steps, timings, n, row_offset)
    else:
        hyps = [speculative.scored(cache, src, *speculative.proposal(config, cfg, tokenizer, assistant,
                                                                     model.draft_lengths), steps, cfg, config, timings)
                for src in inputs]
    return [hyps[i:i + n] for i in range(0, len(hyps), n)]


def speculative_rows(model: Any, sources: Sequence[Any], steps: int, config: GenerationConfig, assistant: Any,
                     timings: DecodeTimings | None, processed: bool = False, samples: int = 1, first_row: int = 0
                     ) -> list[list[int]] | None:
    """Speculative greedy ids of `model`, one source at a time; None when it cannot check drafts. `processed`:
    the drafts are checked under config's processors (runtime.decode.checking.ProcessorCheck, TokenPicker's
    greedy ids) rather than on the device's argmax (Greedy's). With do_sample: `samples` sampled rows per
    source, the generators of rows first_row.. (runtime.decode.speculative_sampling.sample_sources)."""
    cache = model.checking_cache()
    if cache is None:
        log.warning("this export's decoder returns only the last position's logits (exported before "
                    "earlier_logits): decoding without speculation (the same ids)")
        return None
    cfg = model.config
    tokenizer = getattr(getattr(model, "manifest", None), "tokenizer", None)
    if config.do_sample:
        inputs = [model.source_input(sources[i:i + 1]) for i in range(len(sources))]
        return sample_sources(cache, inputs, config, cfg, tokenizer, assistant, steps, timings, samples, first_row)
    rows = []
    for i in range(len(sources)):
        proposer, policy = speculative.proposal(config, cfg, tokenizer, assistant, model.draft_lengths)
        check = ProcessorCheck(config, cfg.eos_id, steps, tuple(cfg.suppress_ids)) if processed else None
        src = model.source_input(sources[i:i + 1])
        rows.append(speculative.speculate(cache, src, proposer, policy, steps, cfg, config.forced_bos_token_id,
                                          timings, check=check))
    return rows
