"""MarianMT's generation settings (generation_config.json, else config.json): which ones our decoding
reproduces (they become the export's default decoding), which ones it does not (logged, and listed in
the checkpoint's meta), and the single-token bans that become `suppress_ids`. See importers.marian."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, TfmExportError
from ..files import read_json_object

log = logging.getLogger(__name__)

# Generation settings that would change greedy tokens but are not part of our decoding:
# name -> the value at which they do nothing.
UNSUPPORTED_GENERATION = {
    "encoder_no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0, "forced_bos_token_id": None,
    "begin_suppress_tokens": None, "sequence_bias": None, "exponential_decay_length_penalty": None,
}
# Settings of transformers' GenerationConfig that runtime.generation.GenerationConfig reproduces
# (same names); they become the export's default decoding. forced_eos_token_id is left out: our
# max_new_tokens counts the tokens before EOS (see the module docstring), pass forced_eos=True for
# transformers' cut. Sampling settings count only when do_sample is set.
GENERATION_DEFAULTS = ("num_beams", "length_penalty", "early_stopping", "num_return_sequences", "min_new_tokens",
                       "repetition_penalty", "no_repeat_ngram_size")
SAMPLING_DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}  # transformers' defaults


def generation_settings(file: Path, hf: dict[str, Any]) -> dict[str, Any]:
    """What transformers' generate reads: generation_config.json (`file`) when present, else config.json (`hf`)."""
    if not file.exists():
        return dict(hf)
    return read_json_object(file, CheckpointError, "a Hugging Face model folder needs it", "re-download it")


def banned_ids(generation: dict[str, Any]) -> tuple[int, ...]:
    """Single-token `bad_words_ids` and `suppress_tokens` are static bans; longer phrases are not."""
    banned = [ids[0] for ids in generation.get("bad_words_ids") or [] if len(ids) == 1]
    return tuple(sorted(set(banned) | set(generation.get("suppress_tokens") or [])))


def generation_report(generation: dict[str, Any]) -> dict[str, Any]:
    """Generation settings that change greedy tokens and are not reproduced (each logged once)."""
    ignored = {k: generation[k] for k, off in UNSUPPORTED_GENERATION.items()
               if generation.get(k) not in (None, off)}
    if (generation.get("min_length") or 0) > 1:  # counts the decoder start token
        ignored["min_length"] = generation["min_length"]
    phrases = [ids for ids in generation.get("bad_words_ids") or [] if len(ids) > 1]
    if phrases:
        ignored["bad_words_ids (phrases)"] = phrases
    for name, value in ignored.items():
        log.warning("generation setting %s=%r is not reproduced: greedy tokens may differ from transformers",
                    name, value)
    return {"not_reproduced": ignored, "num_beams": generation.get("num_beams", 1),
            "max_length": generation.get("max_length")}


def generation_defaults(generation: dict[str, Any]) -> dict[str, Any]:
    """The reproduced settings that generation_config.json sets (None values: transformers' defaults)."""
    from ..runtime.generation import GenerationConfig

    defaults = {k: generation[k] for k in GENERATION_DEFAULTS if generation.get(k) is not None}
    if generation.get("do_sample"):
        defaults.update({k: generation[k] if generation.get(k) is not None else v
                         for k, v in SAMPLING_DEFAULTS.items()})
    try:
        GenerationConfig.from_dict(defaults)
    except TfmExportError as exc:
        log.warning("generation_config.json is not used as the default decoding: %s", exc)
        return {}
    return defaults
