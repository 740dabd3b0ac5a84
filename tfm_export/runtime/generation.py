"""Decoding settings (`GenerationConfig`) and results (`Hypothesis`). Torch-free.

The settings mirror Hugging Face transformers' GenerationConfig for the options we reproduce, with
the same meaning and defaults except `top_k` (0 = off here; transformers samples from the top 50 by
default). An export's manifest may carry defaults (its `generation` section, e.g. a Marian
folder's num_beams); anything else decodes greedily.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InputError


@dataclass(frozen=True)
class GenerationConfig:
    """How to pick each next token; validated on construction (one-line InputErrors)."""

    # Most tokens per row, EOS included; None: fill the model's max_len (checked against it when decoding).
    max_new_tokens: int | None = None
    num_beams: int = 1  # 1: greedy (or sampling); >1: beam search
    length_penalty: float = 1.0  # finished beams are ranked by sum(log p) / length ** length_penalty
    # When a beam search stops: True as soon as num_beams hypotheses are finished; False when the best
    # running beam can no longer beat them at its current length; "never" at the best possible length.
    early_stopping: bool | str = False
    num_return_sequences: int = 1  # hypotheses returned per source, best first (<= num_beams, or samples)
    do_sample: bool = False  # sample from the (warped) distribution instead of taking the best token
    temperature: float = 1.0  # sampling: logits / temperature
    top_k: int = 0  # sampling: keep the k most likely tokens (0: all)
    top_p: float = 1.0  # sampling: keep the smallest set whose probability reaches top_p (nucleus)
    seed: int = 0  # sampling: the runtime's own RNG (runtime.sampling.SplitMix64), same tokens everywhere
    min_new_tokens: int = 0  # EOS is banned until this many tokens were generated
    repetition_penalty: float = 1.0  # log-probs of tokens already in the row: x * p if x < 0 else x / p
    no_repeat_ngram_size: int = 0  # ban any token that would repeat an n-gram of the row (0: off)
    forced_eos: bool = False  # the last allowed token is EOS (transformers' forced_eos_token_id)
    # The first generated token (transformers' forced_bos_token_id): a multilingual model's target
    # language, BART's <s>. Greedy decoding stays on its fast path (the first step's id is replaced).
    forced_bos_token_id: int | None = None
    # Log-softmax again after the processors (transformers' renormalize_logits): beam scores then sum
    # normalised log-probabilities even where a processor banned ids (published OPUS-MT folders set it).
    renormalize_logits: bool = False

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_at_least(low: int):
    return lambda value: _is_int(value) and value >= low


def _number_above(low: float):
    return lambda value: _is_number(value) and value > low


# (field, test of the config, what the field must be): the message names the field as data (the CLI
# renders `--top-p 1.5`, the API `options["top_p"]=1.5`).
CHECKS = (
    ("num_beams", lambda c: _int_at_least(1)(c.num_beams), "must be an integer of at least 1"),
    ("length_penalty", lambda c: _is_number(c.length_penalty), "must be a number"),
    ("early_stopping", lambda c: isinstance(c.early_stopping, bool) or c.early_stopping == "never",
     'must be true, false or "never"'),
    ("num_return_sequences", lambda c: _int_at_least(1)(c.num_return_sequences), "must be at least 1"),
    ("num_return_sequences", lambda c: c.do_sample or c.num_return_sequences <= c.num_beams,
     "cannot exceed the number of beams; raise num_beams or return fewer hypotheses"),
    ("do_sample", lambda c: not (c.do_sample and c.num_beams > 1),
     "with num_beams > 1 (beam sampling) is not supported; sample with num_beams 1"),
    ("temperature", lambda c: _number_above(0)(c.temperature), "must be greater than 0"),
    ("top_k", lambda c: _int_at_least(0)(c.top_k), "must be 0 (off) or more"),
    ("top_p", lambda c: _number_above(0)(c.top_p) and c.top_p <= 1, "must be in (0, 1]"),
    ("seed", lambda c: _int_at_least(0)(c.seed) and c.seed < 2**64, "must be an integer in [0, 2**64)"),
    ("min_new_tokens", lambda c: _int_at_least(0)(c.min_new_tokens), "must be 0 or more"),
    ("repetition_penalty", lambda c: _number_above(0)(c.repetition_penalty), "must be greater than 0"),
    ("no_repeat_ngram_size", lambda c: _int_at_least(0)(c.no_repeat_ngram_size), "must be 0 (off) or more"),
    ("forced_eos", lambda c: isinstance(c.forced_eos, bool), "must be true or false"),
    ("forced_bos_token_id", lambda c: c.forced_bos_token_id is None or _int_at_least(0)(c.forced_bos_token_id),
     "must be a token id (0 or more) or null"),
    ("renormalize_logits", lambda c: isinstance(c.renormalize_logits, bool), "must be true or false"),
    ("do_sample", lambda c: isinstance(c.do_sample, bool), "must be true or false"),
)


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
