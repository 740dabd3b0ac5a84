"""MarianMT (OPUS-MT) models in the Hugging Face folder format, without `transformers`.

Marian is the paper's post-LN Transformer with these differences, each a config option:
sinusoidal positions with all sines first (`sinusoidal_concat`), SiLU ("swish") or another
activation, optionally scaled embeddings, a `final_logits_bias` (`output_bias`), the pad id as
decoder start (`bos_id`), and a banned pad id (`suppress_ids`, from `bad_words_ids`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, read_file
from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..model import sinusoidal_table
from .common import KeyMap

# Tied tensors are saved once; each target takes the first name present.
EMBEDDING_NAMES = {
    "src_embed.tokens.weight": ("model.encoder.embed_tokens.weight", "model.shared.weight"),
    "tgt_embed.tokens.weight": ("model.decoder.embed_tokens.weight", "model.shared.weight"),
    "lm_head.weight": ("lm_head.weight", "model.decoder.embed_tokens.weight", "model.shared.weight"),
}
ENCODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "fc1": "ffn.fc1", "fc2": "ffn.fc2",
                 "final_layer_norm": "norm2"}
DECODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "encoder_attn": "cross_attn",
                 "encoder_attn_layer_norm": "norm2", "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "norm3"}
ATTENTION = ("q_proj", "k_proj", "v_proj", "out_proj")
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")


def import_marian(path: Path, options: dict[str, Any] | None = None) -> Checkpoint:
    """Read a MarianMT folder (config.json + safetensors or .bin weights) as a Checkpoint."""
    path = Path(path)
    hf = _read_json(path / "config.json")
    if hf.get("model_type") != "marian":
        raise ConfigError(f"{path}/config.json describes a {hf.get('model_type')!r} model; only marian "
                          f"folders are supported")
    generation = _read_json(path / "generation_config.json") if (path / "generation_config.json").exists() else {}
    config = marian_config(hf, generation)
    state = _read_weights(path)
    converted = _convert(state, config)
    tokenizer = _tokenizer(path, hf)
    meta = {"layout": "marian", "tokenizer_folder": str(path) if tokenizer else None,
            "detected": {"d_model": config.d_model, "heads": config.n_heads, "vocab": config.tgt_vocab_size,
                         "layers": [config.n_encoder_layers, config.n_decoder_layers]},
            "forced_eos_at_max_length": (generation.get("forced_eos_token_id", hf.get("forced_eos_token_id"))
                                         is not None)}
    return Checkpoint(config=config, state_dict=converted, tokenizer=tokenizer, path=str(path), meta=meta)


def marian_config(hf: dict[str, Any], generation: dict[str, Any]) -> TransformerConfig:
    """Our config from Hugging Face's MarianConfig (and generation_config) dicts."""
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"] or hf["encoder_ffn_dim"] != hf["decoder_ffn_dim"]:
        raise ConfigError("encoder and decoder with different heads or ffn sizes are not supported")
    vocab = hf["vocab_size"]
    tgt_vocab = hf.get("decoder_vocab_size") or vocab
    pad = hf["pad_token_id"]
    banned = generation.get("bad_words_ids", hf.get("bad_words_ids")) or []
    return TransformerConfig(
        src_vocab_size=vocab, tgt_vocab_size=tgt_vocab, d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=0.0,
        activation=hf.get("activation_function", "gelu"), norm_first=False, positions="sinusoidal_concat",
        max_len=hf["max_position_embeddings"], src_pad_id=pad, tgt_pad_id=pad,
        bos_id=hf.get("decoder_start_token_id", pad), eos_id=hf["eos_token_id"],
        scale_embeddings=bool(hf.get("scale_embedding", False)), final_norm=False,
        share_embeddings=bool(hf.get("share_encoder_decoder_embeddings", True)) and tgt_vocab == vocab,
        tie_output=bool(hf.get("tie_word_embeddings", True)), output_bias=True,
        suppress_ids=tuple(ids[0] for ids in banned if len(ids) == 1))


def _convert(state: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    keys = KeyMap(state, "marian")
    for target, names in EMBEDDING_NAMES.items():
        found = next((n for n in names if n in state), names[-1])
        keys.copy(target, found)
    # Untied copies of the same embedding are used through the names above.
    keys.consumed.update({n for names in EMBEDDING_NAMES.values() for n in names} & set(state))
    bias = keys.get("final_logits_bias")
    if bias is not None:
        keys.target["lm_head.bias"] = bias.reshape(-1).clone()  # (1, vocab) -> (vocab,)
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
        _check_positions(state, f"model.{side}.embed_positions.weight", config)
    positions = {f"model.{s}.embed_positions.weight" for s in ("encoder", "decoder")}
    return keys.finish(ignored=positions)


def _check_positions(state: dict[str, torch.Tensor], key: str, config: TransformerConfig) -> None:
    if key not in state:
        return  # recomputed by transformers, so usually not saved
    ours = sinusoidal_table(config.max_len, config.d_model, config.positions)
    if (state[key].float() - ours).abs().max() > 1e-4:
        raise CheckpointError(f"{key} is not Marian's sinusoidal table; this checkpoint is not supported")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / "model.safetensors").exists():
        from safetensors.torch import load_file

        try:
            return load_file(str(path / "model.safetensors"))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise CheckpointError(f"{path}/model.safetensors is corrupt ({exc}); re-download it") from None
    if (path / "pytorch_model.bin").exists():
        return read_file(path / "pytorch_model.bin")
    raise CheckpointError(f"{path} has neither model.safetensors nor pytorch_model.bin")


def _tokenizer(path: Path, hf: dict[str, Any]) -> dict[str, Any] | None:
    if not all((path / name).exists() for name in TOKENIZER_FILES):
        return None
    from ..marian_tokenizer import MarianTokenizer

    return MarianTokenizer.from_folder(path, eos_id=hf["eos_token_id"], pad_id=hf["pad_token_id"]).to_dict()


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CheckpointError(f"{path} is missing; a Hugging Face model folder needs it")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
