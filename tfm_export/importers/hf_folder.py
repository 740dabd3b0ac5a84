"""Reading a Hugging Face model folder without `transformers`: config.json, the weights, and the
helpers every kind of family shares (importers.families.bart, importers.families.t5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, ConfigError, first_line, shorten
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


# Weight files of a folder, in transformers' order of preference: one safetensors file, its sharded form (an index
# naming the shards), then the same two for PyTorch's pickles (read with weights_only).
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE, PICKLE_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
WEIGHT_NAMES = (SAFETENSORS, SAFETENSORS_INDEX, PICKLE, PICKLE_INDEX)


def weight_files(path: Path) -> list[Path]:
    """The files `read_weights` reads from the folder `path`: one weights file, or the shards its index names
    (in the index's order); a CheckpointError when there is none, or the index is broken or names a missing shard."""
    name = next((n for n in WEIGHT_NAMES if (path / n).is_file()), None)
    if name is None:
        raise CheckpointError(f"{path} has no weights: neither {SAFETENSORS} nor {PICKLE} (nor a sharded "
                              f"{SAFETENSORS_INDEX} or {PICKLE_INDEX}); re-download the model")
    if not name.endswith(".index.json"):
        return [path / name]
    return [path / shard for shard in shard_names(path / name)]


def index_shards(index: Path) -> list[str]:
    """The shard files an index's weight_map names, each once, in its order: plain file names beside the index."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or \
            not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index} has no weight_map of tensor name -> shard file; re-download it")
    shards = list(dict.fromkeys(weight_map.values()))
    for shard in shards:
        # A shard is a file beside the index: a name with a folder in it could read outside the model folder.
        if Path(shard).name != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{index} names the shard {shard!r}, not a file beside it; re-download it")
    return shards


def shard_names(index: Path) -> list[str]:
    """`index_shards`, every one present beside the index."""
    shards = index_shards(index)
    for shard in shards:
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index} names the shard {shard}, which is missing from {index.parent}; "
                                  f"re-download the model")
    return shards


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The folder's weights as one state dict (`weight_files`): shard by shard, each shard's tensors moved into
    the one dict and the shard dropped, so the weights are held once, never twice."""
    files = weight_files(path)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        shard = _read_safetensors(file) if file.suffix == ".safetensors" else _read_pickle(file)
        clash = state.keys() & shard.keys()
        if clash:
            raise CheckpointError(f"{file} holds {shorten(sorted(clash), 3)} again (another shard has them); "
                                  f"re-download the model")
        state.update(shard)
        del shard
    if len(files) > 1:
        _check_index(path, state)
    return state


def _check_index(path: Path, state: dict[str, torch.Tensor]) -> None:
    """Every tensor the index names was in its shards (a shard of another model version holds other names)."""
    index = next(path / n for n in (SAFETENSORS_INDEX, PICKLE_INDEX) if (path / n).is_file())
    missing = sorted(read_json(index)["weight_map"].keys() - state.keys())
    if missing:
        raise CheckpointError(f"{index} names tensors its shards do not hold ({shorten(missing, 3)}); "
                              f"re-download the model")


def _read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ConfigError(f"reading {file.name} needs safetensors: pip install 'tfm-export[sentencepiece]'") from None
    try:
        return load_file(str(file))
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{file} is corrupt ({first_line(exc, 200)}); re-download it") from None


def _read_pickle(file: Path) -> dict[str, torch.Tensor]:
    state = read_file(file)  # torch.load(weights_only=True): a checkpoint can never run code
    if isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()):
        return state
    raise CheckpointError(f"{file} holds no state_dict of tensors; re-download it")


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
    from .common import CONFIG_FIELDS, max_len_for_table

    ours = {name: getattr(config, field_name) for name, field_name in CONFIG_FIELDS.items() if name != "max_len"}
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
