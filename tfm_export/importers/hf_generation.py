"""A Hugging Face folder's generation settings (generation_config.json, else config.json): which ones our
decoding reproduces (they become the export's default decoding, so that `generate` with no options
gives what transformers' `generate` gives), which ones it does not (logged, and listed in the
checkpoint's meta), and the single-token bans that become the model's `suppress_ids`.

transformers counts the decoder start token in `max_length` and `min_length`; our `max_new_tokens`
and `min_new_tokens` count generated tokens (EOS included), so each is the length minus one.
`forced_eos_token_id` becomes `forced_eos` (the last allowed token is EOS); `forced_bos_token_id`
(BART's <s>) is kept as it is (a target language given at decoding time replaces it). A folder without
`max_length` decodes up to the model's position table (transformers would stop at its default of 20).
`renormalize_logits` is reproduced. Bans (`suppress_ids`) are masked inside the model before the
softmax, which is what transformers gives with `renormalize_logits` (published OPUS-MT folders set
it); without it, transformers' beam scores differ by the banned ids' probability, which a trained
model gives almost none.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, TfmExportError
from ..files import read_json_object

log = logging.getLogger(__name__)

# Generation settings that would change the tokens but are not part of our decoding:
# name -> the value at which they do nothing.
UNSUPPORTED_GENERATION = {
    "encoder_no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0, "begin_suppress_tokens": None, "sequence_bias": None, "exponential_decay_length_penalty": None,
    "num_beam_groups": 1, "diversity_penalty": 0.0, "constraints": None, "force_words_ids": None,
}
# transformers' defaults where they differ from runtime.options.generation.GenerationConfig's (its top_k 0 is off).
TRANSFORMERS_DEFAULTS = {"top_k": 50}


def reproduced() -> tuple[tuple[str, ...], dict[str, Any]]:
    """The settings of transformers' GenerationConfig that runtime.options.generation.GenerationConfig reproduces
    under the same names (each option declares it: `transformers=`); they become the export's default
    decoding. The sampling ones count only with do_sample (-> transformers' default when unset)."""
    from ..runtime.options.generation import OPTIONS

    always = tuple(o.name for o in OPTIONS if o.transformers == "always")
    sampling = {o.name: TRANSFORMERS_DEFAULTS.get(o.name, o.default) for o in OPTIONS if o.transformers == "sampling"}
    return always, sampling


def generation_settings(file: Path, hf: dict[str, Any]) -> dict[str, Any]:
    """What transformers' generate reads: generation_config.json (`file`) when present, else config.json (`hf`)."""
    if not file.exists():
        return dict(hf)
    return read_json_object(file, CheckpointError, "a Hugging Face model folder needs it", "re-download it")


def banned_ids(generation: dict[str, Any]) -> tuple[int, ...]:
    """Single-token `bad_words_ids` and `suppress_tokens` are static bans; longer phrases are not."""
    banned = [ids[0] for ids in generation.get("bad_words_ids") or [] if len(ids) == 1]
    return tuple(sorted(set(banned) | set(generation.get("suppress_tokens") or [])))


def generation_report(generation: dict[str, Any], eos_id: int | None = None,
                      reproduced: tuple[str, ...] = ()) -> dict[str, Any]:
    """Generation settings that change the tokens and are not reproduced (each logged once); `reproduced`:
    those the family's own decoding applies."""
    ignored = {k: generation[k] for k, off in UNSUPPORTED_GENERATION.items()
               if generation.get(k) not in (None, off) and k not in reproduced}
    phrases = [ids for ids in generation.get("bad_words_ids") or [] if len(ids) > 1]
    if phrases:
        ignored["bad_words_ids (phrases)"] = phrases
    forced = generation.get("forced_eos_token_id")
    if forced is not None and eos_id is not None and _ids(forced) != [eos_id]:
        ignored["forced_eos_token_id"] = forced
    for name, value in ignored.items():
        log.warning("generation setting %s=%r is not reproduced: tokens may differ from transformers", name, value)
    return {"not_reproduced": ignored, "num_beams": generation.get("num_beams", 1),
            "max_length": generation.get("max_length")}


def generation_defaults(generation: dict[str, Any], max_len: int, eos_id: int) -> dict[str, Any]:
    """The reproduced settings that the folder sets, in our names (see the module docstring); lengths
    are capped to what the model's `max_len` positions hold."""
    from ..runtime.options.generation import GenerationConfig

    always, sampling = reproduced()
    given = {**generation, **_lengths(generation)}
    defaults = {k: given[k] for k in always if given.get(k) is not None}
    if defaults.get("max_new_tokens") is not None:
        defaults["max_new_tokens"] = min(defaults["max_new_tokens"], max_len)
    for name, off in (("min_new_tokens", 0), ("renormalize_logits", False)):
        if defaults.get(name) == off:
            del defaults[name]
    if _ids(generation.get("forced_eos_token_id")) == [eos_id]:
        defaults["forced_eos"] = True
    if generation.get("do_sample"):
        defaults.update({k: generation[k] if generation.get(k) is not None else v
                         for k, v in sampling.items()})
    try:
        GenerationConfig.from_dict(defaults)
    except TfmExportError as exc:
        log.warning("generation_config.json is not used as the default decoding: %s", exc)
        return {}
    return defaults


def _lengths(generation: dict[str, Any]) -> dict[str, int]:
    """max_length / min_length (which count the decoder start token) as new-token counts, unless the
    folder sets max_new_tokens / min_new_tokens itself."""
    out = {}
    if generation.get("max_new_tokens") is None and (generation.get("max_length") or 0) > 1:
        out["max_new_tokens"] = int(generation["max_length"]) - 1
    if generation.get("min_new_tokens") is None and (generation.get("min_length") or 0) > 1:
        out["min_new_tokens"] = int(generation["min_length"]) - 1
    return out


def _ids(value: Any) -> list[int] | None:
    """An id or a list of ids (transformers accepts both) as a list."""
    if value is None:
        return None
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]
