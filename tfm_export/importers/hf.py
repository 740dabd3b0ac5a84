"""Hugging Face model folders (config.json + model.safetensors or pytorch_model.bin + tokenizer files),
read without `transformers`, through the one importer contract: load -> validate -> Checkpoint.

config.json's model_type picks the family converter (FAMILIES): the BART family (importers.bart:
marian, bart, mbart, m2m_100, pegasus) or T5 (importers.t5: t5, mt5). Each turns config.json into our
one TransformerConfig and the weights into our names (every source weight used, every one of ours
set); the folder's generation settings become the export's default decoding
(importers.hf_generation) and its tokenizer files the export's tokenizer (importers.hf_tokenizers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model.checkpoint import Checkpoint
from . import bart, t5
from .base import run
from .hf_folder import apply_options, read_json, read_weights
from .hf_generation import generation_defaults, generation_report, generation_settings
from .hf_tokenizers import folder_tokenizer
from .source import Source

log = logging.getLogger(__name__)

FAMILIES: dict[str, Any] = {**bart.FAMILIES, **t5.FAMILIES}  # config.json's model_type -> its converter


@dataclass(frozen=True)
class HFImporter:
    """A Hugging Face encoder-decoder folder of one of FAMILIES' model types."""

    name: str = "hf"
    reads: str = "folder"
    hint: str = "check config.json"

    def detect(self, source: Source) -> bool:
        return (source.path / "config.json").is_file()

    def load(self, source: Source, options: dict[str, Any]) -> Checkpoint:
        """`options` may shorten `max_len`; any other option must agree with config.json."""
        path = source.path
        raw = read_json(path / "config.json")
        model_type = raw.get("model_type")
        family = FAMILIES.get(model_type)
        if family is None:
            raise ConfigError(f"{path}/config.json describes a {model_type!r} model; supported model types: "
                              f"{', '.join(sorted(FAMILIES))}")
        hf = {**(bart.COMMON_DEFAULTS if model_type in bart.FAMILIES else {}), **family.defaults, **raw}
        family.check(hf)  # before reading weights that may be large
        generation = generation_settings(path / "generation_config.json", hf)
        state = read_weights(path)
        config, embeddings = family.load(hf, generation, state)
        table = "the position table" if config.positions != "none" else "T5's relative positions"
        config = apply_options(config, options, model_type, table, unbounded=config.positions == "none")
        converted = family.convert(state, config, embeddings)
        tokenizer = folder_tokenizer(path, model_type, config)
        meta = {"layout": model_type, "tokenizer_folder": str(path) if tokenizer else None,
                "options": {k: v for k, v in options.items() if v is not None},
                "detected": {"d_model": config.d_model, "heads": config.n_heads, "layers": [config.n_encoder_layers,
                             config.n_decoder_layers], "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                             "shared": config.share_embeddings, "tied": config.tie_output},
                "generation": generation_report(generation, config.eos_id),
                "generation_defaults": generation_defaults(generation, config.max_len, config.eos_id),
                "forced_eos_at_max_length": generation.get("forced_eos_token_id") is not None}
        return Checkpoint(config=config, state_dict=converted, tokenizer=tokenizer, path=str(path), meta=meta)


def import_hf(path: str | Path, options: dict[str, Any] | None = None) -> Checkpoint:
    """Read and check a Hugging Face folder as a Checkpoint (what `load_any` does for a folder)."""
    return run(HFImporter(), Source(Path(path)), dict(options or {}))
