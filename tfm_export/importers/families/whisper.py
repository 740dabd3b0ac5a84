"""Whisper (model_type "whisper"): speech in, text out, as fields of the one TransformerConfig.

Its decoder is a pre-LN BART decoder (learned positions from 0, unscaled embeddings, final norms, the
head tied to the token embedding, no final_logits_bias); its encoder reads log-mel features
(config.source "features": model.frontend's two Conv1d + GELU, the second of stride 2) and adds its
saved embed_positions table (sinusoids, read as stored: encoder_positions "learned"). Every k_proj
has no bias (key_bias). The features are one fixed window: num_mel_bins x 2 * max_source_positions
frames (3000 for the published models), and preprocessor_config.json (audio.features.FeatureConfig)
must agree; the checkpoint's meta carries it for the manifest. Layer weights are named as BART's
(families.bart's maps). The tokenizer is the folder's tokenizer.json with no template: it decodes
ids to text (Whisper's prompt tokens are the decoding rules', not the source's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...audio.features import FeatureConfig, load_feature_config
from ...config import TransformerConfig
from ...errors import CheckpointError, ConfigError
from ..common import KeyMap
from ..hf_folder import ACTIVATIONS, first, same, single_id
from ..hf_generation import banned_ids
from ..hf_tokenizers import Template, TokenizerRule
from .bart import ATTENTION, DECODER_LAYER, ENCODER_LAYER, check_stacks
from .registry import Family, register_family

TOKENS = "model.decoder.embed_tokens.weight"
HEAD = "proj_out.weight"  # tied to TOKENS; saved or not
# WhisperConfig's defaults (openai/whisper-tiny's sizes) for what a hand-written config.json leaves out.
DEFAULTS = {"vocab_size": 51865, "num_mel_bins": 80, "encoder_layers": 4, "decoder_layers": 4,
            "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
            "decoder_ffn_dim": 1536, "d_model": 384, "activation_function": "gelu", "scale_embedding": False,
            "max_source_positions": 1500, "max_target_positions": 448, "pad_token_id": 50256,
            "bos_token_id": 50256, "eos_token_id": 50256, "decoder_start_token_id": 50257,
            "tie_word_embeddings": True}


@dataclass(frozen=True)
class WhisperLayout:
    """What transformers' Whisper code fixes (the rest is in config.json and preprocessor_config.json)."""

    table: str = "the decoder's position table"
    unbounded: bool = False

    def check(self, hf: dict[str, Any]) -> None:
        check_stacks(hf)
        if hf.get("tie_word_embeddings") is False:
            raise ConfigError("an untied Whisper head (tie_word_embeddings false) is not supported")

    def load(self, hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor]
             ) -> tuple[TransformerConfig, dict[str, str]]:
        if TOKENS not in state:
            raise CheckpointError(f"the weights have no {TOKENS}; this is not a Whisper checkpoint")
        if HEAD in state and not same(state[HEAD], state[TOKENS]):
            raise CheckpointError(f"{HEAD} differs from {TOKENS}; an untied Whisper head is not supported")
        vocab, pad = state[TOKENS].shape[0], hf["pad_token_id"]
        start = first(generation.get("decoder_start_token_id"), hf.get("decoder_start_token_id"))
        try:
            config = TransformerConfig(
                src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=hf["d_model"],
                n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
                n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=0.0,
                activation=ACTIVATIONS[hf["activation_function"]], norm_first=True, positions="learned",
                max_len=hf["max_target_positions"], src_pad_id=pad, tgt_pad_id=pad, bos_id=start,
                eos_id=single_id(first(generation.get("eos_token_id"), hf["eos_token_id"])),
                scale_embeddings=bool(hf["scale_embedding"]), final_norm=True, tie_output=True, output_bias=False,
                suppress_ids=banned_ids(generation), source="features", n_mels=hf["num_mel_bins"],
                n_frames=2 * hf["max_source_positions"], encoder_positions="learned", key_bias=False,
                alignment_heads=tuple(tuple(pair) for pair in generation.get("alignment_heads") or ()))
        except ValueError as exc:
            raise ConfigError(f"config.json does not describe a usable model: {exc}") from None
        return config, {"src": TOKENS, "tgt": TOKENS, "out": TOKENS}

    def convert(self, state: dict[str, torch.Tensor], config: TransformerConfig, embeddings: dict[str, str]
                ) -> dict[str, torch.Tensor]:
        keys = KeyMap(state, "Whisper")
        keys.copy("tgt_embed.tokens.weight", TOKENS)
        keys.copy("lm_head.weight", TOKENS)
        keys.copy("tgt_embed.positions.weight", "model.decoder.embed_positions.weight")
        keys.copy("src_embed.positions.weight", "model.encoder.embed_positions.weight")
        for conv in ("conv1", "conv2"):
            keys.linear(f"src_embed.{conv}", f"model.encoder.{conv}")
        for side in ("encoder", "decoder"):
            keys.linear(f"{side}_norm", f"model.{side}.layer_norm")
        _convert_layers(keys, config)
        return keys.finish(ignored={HEAD})


def _convert_layers(keys: KeyMap, config: TransformerConfig) -> None:
    """BART's layer names (families.bart's maps); k_proj has a weight only (config.key_bias)."""
    for side, ours, layer_map, n in (("encoder", "encoder_layers", ENCODER_LAYER, config.n_encoder_layers),
                                     ("decoder", "decoder_layers", DECODER_LAYER, config.n_decoder_layers)):
        for i in range(n):
            for theirs, mine in layer_map.items():
                src, dst = f"model.{side}.layers.{i}.{theirs}", f"{ours}.{i}.{mine}"
                if not theirs.endswith("attn"):
                    keys.linear(dst, src)
                    continue
                for proj in ATTENTION:
                    if proj == "k_proj":
                        keys.copy(f"{dst}.k_proj.weight", f"{src}.k_proj.weight")
                    else:
                        keys.linear(f"{dst}.{proj}", f"{src}.{proj}")


def feature_config(path: Path, config: TransformerConfig) -> FeatureConfig:
    """The folder's preprocessor_config.json, which must give the model's (n_mels, n_frames)."""
    features = load_feature_config(path)
    if features.shape != (config.n_mels, config.n_frames):
        raise ConfigError(f"{path}/preprocessor_config.json gives features of {features.shape} (mels, frames); "
                          f"the model reads {(config.n_mels, config.n_frames)}: the folder mixes two models")
    return features


def speech_settings(generation: dict[str, Any]) -> dict[str, Any]:
    """The Whisper decoding settings (runtime.speech.prompt.WhisperSettings) of the folder's generation settings
    (generation_config.json over config.json), for Manifest.speech."""
    from ...runtime.speech.prompt import WhisperSettings

    return WhisperSettings.from_dict(generation).to_dict()


# WhisperTokenizer adds its prompt tokens in code, by task and language: that is decoding's business
# (the runtime's Whisper rules), so the template adds nothing; the tokenizer decodes ids to text.
register_family(Family("whisper", WhisperLayout(), DEFAULTS, TokenizerRule({"": Template((), ())}),
                       features=feature_config, speech=speech_settings, reproduces=("begin_suppress_tokens",)))
