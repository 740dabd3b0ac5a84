"""Decoding settings (`GenerationConfig`) and results (`Hypothesis`). Torch-free.

The settings mirror Hugging Face transformers' GenerationConfig for the options we reproduce, with
the same meaning and defaults except `top_k` (0 = off here; transformers samples from the top 50 by
default). An export's manifest may carry defaults (its `generation` section, e.g. a Marian
folder's num_beams); anything else decodes greedily.

Each option is declared once, as a field below (runtime.options.spec.option: help, bounds, check,
where it is exposed). `OPTIONS` reads them back; the checks here, the CLI's flags, the server's
request fields, the manifest schema's `generation` section and the Node runtime's options.mjs and
index.d.ts are derived from it (the last three by `make options`, runtime.options_codegen).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ...errors import InputError
from .spec import option, options_of

# The server's own ranges where GenerationConfig only says "> 0" or "a number": beyond them the
# runtime's float64 arithmetic overflows (logits / 5e-324 is inf: NaN probabilities; length ** 1e300
# raises), which would fail the decode instead of the request. Far outside anything used in practice
# (transformers' defaults are 1.0).
SMALLEST_DIVISOR = 1e-6  # temperature, repetition_penalty
LARGEST_FACTOR = 1e6  # repetition_penalty multiplies negative log-probabilities by it
LENGTH_PENALTY = 50.0  # |length_penalty|: 1e6 tokens ** 50 is still a float
SEED_END = 2**64  # the runtime's SplitMix64 seed is an unsigned 64-bit integer


@dataclass(frozen=True)
class GenerationConfig:
    """How to pick each next token; validated on construction (one-line InputErrors)."""

    # No check here: a row's limit is the model's max_len or a static cache's slots, checked when decoding
    # (so the CLI's flag checks the bound itself).
    max_new_tokens: int | None = option(
        None, "Most tokens per source, EOS included (default: all that fit the model's max_len).", minimum=1)
    num_beams: int = option(1, "Beam search with this many beams (1: greedy or sampling).",
                            "must be an integer of at least 1", minimum=1)
    length_penalty: float = option(
        1.0, "Beam search: finished hypotheses rank by sum(log p) / length ** this.",
        "must be a number", serve_bounds={"minimum": -LENGTH_PENALTY, "maximum": LENGTH_PENALTY})
    early_stopping: bool | Literal["never"] = option(
        False, "When beam search stops: true as soon as {num_beams} hypotheses are finished; false when the best "
               'running beam can no longer beat them at its current length; "never" at the best possible length.',
        'must be true, false or "never"')
    num_return_sequences: int = option(
        1, "Hypotheses per source, best first: the n-best (at most {num_beams}) or, with {do_sample}, samples.",
        "must be at least 1", minimum=1, cli="--n-best")
    do_sample: bool = option(
        False, "Sample from the (warped) distribution instead of taking the best token (with {num_beams} 1).",
        "must be true or false", cli="--sample", transformers="sampling")
    temperature: float = option(1.0, "Sampling: logits / temperature.", "must be greater than 0",
                                exclusiveMinimum=0, serve_bounds={"minimum": SMALLEST_DIVISOR},
                                transformers="sampling")
    top_k: int = option(0, "Sampling: keep the k most likely tokens (0: all).", "must be 0 (off) or more",
                        minimum=0, transformers="sampling")
    top_p: float = option(
        1.0, "Sampling: keep the smallest set of tokens whose probability reaches this (nucleus; 1: all).",
        "must be in (0, 1]", exclusiveMinimum=0, maximum=1, transformers="sampling")
    seed: int = option(0, "Sampling: the seed of the runtimes' own generator (SplitMix64): the same seed gives "
                          "the same tokens in Python and Node.",
                       "must be an integer in [0, 2**64)", minimum=0, exclusiveMaximum=SEED_END, transformers=None)
    min_new_tokens: int = option(0, "EOS is banned until this many tokens were generated.", "must be 0 or more",
                                 minimum=0)
    repetition_penalty: float = option(
        1.0, "Penalise tokens already in the row: their log-probs x become x * p if x < 0 else x / p (1: off).",
        "must be greater than 0", exclusiveMinimum=0,
        serve_bounds={"minimum": SMALLEST_DIVISOR, "maximum": LARGEST_FACTOR})
    no_repeat_ngram_size: int = option(0, "Ban any token that would repeat an n-gram of this size (0: off).",
                                       "must be 0 (off) or more", minimum=0)
    # A Hugging Face folder's forced_eos_token_id becomes this when it is the EOS id (importers.hf_generation).
    forced_eos: bool = option(False, "The last allowed token is EOS (transformers' forced_eos_token_id).",
                              "must be true or false", transformers=None)
    # Greedy decoding stays on its fast path (the first step's id is replaced). Neither the server nor the
    # CLI take an id: they take a target language code, whose token this becomes.
    forced_bos_token_id: int | None = option(
        None, "The first generated token (transformers' forced_bos_token_id): a multilingual model's target "
              "language, BART's <s>.", "must be a token id (0 or more) or null", minimum=0, serve=False, cli=False)
    # Speculative greedy decoding (runtime.decode.speculative): how fast, never which ids (plain greedy's, id for
    # id), so it is no part of is_greedy, and a runner that does not speculate (Node) may ignore it; the server
    # speculates in its rows in flight (runtime.inflight).
    # With do_sample it speculates too (runtime.decode.speculative_sampling): the same distribution, other ids
    # than plain sampling's for a seed (a runner that ignores it samples from that distribution all the same).
    prompt_lookup_num_tokens: int = option(
        0, "Greedy decoding and sampling: draft up to this many ids a step from n-grams of the source and the "
           "output so far, checked in one decoder step (transformers' prompt_lookup_num_tokens; greedy: plain "
           "greedy's ids; sampling: the same distribution; 0: off).",
        "must be 0 (off) or more", minimum=0, cli="--prompt-lookup", serve_bounds={"minimum": 0, "maximum": 64},
        transformers=None)
    num_assistant_tokens: int = option(
        20, "Greedy decoding and sampling with an assistant (a draft export): the ids it drafts at first; then +2 "
            "after a step that accepts them all, -1 otherwise (transformers' heuristic schedule).",
        "must be at least 1", minimum=1, cli="--assistant-tokens", serve=False, transformers=None)
    # Beam scores then sum normalised log-probabilities even where a processor banned ids (published
    # OPUS-MT folders set it); an export's setting, not a request's.
    renormalize_logits: bool = option(
        False, "Log-softmax again after the logits processors (transformers' renormalize_logits).",
        "must be true or false", serve=False, cli=False)

    def __post_init__(self) -> None:
        for key, ok, requirement in CHECKS:
            if not ok(self):
                raise InputError(f"{{{key}}} {requirement}", options={key: getattr(self, key)})

    def replace(self, **changes: Any) -> "GenerationConfig":
        """A copy with `changes` (None values keep the current setting)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def is_greedy(self) -> bool:
        """Plain greedy decoding: the decoder's own next_ids suffice (no logits cross to the host)."""
        # renormalize_logits does not count: a row's argmax is the same after a log-softmax; nor does
        # forced_bos_token_id: the greedy loops put it in place of the first step's id.
        return (self.num_beams == 1 and not self.do_sample and self.min_new_tokens == 0
                and self.repetition_penalty == 1.0 and self.no_repeat_ngram_size == 0 and not self.forced_eos
                and self.num_return_sequences == 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "GenerationConfig":
        """From a manifest's `generation` section (unknown keys are ignored: newer exports)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


OPTIONS = options_of(GenerationConfig)  # every field's declaration, in field order

# Rules between fields: (field, test of the config, what must hold, the same test in JavaScript for the
# Node runtime's generated options.mjs, on its camelCase config `c`). They run after every field's own
# check, so they compare values of the right types.
RULES = (
    ("num_return_sequences", lambda c: c.do_sample or c.num_return_sequences <= c.num_beams,
     "cannot exceed the number of beams; raise num_beams or return fewer hypotheses",
     "c.doSample || c.numReturnSequences <= c.numBeams"),
    ("do_sample", lambda c: not (c.do_sample and c.num_beams > 1),
     "with num_beams > 1 (beam sampling) is not supported; sample with num_beams 1",
     "!(c.doSample && c.numBeams > 1)"),
)

# (field, test of the config, what the field must be): the message names the field as data (the CLI
# renders `--top-p 1.5`, the API `options["top_p"]=1.5`).
CHECKS = (*((o.name, lambda c, o=o: o.accepts(getattr(c, o.name)), o.requirement) for o in OPTIONS if o.requirement),
          *(rule[:3] for rule in RULES))


# Plain greedy decoding, whatever an export's defaults are: every comparison that means greedy asks
# for it by name (an export's `generation` section may default to beam search, e.g. Marian's 4 beams).
GREEDY = GenerationConfig()


@dataclass(frozen=True)
class Hypothesis:
    """One decoded row: ids without BOS/EOS, and its score.

    Beam search: sum(log p) / length ** length_penalty (length counts EOS), transformers'
    `sequences_scores`. Greedy and sampling: sum(log p) of the chosen ids under the model's
    distribution after the bans (min_new_tokens, n-grams, ...), before temperature/top-k/top-p.
    """

    ids: list[int]
    score: float
