"""A speech Transformer in the shape of the filterbank tutorial (seed 001, "Tranform实现"): a `frontend`
Linear over (batch, frames, 80) filterbank frames, an `Encoder` without a token embedding (positions
added to the frames), a token `Decoder`, `linear` output; MultiHeadAttention with W_Q/W_K/W_V/W_out,
PoswiseFFN as two Conv1d of kernel 1, post-LN, masks from the frame lengths.

Its arithmetic is the config's (no special code): source="frames" (the frontend's Linear in the source
embedding's place, frames padded past their length masked out of attention), no embedding scaling,
softmax over scores / sqrt(d_k) with d_k the head width (`attention_scale="head_dim"`), relu, no final
norm. Its masked_fill(-1e4) before the softmax gives the weights of our finite-minimum masking (both
underflow to 0 in float32). The Conv1d weights (out, in, 1) are the Linear weights (out, in). Its saved
position tables (`pos_emb`, built by pos_sinusoid_embedding) are the paper's interleaved sinusoids:
rebuilt from the formula when they match, else kept as learned tables.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError
from .common import KeyMap, check_fixed, count_layers, max_len_for_table, option, require, table_layout

SIGNATURE = "encoder.layers.0.multi_head_attn.W_Q.weight"
FRONTEND = "frontend.weight"  # the tutorial's nn.Linear(fbank_dim, hidden_dim) feature extractor
# What the tutorial's code fixes; options that contradict it are refused, not ignored.
FIXED = {"norm_first": False, "activation": "relu"}
# Our attention projections <- the tutorial's MultiHeadAttention Linears.
ATTENTION = {"q_proj": "W_Q", "k_proj": "W_K", "v_proj": "W_V", "out_proj": "W_out"}
ENCODER_ATTENTION = {"self_attn": "multi_head_attn"}
DECODER_ATTENTION = {"self_attn": "dec_attn", "cross_attn": "enc_dec_attn"}
FFN = {"ffn.fc1": "poswise_ffn.conv1", "ffn.fc2": "poswise_ffn.conv2"}  # Conv1d of kernel 1
ENCODER_NORMS = ("norm1", "norm2")
DECODER_NORMS = ("norm1", "norm2", "norm3")
# Our modules <- the tutorial's position tables, per side
POSITION_TABLES = {"src_embed": "encoder.pos_emb.weight", "tgt_embed": "decoder.pos_emb.weight"}


def matches(state: dict[str, torch.Tensor]) -> bool:
    return SIGNATURE in state and "decoder.tgt_emb.weight" in state


def _frontend(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """The frontend's weight (d_model, n_feats); a front end that is not one Linear cannot map."""
    weight = state.get(FRONTEND)
    if weight is None or weight.dim() != 2:
        found = sorted(k for k in state if k.startswith("frontend."))[:3]
        raise CheckpointError(f"this speech_tutorial checkpoint's frontend is not one nn.Linear(n_feats, d_model) "
                              f"({', '.join(found) or 'no frontend weights'}); only that front end maps onto "
                              f"our frames source")
    return weight


def positions_from(state: dict[str, torch.Tensor], options: dict[str, Any]
                   ) -> tuple[dict[str, str], int, dict[str, str]]:
    """Per side (src_embed, tgt_embed) the position kind (a sinusoidal layout, or learned: the table kept),
    max_len (the shorter table, or --max-len) and what was detected."""
    tables = {side: state[key] for side, key in POSITION_TABLES.items()}
    max_len = max_len_for_table(options, min(t.shape[0] for t in tables.values()), "the position tables")
    kinds = {side: table_layout(t) or "learned" for side, t in tables.items()}
    seen = {side: f"{kind} ({tables[side].shape[0]} rows)" for side, kind in kinds.items()}
    return kinds, max_len, seen


def config_from(state: dict[str, torch.Tensor], options: dict[str, Any], kinds: dict[str, str], max_len: int
                ) -> TransformerConfig:
    """Sizes from the weights; heads and special ids from the options."""
    check_fixed(options, FIXED, "speech_tutorial")
    d_model, n_feats = _frontend(state).shape
    vocab = state["linear.weight"].shape[0]
    pad = option(options, "tgt_pad_id", 0)  # fills finished rows only: any id works, 0 as the tutorial's labels
    positions = kinds["tgt_embed"]
    return TransformerConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model,
        n_heads=require(options, "heads", "the number of heads"),
        n_encoder_layers=count_layers(state, "encoder.layers."),
        n_decoder_layers=count_layers(state, "decoder.layers."),
        d_ff=state["encoder.layers.0.poswise_ffn.conv1.weight"].shape[0], dropout=0.0, **FIXED,
        positions=positions, max_len=max_len, src_pad_id=pad, tgt_pad_id=pad,
        bos_id=require(options, "bos_id", "the start-of-sequence id"),
        eos_id=require(options, "eos_id", "the end-of-sequence id"),
        scale_embeddings=False, final_norm=False, attention_scale="head_dim", source="frames", n_feats=n_feats,
        encoder_positions=None if kinds["src_embed"] == positions else kinds["src_embed"])


def convert(state: dict[str, torch.Tensor], options: dict[str, Any]
            ) -> tuple[TransformerConfig, dict[str, torch.Tensor], dict[str, Any]]:
    """Map the tutorial's state_dict onto tfm_export.model.Transformer names; also what was detected."""
    kinds, max_len, seen = positions_from(state, options)
    config = config_from(state, options, kinds, max_len)
    keys = KeyMap(state, "speech_tutorial")
    keys.linear("src_embed.tokens", "frontend")  # the frames' Linear takes the token table's place
    keys.copy("tgt_embed.tokens.weight", "decoder.tgt_emb.weight")
    keys.linear("lm_head", "linear")
    for side, key in POSITION_TABLES.items():
        keys.get(key)  # used: rebuilt from the formula, or kept below
        if kinds[side] == "learned":  # rows past max_len are never looked up
            keys.target[f"{side}.positions.weight"] = state[key][:max_len].detach().clone()
    for stack, ours, attention, norms in (("encoder", "encoder_layers", ENCODER_ATTENTION, ENCODER_NORMS),
                                          ("decoder", "decoder_layers", DECODER_ATTENTION, DECODER_NORMS)):
        for i in range(getattr(config, f"n_{stack}_layers")):
            _layer(keys, f"{ours}.{i}", f"{stack}.layers.{i}", attention, norms)
    detected = {"positions": seen, "n_feats": config.n_feats, "frontend": "Linear"}
    return config, keys.finish(), detected


def _layer(keys: KeyMap, target: str, source: str, attention: dict[str, str], norms: tuple[str, ...]) -> None:
    for ours, theirs in attention.items():
        for proj, name in ATTENTION.items():
            keys.linear(f"{target}.{ours}.{proj}", f"{source}.{theirs}.{name}")
    for ours, theirs in FFN.items():
        keys.pointwise_conv(f"{target}.{ours}", f"{source}.{theirs}")
    for norm in norms:
        keys.linear(f"{target}.{norm}", f"{source}.{norm}")
