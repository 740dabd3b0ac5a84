"""Hugging Face model folders (config.json + model.safetensors or pytorch_model.bin + tokenizer files),
read without `transformers`, through the one importer contract: load -> validate -> Checkpoint.

config.json's model_type picks the family from the registry (importers.families): it fills in its
config class's defaults, turns config.json into our one TransformerConfig and the weights into our
names (every source weight used, every one of ours set), and says how its tokenizer files become the
export's tokenizer (importers.hf_tokenizers). The folder's generation settings become the export's
default decoding (importers.hf_generation). Nothing here depends on the family.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..model.checkpoint import Checkpoint
from .families import family_for
from .hf_folder import apply_options, read_json, read_weights
from .hf_generation import generation_defaults, generation_report, generation_settings
from .hf_tokenizers import folder_tokenizer
from .source import Source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HFImporter:
    """A Hugging Face encoder-decoder folder of a registered family (importers.families)."""

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
        family = family_for(model_type, f"{path}/config.json")
        layout = family.layout
        hf = family.config_json(raw)
        layout.check(hf)  # before reading weights that may be large
        generation = generation_settings(path / "generation_config.json", hf)
        state = read_weights(path)
        config, embeddings = layout.load(hf, generation, state)
        config = apply_options(config, options, model_type, layout.table, unbounded=layout.unbounded)
        converted = layout.convert(state, config, embeddings)
        tokenizer = folder_tokenizer(path, family.tokenizer, config)
        features = family.features(path, config).to_dict() if family.features else None
        speech = family.speech(generation) if family.speech else None
        meta = {"layout": model_type, "tokenizer_folder": str(path) if tokenizer else None,
                "options": {k: v for k, v in options.items() if v is not None},
                "detected": {"d_model": config.d_model, "heads": config.n_heads, "layers": [config.n_encoder_layers,
                             config.n_decoder_layers], "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                             "shared": config.share_embeddings, "tied": config.tie_output},
                "generation": generation_report(generation, config.eos_id, family.reproduces),
                "generation_defaults": generation_defaults(generation, config.max_len, config.eos_id),
                "forced_eos_at_max_length": generation.get("forced_eos_token_id") is not None,
                **({"features": features} if features else {}), **({"speech": speech} if speech else {}),
                **({"ffn_output_outliers": True} if family.ffn_output_outliers else {})}
        return Checkpoint(config=config, state_dict=converted, tokenizer=tokenizer, path=str(path), meta=meta)
