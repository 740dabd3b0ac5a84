"""The T5 kind of Hugging Face families: T5, T5 v1.1 / FLAN-T5 (model_type t5), mT5 (mt5).

T5 (the same code in transformers for both) is a pre-LN Transformer with these differences, each a field
of our one config: RMS norms without bias (`norm="rms"`), no biases anywhere, no absolute positions but
a learned attention bias by relative distance, held by the first layer of each stack
(`relative_buckets`, model.attention), no attention scaling (`attention_scale="none"`), a ReLU or
gated-GELU feed-forward (`ffn_gated`, with transformers' gelu_new: the tanh approximation), heads whose
width d_kv need not divide d_model (`d_head`), the encoder and decoder layer counts set apart (mT5), and
a head tied to the shared embedding and fed d_model ** -0.5 times the decoder output (`output_scale`:
T5), or an untied lm_head fed the output as it is (v1.1, FLAN, mT5). Tying is read from the weights and
the scale from config.json: transformers 5 saves every T5 as tie_word_embeddings true, with
scale_decoder_outputs. The decoder starts from the pad id. T5 has no position table, so `max_len` (the
longest source and target) is config.json's n_positions, else 512, or --max-len. Both families are
registered at the end (families.registry): their tokenizer is tokenizer.json with X </s>, without
language tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...config import TransformerConfig
from ...errors import ConfigError
from ..common import KeyMap
from ..hf_folder import ACTIVATIONS, embedding_names, first, same, single_id
from ..hf_generation import banned_ids
from ..hf_tokenizers import TokenizerRule
from .registry import Family, register_family

DEFAULT_MAX_LEN = 512
# ours <- theirs, per attention block; T5 names the output projection `o`.
ATTENTION = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "out_proj": "o"}
EMBEDDINGS = {"src": ("encoder.embed_tokens.weight", "shared.weight"),
              "tgt": ("decoder.embed_tokens.weight", "shared.weight"),
              "out": ("lm_head.weight", "decoder.embed_tokens.weight", "shared.weight")}
UNUSED_KEYS = {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
T5_DEFAULTS = {"d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
               "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
               "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "tie_word_embeddings": True,
               "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}


def feed_forward(hf: dict[str, Any]) -> tuple[bool, str]:
    """(gated, our activation) from feed_forward_proj: "relu", "gated-gelu" (gelu_new), "gated-silu", ..."""
    proj = hf["feed_forward_proj"]
    parts = proj.split("-")
    gated = parts[0] == "gated"
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or act not in ACTIVATIONS:
        raise ConfigError(f"feed_forward_proj {proj!r} is not supported; use relu, gelu, gated-gelu or gated-silu")
    return gated, ACTIVATIONS[act]


@dataclass(frozen=True)
class T5Layout:
    """What a model_type of the T5 kind fixes: whether its head's input is scaled (see output_scale)."""

    scales_output: bool | None = None  # None: as config.json says
    table: str = "T5's relative positions"
    unbounded: bool = True  # no position table: any --max-len

    def output_scale(self, hf: dict[str, Any]) -> bool:
        """Whether the decoder output is scaled by d_model ** -0.5 before the head: transformers 5 writes it
        as scale_decoder_outputs; before, it followed tie_word_embeddings (T5 scales, v1.1 does not)."""
        if self.scales_output is not None:
            return self.scales_output
        if "scale_decoder_outputs" in hf:
            return bool(hf["scale_decoder_outputs"])
        return hf.get("tie_word_embeddings", True) is not False

    def check(self, hf: dict[str, Any]) -> None:
        feed_forward(hf)
        if hf.get("is_encoder_decoder") is False:
            raise ConfigError("this T5 folder is an encoder only (T5EncoderModel); export needs the decoder too")

    def load(self, hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor]
             ) -> tuple[TransformerConfig, dict[str, str]]:
        # Tying from the weights: transformers 5 saves tie_word_embeddings true with an untied lm_head.
        shared = next((k for k in EMBEDDINGS["tgt"] if k in state), "")
        tied = "lm_head.weight" not in state or (bool(shared) and same(state["lm_head.weight"], state[shared]))
        embeddings = embedding_names(state, EMBEDDINGS, tied, "T5")
        src, tgt, out = (state[embeddings[k]] for k in ("src", "tgt", "out"))
        gated, activation = feed_forward(hf)
        pad = hf["pad_token_id"]
        try:
            config = TransformerConfig(
                src_vocab_size=src.shape[0], tgt_vocab_size=tgt.shape[0], d_model=hf["d_model"],
                n_heads=hf["num_heads"], n_encoder_layers=hf["num_layers"],
                n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"], d_ff=hf["d_ff"], dropout=0.0,
                activation=activation, norm_first=True, positions="none",
                max_len=hf.get("n_positions") or DEFAULT_MAX_LEN, src_pad_id=pad, tgt_pad_id=pad,
                bos_id=first(generation.get("decoder_start_token_id"), hf.get("decoder_start_token_id"), pad),
                eos_id=single_id(first(generation.get("eos_token_id"), hf["eos_token_id"])),
                scale_embeddings=False, final_norm=True, share_embeddings=True, tie_output=tied, output_bias=False,
                attention_scale="none", layer_norm_eps=hf["layer_norm_epsilon"], suppress_ids=banned_ids(generation),
                norm="rms", d_head=hf["d_kv"], attention_bias=False, ffn_bias=False, ffn_gated=gated,
                relative_buckets=hf["relative_attention_num_buckets"],
                relative_max_distance=hf["relative_attention_max_distance"], output_scale=self.output_scale(hf))
        except ValueError as exc:
            raise ConfigError(f"config.json does not describe a usable model: {exc}") from None
        return config, embeddings

    def convert(self, state: dict[str, torch.Tensor], config: TransformerConfig, embeddings: dict[str, str]
                ) -> dict[str, torch.Tensor]:
        keys = KeyMap(state, "T5")
        for target, role in (("src_embed.tokens.weight", "src"), ("tgt_embed.tokens.weight", "tgt"),
                             ("lm_head.weight", "out")):
            keys.copy(target, embeddings[role])
        for side, ours in (("encoder", "encoder"), ("decoder", "decoder")):
            keys.copy(f"{ours}_norm.weight", f"{side}.final_layer_norm.weight")
            keys.copy(f"{ours}_bias.table.weight", f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
        for i in range(config.n_encoder_layers):
            _block(keys, f"encoder.block.{i}", f"encoder_layers.{i}", ("self_attn", "ffn"), config)
        for i in range(config.n_decoder_layers):
            _block(keys, f"decoder.block.{i}", f"decoder_layers.{i}", ("self_attn", "cross_attn", "ffn"), config)
        return keys.finish(ignored=UNUSED_KEYS)


def _block(keys: KeyMap, theirs: str, ours: str, parts: tuple[str, ...], config: TransformerConfig) -> None:
    """One T5 block: its sub-layers in order, each with its own norm (norm1, norm2, norm3 here)."""
    modules = {"self_attn": "SelfAttention", "cross_attn": "EncDecAttention", "ffn": "DenseReluDense"}
    for n, part in enumerate(parts):
        base = f"{theirs}.layer.{n}"
        keys.copy(f"{ours}.norm{n + 1}.weight", f"{base}.layer_norm.weight")
        if part != "ffn":
            for mine, their in ATTENTION.items():
                keys.copy(f"{ours}.{part}.{mine}.weight", f"{base}.{modules[part]}.{their}.weight")
            continue
        dense = f"{base}.DenseReluDense"
        keys.copy(f"{ours}.ffn.fc1.weight", f"{dense}.wi_0.weight" if config.ffn_gated else f"{dense}.wi.weight")
        if config.ffn_gated:
            keys.copy(f"{ours}.ffn.gate.weight", f"{dense}.wi_1.weight")
        keys.copy(f"{ours}.ffn.fc2.weight", f"{dense}.wo.weight")


register_family(Family("t5", T5Layout(), T5_DEFAULTS, TokenizerRule(), ffn_output_outliers=True))
# transformers 5's mT5 never scales (published mT5 folders are untied, which did not scale before).
register_family(Family("mt5", T5Layout(scales_output=False), T5_DEFAULTS, TokenizerRule(),
                       ffn_output_outliers=True))
