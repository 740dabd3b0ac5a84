"""Models built on torch.nn.Transformer, in the shape of PyTorch's translation tutorial
(`Seq2SeqTransformer`: scaled token embeddings, a sinusoidal `pos_embedding` buffer,
`nn.Transformer` with fused in_proj, final encoder/decoder norms, a `generator` Linear).

`batch_first` does not change the weights. `norm_first` and the activation cannot be read from
them and come from options (defaults: post-LN, relu — nn.Transformer's defaults).
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError
from ..model import sinusoidal_table
from .common import KeyMap, count_layers, require

ENCODER, DECODER = "transformer.encoder", "transformer.decoder"
SIGNATURE = f"{ENCODER}.layers.0.self_attn.in_proj_weight"
POSITIONS = "positional_encoding.pos_embedding"
DEFAULT_MAX_LEN = 5000  # the tutorial's PositionalEncoding maxlen


def matches(state: dict[str, torch.Tensor]) -> bool:
    return SIGNATURE in state and "generator.weight" in state


def config_from(state: dict[str, torch.Tensor], options: dict[str, Any]) -> TransformerConfig:
    """Sizes from the weights; heads, ids, norm placement and activation from the options."""
    src_vocab, d_model = state["src_tok_emb.embedding.weight"].shape
    table = state.get(POSITIONS)
    max_len = table.shape[0] if table is not None else options.get("max_len") or DEFAULT_MAX_LEN
    src_pad = require(options, "src_pad_id", "the source padding id")
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=state["generator.weight"].shape[0], d_model=d_model,
        n_heads=require(options, "heads", "the number of heads"),
        n_encoder_layers=count_layers(state, f"{ENCODER}.layers."),
        n_decoder_layers=count_layers(state, f"{DECODER}.layers."),
        d_ff=state[f"{ENCODER}.layers.0.linear1.weight"].shape[0], dropout=0.0,
        activation=options.get("activation") or "relu", norm_first=bool(options.get("norm_first") or False),
        positions="sinusoidal", max_len=int(max_len), src_pad_id=src_pad,
        tgt_pad_id=options.get("tgt_pad_id", src_pad),
        bos_id=require(options, "bos_id", "the start-of-sequence id"),
        eos_id=require(options, "eos_id", "the end-of-sequence id"),
        scale_embeddings=True, final_norm=True)


def _check_positions(state: dict[str, torch.Tensor], config: TransformerConfig) -> None:
    table = state.get(POSITIONS)
    if table is None:
        return
    ours = sinusoidal_table(config.max_len, config.d_model)
    if (table.reshape(config.max_len, -1).float() - ours).abs().max() > 1e-4:
        raise CheckpointError(f"{POSITIONS} is not the paper's interleaved sinusoidal table; this layout "
                              f"is not supported")


def convert(state: dict[str, torch.Tensor], options: dict[str, Any]) -> tuple[TransformerConfig, dict]:
    """Map a Seq2SeqTransformer state_dict onto tfm_export.model.Transformer names."""
    config = config_from(state, options)
    _check_positions(state, config)
    keys = KeyMap(state, "nn_transformer")
    keys.copy("src_embed.tokens.weight", "src_tok_emb.embedding.weight")
    keys.copy("tgt_embed.tokens.weight", "tgt_tok_emb.embedding.weight")
    for i in range(config.n_encoder_layers):
        src, dst = f"{ENCODER}.layers.{i}", f"encoder_layers.{i}"
        keys.split_in_proj(f"{dst}.self_attn", f"{src}.self_attn")
        _ffn_and_norms(keys, dst, src, 2)
    for i in range(config.n_decoder_layers):
        src, dst = f"{DECODER}.layers.{i}", f"decoder_layers.{i}"
        keys.split_in_proj(f"{dst}.self_attn", f"{src}.self_attn")
        keys.split_in_proj(f"{dst}.cross_attn", f"{src}.multihead_attn")
        _ffn_and_norms(keys, dst, src, 3)
    keys.linear("encoder_norm", f"{ENCODER}.norm")
    keys.linear("decoder_norm", f"{DECODER}.norm")
    keys.linear("lm_head", "generator")
    return config, keys.finish(ignored={POSITIONS})


def _ffn_and_norms(keys: KeyMap, dst: str, src: str, n_norms: int) -> None:
    keys.linear(f"{dst}.ffn.fc1", f"{src}.linear1")
    keys.linear(f"{dst}.ffn.fc2", f"{src}.linear2")
    for n in range(1, n_norms + 1):
        keys.linear(f"{dst}.norm{n}", f"{src}.norm{n}")
