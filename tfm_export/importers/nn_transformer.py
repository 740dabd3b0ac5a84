"""Models built on torch.nn.Transformer, in the shape of PyTorch's translation tutorial
(`Seq2SeqTransformer`: scaled token embeddings, a sinusoidal `pos_embedding` buffer,
`nn.Transformer` with fused in_proj, final encoder/decoder norms, a `generator` Linear).

Read from the weights: sizes, `bias=False` (no in_proj_bias), the final norms, and the position
table when it was saved (the paper's sinusoids, or kept exactly as a learned table otherwise).
`batch_first` does not change the weights. `norm_first` and the activation cannot be read from
them and come from options (defaults: post-LN, relu, nn.Transformer's defaults).
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from .common import KeyMap, count_layers, max_len_for_table, option, require, table_layout

ENCODER, DECODER = "transformer.encoder", "transformer.decoder"
SIGNATURE = f"{ENCODER}.layers.0.self_attn.in_proj_weight"
POSITIONS = "positional_encoding.pos_embedding"
DEFAULT_MAX_LEN = 5000  # the tutorial's PositionalEncoding maxlen, when its table was not saved
# Our layer modules <- nn.TransformerEncoderLayer / nn.TransformerDecoderLayer names.
ENCODER_LAYER = {"ffn.fc1": "linear1", "ffn.fc2": "linear2", "norm1": "norm1", "norm2": "norm2"}
DECODER_LAYER = {**ENCODER_LAYER, "norm3": "norm3"}
DECODER_ATTENTION = {"self_attn": "self_attn", "cross_attn": "multihead_attn"}
EMBEDDINGS = {"src_embed.tokens.weight": "src_tok_emb.embedding.weight",
              "tgt_embed.tokens.weight": "tgt_tok_emb.embedding.weight"}


def matches(state: dict[str, torch.Tensor]) -> bool:
    return SIGNATURE in state and "generator.weight" in state


def positions_from(state: dict[str, torch.Tensor], d_model: int, options: dict[str, Any]
                   ) -> tuple[str, int, torch.Tensor | None, str]:
    """(positions layout, max_len, table to keep or None, what was detected) for the config."""
    table = state.get(POSITIONS)
    if table is None:
        max_len = int(option(options, "max_len", DEFAULT_MAX_LEN))
        return "sinusoidal", max_len, None, f"sinusoidal (assumed: no {POSITIONS} in the weights)"
    table = table.reshape(-1, d_model)  # (maxlen, 1, emb) or (1, maxlen, emb) -> (maxlen, emb)
    max_len = max_len_for_table(options, table.shape[0], POSITIONS)
    layout = table_layout(table)
    if layout is not None:
        return layout, max_len, None, f"{layout} ({POSITIONS} matches, {table.shape[0]} rows)"
    # Not a table we can rebuild from a formula: carry it exactly as learned positions.
    return "learned", max_len, table[:max_len], f"learned ({POSITIONS} kept as is, {table.shape[0]} rows)"


def config_from(state: dict[str, torch.Tensor], options: dict[str, Any], positions: str, max_len: int
                ) -> TransformerConfig:
    """Sizes from the weights; heads, ids, norm placement and activation from the options."""
    src_vocab, d_model = state["src_tok_emb.embedding.weight"].shape
    src_pad = require(options, "src_pad_id", "the source padding id")
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=state["generator.weight"].shape[0], d_model=d_model,
        n_heads=require(options, "heads", "the number of heads"),
        n_encoder_layers=count_layers(state, f"{ENCODER}.layers."),
        n_decoder_layers=count_layers(state, f"{DECODER}.layers."),
        d_ff=state[f"{ENCODER}.layers.0.linear1.weight"].shape[0], dropout=0.0,
        activation=option(options, "activation", "relu"), norm_first=bool(option(options, "norm_first", False)),
        positions=positions, max_len=max_len, src_pad_id=src_pad,
        tgt_pad_id=option(options, "tgt_pad_id", src_pad),
        bos_id=require(options, "bos_id", "the start-of-sequence id"),
        eos_id=require(options, "eos_id", "the end-of-sequence id"),
        scale_embeddings=True, final_norm=f"{ENCODER}.norm.weight" in state)


def convert(state: dict[str, torch.Tensor], options: dict[str, Any]
            ) -> tuple[TransformerConfig, dict[str, torch.Tensor], dict[str, Any]]:
    """Map a Seq2SeqTransformer state_dict onto tfm_export.model.Transformer names; also what was detected."""
    d_model = state["src_tok_emb.embedding.weight"].shape[1]
    positions, max_len, table, seen = positions_from(state, d_model, options)
    config = config_from(state, options, positions, max_len)
    bias = f"{ENCODER}.layers.0.self_attn.in_proj_bias" in state
    keys = KeyMap(state, "nn_transformer", zero_bias=not bias)
    for ours, theirs in EMBEDDINGS.items():
        keys.copy(ours, theirs)
    keys.linear("lm_head", "generator")
    if table is not None:
        for side in ("src_embed", "tgt_embed"):  # one PositionalEncoding serves both sides
            keys.target[f"{side}.positions.weight"] = table.detach().clone()
    for i in range(config.n_encoder_layers):
        src, dst = f"{ENCODER}.layers.{i}", f"encoder_layers.{i}"
        keys.split_in_proj(f"{dst}.self_attn", f"{src}.self_attn")
        for ours, theirs in ENCODER_LAYER.items():
            keys.linear(f"{dst}.{ours}", f"{src}.{theirs}")
    for i in range(config.n_decoder_layers):
        src, dst = f"{DECODER}.layers.{i}", f"decoder_layers.{i}"
        for ours, theirs in DECODER_ATTENTION.items():
            keys.split_in_proj(f"{dst}.{ours}", f"{src}.{theirs}")
        for ours, theirs in DECODER_LAYER.items():
            keys.linear(f"{dst}.{ours}", f"{src}.{theirs}")
    if config.final_norm:
        keys.linear("encoder_norm", f"{ENCODER}.norm")
        keys.linear("decoder_norm", f"{DECODER}.norm")
    detected = {"positions": seen, "bias": bias, "final_norm": config.final_norm}
    return config, keys.finish(ignored={POSITIONS}), detected
