"""MarianMT (OPUS-MT) models in the Hugging Face folder format, without `transformers`.

Marian is the paper's post-LN Transformer with these differences, each a config option:
sinusoidal positions with all sines first (`sinusoidal_concat`), SiLU ("swish") or another
activation, optionally scaled embeddings, a `final_logits_bias` (`output_bias`), the pad id as
decoder start (`bos_id`), and a banned pad id (`suppress_ids`, from `bad_words_ids`).

The folder's generation settings (importers.hf_generation) become the export's default decoding
(`meta["generation_defaults"]` -> the manifest's `generation` section), so that decoding with no
options equals transformers' `generate()` with none: OPUS-MT's 4 beams, its max_length, its forced
EOS. Explicitly greedy decoding (runtime.generation.GREEDY) equals `generate(num_beams=1,
max_new_tokens=N)` except that transformers forces EOS as the N-th token (`forced_eos_token_id`):
its first N-1 tokens are ours with `max_new_tokens=N-1`, or ours with `forced_eos=True`.
Settings we do not reproduce are logged and listed in `meta["generation"]`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..model.checkpoint import Checkpoint, read_file
from ..model.transformer import sinusoidal_table
from .base import run
from ..files import read_json_object
from .common import KeyMap, max_len_for_table
from .hf_generation import banned_ids, generation_defaults, generation_report, generation_settings
from .source import Source

log = logging.getLogger(__name__)

# transformers' ACT2FN names -> ours. "gelu_new" (tanh approximation) is not exact, so it is absent.
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
ENCODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "fc1": "ffn.fc1", "fc2": "ffn.fc2",
                 "final_layer_norm": "norm2"}
DECODER_LAYER = {"self_attn": "self_attn", "self_attn_layer_norm": "norm1", "encoder_attn": "cross_attn",
                 "encoder_attn_layer_norm": "norm2", "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "norm3"}
# MarianConfig's defaults, for config.json files written by hand without some keys.
MARIAN_DEFAULTS = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16,
                   "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
                   "max_position_embeddings": 1024, "activation_function": "gelu", "scale_embedding": False,
                   "pad_token_id": 58100, "decoder_start_token_id": 58100, "eos_token_id": 0,
                   "forced_eos_token_id": 0, "tie_word_embeddings": True}
ATTENTION = ("q_proj", "k_proj", "v_proj", "out_proj")
POSITION_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
# Other embedding copies are either equal to the ones used, or unused (model.shared when untied);
# final_logits_bias is read directly (it may be absent).
UNUSED_KEYS = {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
               "lm_head.weight", "final_logits_bias"}
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")


@dataclass(frozen=True)
class MarianImporter:
    """A Hugging Face MarianMT folder: config.json + model.safetensors or pytorch_model.bin."""

    name: str = "marian"
    reads: str = "folder"
    hint: str = "check config.json"

    def detect(self, source: Source) -> bool:
        return (source.path / "config.json").is_file()

    def load(self, source: Source, options: dict[str, Any]) -> Checkpoint:
        """`options` may shorten `max_len`; any other option must agree with config.json."""
        path = source.path
        hf = {**MARIAN_DEFAULTS, **_read_json(path / "config.json")}
        _check_hf_config(hf, path)  # before reading weights that may be large
        generation = generation_settings(path / "generation_config.json", hf)
        state = _read_weights(path)
        embeddings = _embedding_names(state, hf)
        config = _apply_options(marian_config(hf, generation, state, embeddings), options)
        converted = _convert(state, config, embeddings)
        tokenizer = _tokenizer(path, config)
        meta = {"layout": "marian", "tokenizer_folder": str(path) if tokenizer else None,
                "options": {k: v for k, v in options.items() if v is not None},
                "detected": {"d_model": config.d_model, "heads": config.n_heads, "layers": [config.n_encoder_layers,
                             config.n_decoder_layers], "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                             "shared": config.share_embeddings, "tied": config.tie_output},
                "generation": generation_report(generation, config.eos_id),
                "generation_defaults": generation_defaults(generation, config.max_len, config.eos_id),
                "forced_eos_at_max_length": generation.get("forced_eos_token_id") is not None}
        return Checkpoint(config=config, state_dict=converted, tokenizer=tokenizer, path=str(path), meta=meta)


def import_marian(path: str | Path, options: dict[str, Any] | None = None) -> Checkpoint:
    """Read and check a MarianMT folder as a Checkpoint (what `load_any` does for a folder)."""
    return run(MarianImporter(), Source(Path(path)), dict(options or {}))


def marian_config(hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor],
                  embeddings: dict[str, str]) -> TransformerConfig:
    """Our config from MarianConfig and generation settings; vocab sizes and tying come from the weights."""
    src, tgt, out = (state[embeddings[k]] for k in ("src", "tgt", "out"))
    pad = hf["pad_token_id"]
    bos = _first(generation.get("decoder_start_token_id"), hf.get("decoder_start_token_id"), pad)
    try:
        return TransformerConfig(
            src_vocab_size=src.shape[0], tgt_vocab_size=tgt.shape[0], d_model=hf["d_model"],
            n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
            n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=0.0,
            activation=ACTIVATIONS[hf["activation_function"]], norm_first=False, positions="sinusoidal_concat",
            max_len=hf["max_position_embeddings"], src_pad_id=pad, tgt_pad_id=pad, bos_id=bos,
            eos_id=_single_eos(_first(generation.get("eos_token_id"), hf["eos_token_id"])),
            scale_embeddings=bool(hf["scale_embedding"]), final_norm=False,
            share_embeddings=_same(src, tgt), tie_output=_same(out, tgt), output_bias=True,
            attention_scale="head_dim", layer_norm_eps=1e-5, suppress_ids=banned_ids(generation))
    except ValueError as exc:  # e.g. a pad id outside the vocabulary
        raise ConfigError(f"config.json does not describe a usable model: {exc}") from None


def _check_hf_config(hf: dict[str, Any], path: Path) -> None:
    """What config.json alone can rule out."""
    if hf.get("model_type") != "marian":
        raise ConfigError(f"{path}/config.json describes a {hf.get('model_type')!r} model; only marian "
                          f"folders are supported")
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"] or hf["encoder_ffn_dim"] != hf["decoder_ffn_dim"]:
        raise ConfigError("encoder and decoder with different heads or ffn sizes are not supported")
    if hf["activation_function"] not in ACTIVATIONS:
        raise ConfigError(f"activation {hf['activation_function']!r} is not supported; supported: "
                          f"{', '.join(ACTIVATIONS)}")
    if hf["pad_token_id"] is None:
        raise ConfigError("config.json has no pad_token_id; Marian models need one (it is also the decoder start)")


def _embedding_names(state: dict[str, torch.Tensor], hf: dict[str, Any]) -> dict[str, str]:
    """Which saved tensor each embedding uses. Tied tensors are saved once, under the first name.

    Tying is read from the weights rather than the flags: transformers 5 unties
    `share_encoder_decoder_embeddings` models when `tie_word_embeddings` is false.
    """
    candidates = {"src": ("model.encoder.embed_tokens.weight", "model.shared.weight"),
                  "tgt": ("model.decoder.embed_tokens.weight", "model.shared.weight"),
                  "out": ("lm_head.weight", "model.decoder.embed_tokens.weight", "model.shared.weight")}
    names = {role: next((n for n in options if n in state), "") for role, options in candidates.items()}
    missing = [candidates[role][0] for role, name in names.items() if not name]
    if missing:
        raise CheckpointError(f"the weights have no {', '.join(missing)}; this is not a MarianMT checkpoint")
    tied = hf["tie_word_embeddings"]
    if not tied and names["out"] != "lm_head.weight":
        raise CheckpointError("config.json unties the output layer (tie_word_embeddings false) but the weights "
                              "have no lm_head.weight; re-save the model")
    if tied and not _same(state[names["out"]], state[names["tgt"]]):
        raise CheckpointError(f"config.json ties lm_head.weight to {names['tgt']} but the saved tensors differ; "
                              f"set tie_word_embeddings to false in config.json if the model was trained untied")
    return names


def _convert(state: dict[str, torch.Tensor], config: TransformerConfig, embeddings: dict[str, str]
             ) -> dict[str, torch.Tensor]:
    keys = KeyMap(state, "marian")
    for target, role in (("src_embed.tokens.weight", "src"), ("tgt_embed.tokens.weight", "tgt"),
                         ("lm_head.weight", "out")):
        keys.copy(target, embeddings[role])
    # transformers starts a missing final_logits_bias at zeros.
    bias = state.get("final_logits_bias", torch.zeros(1, config.tgt_vocab_size))
    keys.target["lm_head.bias"] = bias.reshape(-1).clone()  # (1, tgt_vocab) -> (tgt_vocab,)
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
    for key in POSITION_KEYS:
        _check_positions(state, key, config)
    return keys.finish(ignored=set(POSITION_KEYS) | UNUSED_KEYS)


def _check_positions(state: dict[str, torch.Tensor], key: str, config: TransformerConfig) -> None:
    """Older transformers saved the (fixed) position tables; they must be Marian's layout."""
    if key not in state:
        return
    table = state[key].float()  # (max_position_embeddings, d_model)
    ours = sinusoidal_table(table.shape[0], config.d_model, config.positions)
    if table.shape != ours.shape or (table - ours).abs().max() > 1e-4:
        raise CheckpointError(f"{key} is not Marian's sinusoidal table; this checkpoint is not supported")


def _apply_options(config: TransformerConfig, options: dict[str, Any]) -> TransformerConfig:
    """A shorter --max-len is allowed (a smaller exported table); other options must agree with config.json."""
    ours = {"heads": config.n_heads, "src_pad_id": config.src_pad_id, "tgt_pad_id": config.tgt_pad_id,
            "bos_id": config.bos_id, "eos_id": config.eos_id, "norm_first": config.norm_first,
            "activation": config.activation}
    for name, value in options.items():
        if value is None or name == "max_len":
            continue
        if name not in ours:
            raise ConfigError(f"{{{name}}} does not apply to a marian folder: its config.json describes the model",
                              options={name: None})
        if ours[name] != value:
            raise ConfigError(f"{{{name}}} does not apply: this marian folder's config.json sets {ours[name]!r}",
                              options={name: value})
    return config.replace(max_len=max_len_for_table(options, config.max_len, "Marian's position table"))


def _tokenizer(path: Path, config: TransformerConfig) -> dict[str, Any] | None:
    if not all((path / name).exists() for name in TOKENIZER_FILES):
        log.warning("%s has no %s: the export will take token ids only", path, ", ".join(TOKENIZER_FILES))
        return None
    from ..text.marian import MarianTokenizer

    tokenizer = MarianTokenizer.from_folder(path)
    if (tokenizer.eos_id, tokenizer.pad_id) != (config.eos_id, config.src_pad_id):
        raise ConfigError(f"vocab.json gives eos {tokenizer.eos_id} and pad {tokenizer.pad_id}, config.json "
                          f"{config.eos_id} and {config.src_pad_id}; the folder mixes two models")
    return tokenizer.to_dict()


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / "model.safetensors").exists():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ConfigError("reading model.safetensors needs safetensors: "
                              "pip install 'tfm-export[sentencepiece]'") from None
        try:
            return load_file(str(path / "model.safetensors"))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise CheckpointError(f"{path}/model.safetensors is corrupt ({exc}); re-download it") from None
    if (path / "pytorch_model.bin").exists():
        state = read_file(path / "pytorch_model.bin")
        if isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()):
            return state
        raise CheckpointError(f"{path}/pytorch_model.bin holds no state_dict of tensors; re-download it")
    raise CheckpointError(f"{path} has neither model.safetensors nor pytorch_model.bin "
                          f"(sharded weights are not supported)")


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, CheckpointError, "a Hugging Face model folder needs it", "re-download it")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and bool(torch.equal(a, b)))


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _single_eos(value: int | list[int]) -> int:
    if isinstance(value, list):
        if len(value) != 1:
            raise ConfigError(f"several EOS ids {value} are not supported; the export stops on one id")
        value = value[0]
    return int(value)
