"""Reading a Hugging Face model folder without `transformers`: config.json, the weights, and the
helpers every kind of family shares (importers.families.bart, importers.families.t5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, ConfigError
from ..files import read_json_object
from ..model.checkpoint import read_file

# transformers' ACT2FN names -> ours. gelu_new and gelu_pytorch_tanh are both the tanh approximation.
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}


def read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, CheckpointError, "a Hugging Face model folder needs it", "re-download it")


def read_optional_json(path: Path) -> dict[str, Any]:
    """A JSON file the folder may lack (tokenizer_config.json): {} when absent."""
    return read_json(path) if path.exists() else {}


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (read with weights_only)."""
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


def embedding_names(state: dict[str, torch.Tensor], candidates: dict[str, tuple[str, ...]], tied: bool,
                    what: str) -> dict[str, str]:
    """Which saved tensor each embedding role (src, tgt, out) uses; tied tensors are saved once, under
    the first name. Tying is read from the weights rather than the flags: transformers 5 unties
    `share_encoder_decoder_embeddings` Marian models when `tie_word_embeddings` is false."""
    names = {role: next((n for n in options if n in state), "") for role, options in candidates.items()}
    missing = [candidates[role][0] for role, name in names.items() if not name]
    if missing:
        raise CheckpointError(f"the weights have no {', '.join(missing)}; this is not a {what} checkpoint")
    if not tied and names["out"] != "lm_head.weight":
        raise CheckpointError("config.json unties the output layer (tie_word_embeddings false) but the weights "
                              "have no lm_head.weight; re-save the model")
    if tied and names["out"] == "lm_head.weight" and not same(state["lm_head.weight"], state[names["tgt"]]):
        raise CheckpointError(f"config.json ties lm_head.weight to {names['tgt']} but the saved tensors differ; "
                              f"set tie_word_embeddings to false in config.json if the model was trained untied")
    return names


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and bool(torch.equal(a, b)))


def first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def single_id(value: int | list[int], what: str = "EOS") -> int:
    if isinstance(value, list):
        if len(value) != 1:
            raise ConfigError(f"several {what} ids {value} are not supported; the export stops on one id")
        value = value[0]
    return int(value)


def apply_options(config: Any, options: dict[str, Any], layout: str, table: str, unbounded: bool = False) -> Any:
    """A shorter --max-len is allowed (a smaller exported table; any length where no table bounds it,
    `unbounded`: T5); other options must agree with config.json."""
    from .common import max_len_for_table

    ours = {"heads": config.n_heads, "src_pad_id": config.src_pad_id, "tgt_pad_id": config.tgt_pad_id,
            "bos_id": config.bos_id, "eos_id": config.eos_id, "norm_first": config.norm_first,
            "activation": config.activation}
    for name, value in options.items():
        if value is None or name == "max_len":
            continue
        if name not in ours:
            raise ConfigError(f"{{{name}}} does not apply to a {layout} folder: its config.json describes the model",
                              options={name: None})
        if ours[name] != value:
            raise ConfigError(f"{{{name}}} does not apply: this {layout} folder's config.json sets {ours[name]!r}",
                              options={name: value})
    if unbounded and options.get("max_len") is not None:
        return config.replace(max_len=max_len_for_table(options, max(options["max_len"], 1), table))
    return config.replace(max_len=max_len_for_table(options, config.max_len, table))
