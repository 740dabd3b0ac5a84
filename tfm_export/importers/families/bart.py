"""The BART kind of Hugging Face families: Marian, BART, mBART(-50), M2M100/NLLB, Pegasus.

They share one layout of weights (model.{encoder,decoder}.layers.N.{self_attn,encoder_attn,fc1,fc2,
*_layer_norm}, model.shared, lm_head) and differ in a few choices, each a field of our one config
and of the family's BartLayout here: learned positions with BART's offset of 2 (BART, mBART) or a fixed
sinusoidal table (Marian and Pegasus: sines first; M2M100: fairseq's spacing, after the padding
offset of 2), post-LN (BART, Marian) or pre-LN with final norms (mBART, M2M100, Pegasus), a norm
after the embeddings (BART, mBART's layernorm_embedding), and a final_logits_bias (all but M2M100).
Whether embeddings are scaled, the activation, the sizes and the ids come from config.json; which
embeddings are tied comes from the weights. Weights left unused or unset are an error naming them
(common.KeyMap). Each family is registered here (families.registry) with its layout, its config
class's defaults and its tokenizer rule (importers.hf_tokenizers): adding a family of this kind is
adding one record at the end of this module. Generation settings: importers.hf_generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from ...config import TransformerConfig
from ...errors import CheckpointError, ConfigError
from ...model.layers import sinusoidal_table
from ...text.languages import TokenShape
from ...text.marian import LANGUAGE_TOKENS as MARIAN_CODES
from ..common import KeyMap
from ..hf_folder import ACTIVATIONS, embedding_names, first, same, single_id
from ..hf_generation import banned_ids
from ..hf_tokenizers import (M2M100_SPM, MARIAN_FILES, SentencePiece, Template, TokenizerRule, read_m2m100,
                             read_marian)
from .registry import Family, register_family

ENCODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "fc1": "ffn.fc1", "fc2": "ffn.fc2",
                 "final_layer_norm": "norm2"}
DECODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "encoder_attn": "cross_attn",
                 "encoder_attn_layer_norm": "norm2", "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "norm3"}
ATTENTION = ("q_proj", "k_proj", "v_proj", "out_proj")
EMBEDDINGS = {"src": ("model.encoder.embed_tokens.weight", "model.shared.weight"),
              "tgt": ("model.decoder.embed_tokens.weight", "model.shared.weight"),
              "out": ("lm_head.weight", "model.decoder.embed_tokens.weight", "model.shared.weight")}
# Other embedding copies are either equal to the ones used, or unused (model.shared when untied);
# final_logits_bias is read directly (it may be absent).
UNUSED_KEYS = {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
               "lm_head.weight", "final_logits_bias"}
POSITION_KEYS = {"src_embed": "model.encoder.embed_positions.weight", "tgt_embed": "model.decoder.embed_positions.weight"}
# The config classes' common defaults for what a hand-written config.json may leave out (BartConfig's).
COMMON_DEFAULTS = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16,
                   "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
                   "max_position_embeddings": 1024, "activation_function": "gelu", "scale_embedding": False,
                   "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
                   "tie_word_embeddings": True}


def check_stacks(hf: dict[str, Any]) -> None:
    """The config.json fields of BART-style stacks that the one model config cannot vary: the same heads and
    ffn sizes in the encoder and the decoder, and a supported activation (Whisper's config has them too)."""
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"] or \
            hf["encoder_ffn_dim"] != hf["decoder_ffn_dim"]:
        raise ConfigError("encoder and decoder with different heads or ffn sizes are not supported")
    if hf["activation_function"] not in ACTIVATIONS:
        raise ConfigError(f"activation {hf['activation_function']!r} is not supported; supported: "
                          f"{', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class BartLayout:
    """What one model_type of the BART kind fixes in its code (the rest is in config.json)."""

    positions: str  # config.POSITIONS
    position_offset: int  # table rows before position 0
    norm_first: bool  # pre-LN
    final_norm: bool  # model.encoder.layer_norm / model.decoder.layer_norm
    embed_norm: bool  # model.*.layernorm_embedding
    output_bias: bool  # the family has a final_logits_bias (zeros when a folder lacks it)
    table: str = "the position table"
    unbounded: bool = False

    def config(self, hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor],
               embeddings: dict[str, str]) -> TransformerConfig:
        """Our config from config.json and the generation settings; vocab sizes and tying from the weights."""
        src, tgt, out = (state[embeddings[k]] for k in ("src", "tgt", "out"))
        pad = hf["pad_token_id"]
        start = first(generation.get("decoder_start_token_id"), hf.get("decoder_start_token_id"), -1)
        if start < 0:
            raise ConfigError("config.json has no decoder_start_token_id; set the token the decoder starts from")
        try:
            return TransformerConfig(
                src_vocab_size=src.shape[0], tgt_vocab_size=tgt.shape[0], d_model=hf["d_model"],
                n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
                n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=0.0,
                activation=ACTIVATIONS[hf["activation_function"]], norm_first=self.norm_first,
                positions=self.positions, max_len=hf["max_position_embeddings"], src_pad_id=pad, tgt_pad_id=pad,
                bos_id=start, eos_id=single_id(first(generation.get("eos_token_id"), hf["eos_token_id"])),
                scale_embeddings=bool(hf["scale_embedding"]), final_norm=self.final_norm,
                share_embeddings=same(src, tgt), tie_output=same(out, tgt), output_bias=self.has_bias(state),
                attention_scale="head_dim", layer_norm_eps=1e-5, suppress_ids=banned_ids(generation),
                position_offset=self.position_offset, embed_norm=self.embed_norm)
        except ValueError as exc:  # e.g. a pad id outside the vocabulary
            raise ConfigError(f"config.json does not describe a usable model: {exc}") from None

    def has_bias(self, state: dict[str, torch.Tensor]) -> bool:
        """Whether the head needs its final_logits_bias. Published folders (bart-base, opus-mt, mBART-50,
        Pegasus) save it as zeros, and transformers starts a missing one at zeros: adding zeros changes no
        logit, so such a bias is left out, which saves an Add over (batch, tgt_vocab) every step."""
        bias = state.get("final_logits_bias")
        return self.output_bias and bias is not None and bool(bias.any())

    def convert(self, state: dict[str, torch.Tensor], config: TransformerConfig, embeddings: dict[str, str]
                ) -> dict[str, torch.Tensor]:
        keys = KeyMap(state, "BART-family")
        for target, role in (("src_embed.tokens.weight", "src"), ("tgt_embed.tokens.weight", "tgt"),
                             ("lm_head.weight", "out")):
            keys.copy(target, embeddings[role])
        if config.output_bias:
            bias = state["final_logits_bias"]  # (1, tgt_vocab)
            keys.target["lm_head.bias"] = bias.reshape(-1).clone()  # (tgt_vocab,)
        for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
            if self.embed_norm:
                keys.linear(f"{ours}.norm", f"model.{side}.layernorm_embedding")
            if self.final_norm:
                keys.linear(f"{side}_norm", f"model.{side}.layer_norm")
            if self.positions == "learned":
                keys.copy(f"{ours}.positions.weight", POSITION_KEYS[ours])
        _convert_layers(keys, config)
        fixed = set()
        if self.positions != "learned":  # a saved copy of a fixed table must be ours
            fixed = set(POSITION_KEYS.values())
            for key in fixed:
                _check_table(state, key, config)
        return keys.finish(ignored=fixed | UNUSED_KEYS)

    def check(self, hf: dict[str, Any]) -> None:
        """What config.json alone can rule out (before reading weights that may be large)."""
        check_stacks(hf)
        if hf.get("pad_token_id") is None:
            raise ConfigError("config.json has no pad_token_id; the model needs one to mask padded sources")

    def load(self, hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor]
             ) -> tuple[TransformerConfig, dict[str, str]]:
        embeddings = embedding_names(state, EMBEDDINGS, hf["tie_word_embeddings"], "BART-family")
        return self.config(hf, generation, state, embeddings), embeddings


def _convert_layers(keys: KeyMap, config: TransformerConfig) -> None:
    for side, ours, layer_map, n in (("encoder", "encoder_layers", ENCODER_LAYER, config.n_encoder_layers),
                                     ("decoder", "decoder_layers", DECODER_LAYER, config.n_decoder_layers)):
        for i in range(n):
            for theirs, mine in layer_map.items():
                src, dst = f"model.{side}.layers.{i}.{theirs}", f"{ours}.{i}.{mine}"
                if theirs.endswith("attn"):
                    for proj in ATTENTION:
                        keys.linear(f"{dst}.{proj}", f"{src}.{proj}")
                else:
                    keys.linear(dst, src)


def _check_table(state: dict[str, torch.Tensor], key: str, config: TransformerConfig) -> None:
    """Older folders saved the (fixed) position tables; they must be this family's layout."""
    if key not in state:
        return
    table = state[key].float()  # (position_offset + max_position_embeddings, d_model)
    ours = sinusoidal_table(table.shape[0], config.d_model, config.positions)
    rows = torch.arange(table.shape[0]) >= config.position_offset  # the padding rows before it may be zeros
    if table.shape != ours.shape or (table - ours)[rows].abs().max() > 1e-4:
        raise CheckpointError(f"{key} is not the {config.positions} table this model type uses; this checkpoint "
                              f"is not supported")


# --------------------------------------------------------------------------------------------------
# The families. Language tokens by their shape (transformers' tokenizer classes add them in code).

MBART_CODES = TokenShape("mbart", re.compile(r"^[a-z]{2}_[A-Z]{2}$"))  # en_XX, de_DE
NLLB_CODES = TokenShape("nllb", re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$"))  # eng_Latn
M2M100_CODES = TokenShape("m2m100", re.compile(r"^__[a-z]{2,3}__$"), wrapper=2)  # __en__ -> en


def _family(model_type: str, layout: BartLayout, tokenizer: TokenizerRule, **defaults: Any) -> Family:
    """Register a family of this kind; `defaults`: its config class's, over COMMON_DEFAULTS."""
    return register_family(Family(model_type, layout, {**COMMON_DEFAULTS, **defaults}, tokenizer))


# BartLayout(positions, position_offset, norm_first, final_norm, embed_norm, output_bias), then the
# tokenizer rule and the config class's defaults.
# OPUS-MT: its SentencePiece files, read by our Marian tokenizer (text.marian); pad = decoder start.
_family("marian", BartLayout("sinusoidal_concat", 0, False, False, False, True),
        TokenizerRule(sentencepiece=SentencePiece(read_marian, MARIAN_FILES, always=True, languages=MARIAN_CODES)),
        pad_token_id=58100, decoder_start_token_id=58100, eos_token_id=0, bos_token_id=None)
_family("bart", BartLayout("learned", 2, False, False, True, True), TokenizerRule({"": Template(("<s>",))}))
# MBart50Tokenizer: [src_lang] X </s>; MBartTokenizer (mbart-large-cc25): X </s> [src_lang]. Both strip
# trailing whitespace (transformers >= 5.25), as their SentencePiece models do.
_family("mbart", BartLayout("learned", 2, True, True, True, True), TokenizerRule({
    "MBart50": Template(("{lang}",), ("</s>",), MBART_CODES, strip_right=True),
    "": Template((), ("</s>", "{lang}"), MBART_CODES, strip_right=True)}),
    decoder_start_token_id=None)
# M2M100 folders are published without a tokenizer.json; NLLB's tokenizer class is NllbTokenizer
# (legacy_behaviour: X </s> [src_lang]).
_family("m2m_100", BartLayout("sinusoidal_fairseq", 2, True, True, False, False), TokenizerRule({
    "Nllb": Template(("{lang}",), ("</s>",), NLLB_CODES, legacy=Template((), ("</s>", "{lang}"), NLLB_CODES)),
    "": Template(("{lang}",), ("</s>",), M2M100_CODES)}, SentencePiece(read_m2m100, (M2M100_SPM,),
                                                                         languages=M2M100_CODES)),
    activation_function="relu", scale_embedding=True)
_family("pegasus", BartLayout("sinusoidal_concat", 0, True, True, False, True), TokenizerRule(),
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, bos_token_id=None)
