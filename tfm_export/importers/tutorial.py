"""The "Transformer from scratch" tutorial model (seed 000): SelfAttention with
values/keys/queries/fc_out, TransformerBlock, DecoderBlock, learned positions.

Its arithmetic differs from the paper, and the config says so instead of special code:
softmax over energy / sqrt(embed_size) (`attention_scale="d_model"`), no embedding scaling,
learned positions, post-LN, relu, no final norm. Its `masked_fill(mask == 0, -1e20)` equals our
finite-minimum masking after the softmax. `TransformerBlock` adds `query` in its residual, which
in the decoder is the decoder stream: the ordinary post-LN wiring.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from .common import KeyMap, check_fixed, count_layers, max_len_for_table, option, require

SIGNATURE = "encoder.layers.0.attention.queries.weight"
# What the tutorial's code fixes; options that contradict it are refused, not ignored.
FIXED = {"norm_first": False, "activation": "relu"}
# Our attention projections <- the tutorial's SelfAttention Linears.
ATTENTION = {"q_proj": "queries", "k_proj": "keys", "v_proj": "values", "out_proj": "fc_out"}
# Our layer modules <- the tutorial's, per block (DecoderBlock wraps a TransformerBlock for cross-attention).
ENCODER_LAYER = {"norm1": "norm1", "norm2": "norm2", "ffn.fc1": "feed_forward.0", "ffn.fc2": "feed_forward.2"}
DECODER_LAYER = {"norm1": "norm", "norm2": "transformer_block.norm1", "norm3": "transformer_block.norm2",
                 "ffn.fc1": "transformer_block.feed_forward.0", "ffn.fc2": "transformer_block.feed_forward.2"}
DECODER_ATTENTION = {"self_attn": "attention", "cross_attn": "transformer_block.attention"}


def matches(state: dict[str, torch.Tensor]) -> bool:
    return SIGNATURE in state and "decoder.fc_out.weight" in state


def config_from(state: dict[str, torch.Tensor], options: dict[str, Any]) -> TransformerConfig:
    """Sizes from the weights; heads and special ids from the options."""
    check_fixed(options, FIXED, "tutorial")
    src_vocab, d_model = state["encoder.word_embedding.weight"].shape
    rows = min(state[f"{side}.position_embedding.weight"].shape[0] for side in ("encoder", "decoder"))
    src_pad = require(options, "src_pad_id", "the source padding id")
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=state["decoder.fc_out.weight"].shape[0], d_model=d_model,
        n_heads=require(options, "heads", "the number of heads"),
        n_encoder_layers=count_layers(state, "encoder.layers."),
        n_decoder_layers=count_layers(state, "decoder.layers."),
        d_ff=state["encoder.layers.0.feed_forward.0.weight"].shape[0], dropout=0.0, **FIXED,
        positions="learned", max_len=max_len_for_table(options, rows, "the position tables"),
        src_pad_id=src_pad, tgt_pad_id=option(options, "tgt_pad_id", src_pad),
        bos_id=require(options, "bos_id", "the start-of-sequence id"),
        eos_id=require(options, "eos_id", "the end-of-sequence id"),
        scale_embeddings=False, final_norm=False, attention_scale="d_model")


def convert(state: dict[str, torch.Tensor], options: dict[str, Any]
            ) -> tuple[TransformerConfig, dict[str, torch.Tensor], dict[str, Any]]:
    """Map a tutorial state_dict onto tfm_export.model.Transformer names; also what was detected."""
    config = config_from(state, options)
    keys = KeyMap(state, "tutorial")
    for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        keys.copy(f"{ours}.tokens.weight", f"{side}.word_embedding.weight")
        keys.copy(f"{ours}.positions.weight", f"{side}.position_embedding.weight")
        # Rows past max_len are never looked up; a shorter table keeps the export smaller.
        if f"{ours}.positions.weight" in keys.target:
            keys.target[f"{ours}.positions.weight"] = keys.target[f"{ours}.positions.weight"][: config.max_len]
    for i in range(config.n_encoder_layers):
        src, dst = f"encoder.layers.{i}", f"encoder_layers.{i}"
        _attention(keys, f"{dst}.self_attn", f"{src}.attention")
        for ours, theirs in ENCODER_LAYER.items():
            keys.linear(f"{dst}.{ours}", f"{src}.{theirs}")
    for i in range(config.n_decoder_layers):
        src, dst = f"decoder.layers.{i}", f"decoder_layers.{i}"
        for ours, theirs in DECODER_ATTENTION.items():
            _attention(keys, f"{dst}.{ours}", f"{src}.{theirs}")
        for ours, theirs in DECODER_LAYER.items():
            keys.linear(f"{dst}.{ours}", f"{src}.{theirs}")
    keys.linear("lm_head", "decoder.fc_out")
    detected = {"positions": f"learned ({state['encoder.position_embedding.weight'].shape[0]} rows)"}
    return config, keys.finish(), detected


def _attention(keys: KeyMap, target: str, source: str) -> None:
    for ours, theirs in ATTENTION.items():
        keys.linear(f"{target}.{ours}", f"{source}.{theirs}")
