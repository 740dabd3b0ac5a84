"""The families' layouts: the published checkpoints' sizes in transformers' own config classes (FULL, and
TINY for smoke tests), and random seeded folders of them saved as transformers saves them."""

from __future__ import annotations

from pathlib import Path
from transformers import AutoModelForSeq2SeqLM, BartConfig, GenerationConfig, M2M100Config, MarianConfig, T5Config
from typing import Any
import json
import torch

# the published opus-mt-en-de layout (the `marian` scenario's model and the families' marian row)
OPUS_MT = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
               encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
               max_position_embeddings=512, pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100,
               scale_embedding=True, activation_function="swish")


# The published checkpoints' layouts: transformers' config class and what differs from its defaults.
FULL: dict[str, tuple[type, dict[str, Any]]] = {
    "bart": (BartConfig, dict(  # facebook/bart-base
        vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024,
        forced_eos_token_id=None,
        normalize_before=False)),  # as bart-base's config.json; CTranslate2 reads it (transformers 5 dropped it)
    "t5": (T5Config, dict(  # t5-small
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
        feed_forward_proj="relu", decoder_start_token_id=0)),
    "flan_t5": (T5Config, dict(  # google/flan-t5-base: T5 v1.1, gated GELU, untied lm_head
        vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0)),
    "nllb": (M2M100Config, dict(  # facebook/nllb-200-distilled-600M
        vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
        scale_embedding=True, activation_function="relu", decoder_start_token_id=2)),
    "nllb_1.3b": (M2M100Config, dict(  # facebook/nllb-200-1.3B: 5.5 GB of float32 weights
        vocab_size=256206, d_model=1024, encoder_layers=24, decoder_layers=24, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192, max_position_embeddings=1024,
        scale_embedding=True, activation_function="relu", decoder_start_token_id=2)),
    "marian": (MarianConfig, OPUS_MT),  # Helsinki-NLP/opus-mt-*
}
# --scale tiny: these replace the sizes a family's layout sets (Marian: its pad, the last id, too).
TINY = dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, encoder_ffn_dim=128, decoder_ffn_dim=128, num_heads=4,
            encoder_attention_heads=4, decoder_attention_heads=4, num_layers=2, num_decoder_layers=2,
            encoder_layers=2, decoder_layers=2)
TINY_MARIAN = dict(decoder_vocab_size=512, pad_token_id=511, decoder_start_token_id=511)
UNK_ID = {"bart": 3, "t5": 2, "flan_t5": 2, "nllb": 3, "nllb_1.3b": 3, "marian": 1}  # the tokenizers' <unk>
FIRST_ID = 4  # source ids are drawn from FIRST_ID .. vocab - 2 (no special id of any family)
IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def family_config(family: str, scale: str) -> Any:
    cls, sizes = FULL[family]
    if scale == "tiny":
        sizes = {**sizes, **{k: v for k, v in TINY.items() if k in sizes}}
        sizes |= TINY_MARIAN if family == "marian" else {}
    return cls(**sizes)


def build(family: str, scale: str, seed: int, folder: Path) -> None:
    """Random weights of the family's layout, saved as transformers saves them (no tokenizer)."""
    cfg = family_config(family, scale)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(cfg).eval()
    # Only the ids: no forced EOS, no n-gram bans, no default beams (each run says how it decodes).
    ids = {k: getattr(cfg, k, None) for k in IDS}
    model.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    if family == "flan_t5":  # T5 v1.1: an lm_head of its own (transformers 5 ties every T5 it builds)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * cfg.d_model ** -0.5)
        model.all_tied_weights_keys.pop("lm_head.weight", None)
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    if "scale_decoder_outputs" in saved:  # T5: as published, tie_word_embeddings says whether outputs are scaled
        saved["tie_word_embeddings"] = saved.pop("scale_decoder_outputs")
        (folder / "config.json").write_text(json.dumps(saved, indent=2) + "\n")

