"""The "Transformer from scratch" tutorial model (seeds 000/002): SelfAttention with
values/keys/queries/fc_out, TransformerBlock, DecoderBlock, learned positions.

Its arithmetic differs from the paper, and the config says so instead of special code:
softmax over energy / sqrt(embed_size) (`attention_scale="d_model"`), no embedding scaling,
learned positions, post-LN, no final norm.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from .common import KeyMap, count_layers, require

SIGNATURE = "encoder.layers.0.attention.queries.weight"


def matches(state: dict[str, torch.Tensor]) -> bool:
    return SIGNATURE in state and "decoder.fc_out.weight" in state


def _attention(keys: KeyMap, target: str, source: str) -> None:
    for ours, theirs in (("q_proj", "queries"), ("k_proj", "keys"), ("v_proj", "values"), ("out_proj", "fc_out")):
        keys.linear(f"{target}.{ours}", f"{source}.{theirs}")


def _ffn(keys: KeyMap, target: str, source: str) -> None:
    keys.linear(f"{target}.fc1", f"{source}.0")
    keys.linear(f"{target}.fc2", f"{source}.2")


def config_from(state: dict[str, torch.Tensor], options: dict[str, Any]) -> TransformerConfig:
    """Sizes from the weights; heads and special ids from the options."""
    src_vocab, d_model = state["encoder.word_embedding.weight"].shape
    src_pad = require(options, "src_pad_id", "the source padding id")
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=state["decoder.fc_out.weight"].shape[0], d_model=d_model,
        n_heads=require(options, "heads", "the number of heads"),
        n_encoder_layers=count_layers(state, "encoder.layers."),
        n_decoder_layers=count_layers(state, "decoder.layers."),
        d_ff=state["encoder.layers.0.feed_forward.0.weight"].shape[0], dropout=0.0, activation="relu",
        norm_first=False, positions="learned", max_len=state["encoder.position_embedding.weight"].shape[0],
        src_pad_id=src_pad, tgt_pad_id=options.get("tgt_pad_id", src_pad),
        bos_id=require(options, "bos_id", "the start-of-sequence id"),
        eos_id=require(options, "eos_id", "the end-of-sequence id"),
        scale_embeddings=False, final_norm=False, attention_scale="d_model")


def convert(state: dict[str, torch.Tensor], options: dict[str, Any]) -> tuple[TransformerConfig, dict]:
    """Map a tutorial state_dict onto tfm_export.model.Transformer names."""
    config = config_from(state, options)
    if state["decoder.position_embedding.weight"].shape[0] != config.max_len:
        raise ValueError("encoder and decoder position tables differ in length; not supported")
    keys = KeyMap(state, "tutorial")
    for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        keys.copy(f"{ours}.tokens.weight", f"{side}.word_embedding.weight")
        keys.copy(f"{ours}.positions.weight", f"{side}.position_embedding.weight")
    for i in range(config.n_encoder_layers):
        src, dst = f"encoder.layers.{i}", f"encoder_layers.{i}"
        _attention(keys, f"{dst}.self_attn", f"{src}.attention")
        keys.linear(f"{dst}.norm1", f"{src}.norm1")
        keys.linear(f"{dst}.norm2", f"{src}.norm2")
        _ffn(keys, f"{dst}.ffn", f"{src}.feed_forward")
    for i in range(config.n_decoder_layers):
        src, dst = f"decoder.layers.{i}", f"decoder_layers.{i}"
        block = f"{src}.transformer_block"
        _attention(keys, f"{dst}.self_attn", f"{src}.attention")
        keys.linear(f"{dst}.norm1", f"{src}.norm")
        _attention(keys, f"{dst}.cross_attn", f"{block}.attention")
        keys.linear(f"{dst}.norm2", f"{block}.norm1")
        keys.linear(f"{dst}.norm3", f"{block}.norm2")
        _ffn(keys, f"{dst}.ffn", f"{block}.feed_forward")
    keys.linear("lm_head", "decoder.fc_out")
    return config, keys.finish()
