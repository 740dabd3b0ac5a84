"""Load any supported checkpoint as a tfm_export Checkpoint.

Layouts are detected from key names (`layout=` overrides). Each importer maps the other
framework's weights onto our Transformer and checks that every key was used.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..model.checkpoint import FORMAT, RESAVE_HINT, Checkpoint, load_checkpoint, read_file
from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError, load_object, problem_list, shorten
from ..model.transformer import Transformer

log = logging.getLogger(__name__)

# State-dict layouts: name -> module with matches(state) and convert(state, options).
STATE_DICT_LAYOUTS = {
    "tutorial": "tfm_export.importers.tutorial",
    "nn_transformer": "tfm_export.importers.nn_transformer",
}
# Folder layouts: name -> "module:function" taking (path, options).
FOLDER_LAYOUTS = {"marian": "tfm_export.importers.marian:import_marian"}
LAYOUTS = ("tfm-export", *STATE_DICT_LAYOUTS, *FOLDER_LAYOUTS)
# Key signatures we recognise but cannot convert -> why, and what to do instead.
RECOGNISED_UNSUPPORTED = {
    "encoder_layers.0.self_attn.q_proj.weight":
        "a bare state_dict of a tfm-export model without its config; pass --config CONFIG.json "
        "(the model's TransformerConfig as JSON)",
    "encoder.transformer_layers.0.attention.W_q.weight":
        "the W_q/W_k/W_v variant of the from-scratch tutorial, which is not supported: as published, its "
        "masked_fill(mask == 0, -1e-20) sets masked scores to about 0 instead of excluding them, so its "
        "decoder sees future tokens and no cached decoder can match it",
}
# Training scripts save {"epoch": ..., "model_state_dict": ..., "optimizer_state_dict": ...}.
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
# Added to every key by nn.DataParallel / DistributedDataParallel and by torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def load_any(path: str | os.PathLike, layout: str | None = None, trust_pickle: bool = False,
             options: dict[str, Any] | None = None) -> Checkpoint:
    """Read `path` (a checkpoint file or a model folder) of any supported layout.

    `layout`: one of LAYOUTS; default: our format, a folder's config.json (marian), or detected from
    a state_dict's key names. `trust_pickle`: allow unpickling a whole module (runs code from the file).
    `options`: what weights cannot tell, keyed like the CLI options: heads, src_pad_id, tgt_pad_id,
    bos_id, eos_id, norm_first, activation, max_len (and config, a TransformerConfig dict, for a
    bare state_dict of our own model); None values count as not given. `Checkpoint.meta` records
    the layout, the options given and what was detected.
    """
    path, options = Path(path), dict(options or {})
    if layout is not None and layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; supported: {', '.join(LAYOUTS)}")
    if path.is_dir() or layout in FOLDER_LAYOUTS:
        return _load_folder(path, layout or "marian", options)
    data = _read(path, trust_pickle)
    if isinstance(data, dict) and data.get("format") == FORMAT and layout in (None, "tfm-export"):
        return load_checkpoint(path)
    state, unwrapped = _state_dict(data, path)
    if "config" in options or layout == "tfm-export":
        return _bare_ours(state, path, options)
    name = layout or _detect(state, path)
    config, converted, detected = _convert(name, state, path, options)
    meta = {"layout": name, "options": {k: v for k, v in options.items() if v is not None},
            "detected": {"d_model": config.d_model, "layers": [config.n_encoder_layers, config.n_decoder_layers],
                         "d_ff": config.d_ff, "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                         "max_len": config.max_len, **detected, **unwrapped}}
    return Checkpoint(config=config, state_dict=converted, path=str(path), meta=meta)


def _convert(name: str, state: dict[str, torch.Tensor], path: Path, options: dict[str, Any]
             ) -> tuple[TransformerConfig, dict[str, torch.Tensor], dict[str, Any]]:
    """Run a state-dict importer, then prove that it set every weight of our model."""
    module = importlib.import_module(STATE_DICT_LAYOUTS[name])
    try:
        config, converted, detected = module.convert(state, options)
    except KeyError as exc:
        raise CheckpointError(f"cannot convert {path} as layout {name}: it has no {exc}; "
                              f"check --layout") from None
    except RuntimeError as exc:  # a tensor of the wrong shape for this layout
        raise CheckpointError(f"cannot convert {path} as layout {name}: {_first_line(exc)}; "
                              f"check --layout") from None
    except ValueError as exc:  # TransformerConfig rejects a size or an id given as an option
        raise ConfigError(f"cannot convert {path} as layout {name}: {exc}; check the options") from None
    _check_complete(config, converted, name)
    return config, converted, detected


def _check_complete(config: TransformerConfig, state: dict[str, torch.Tensor], layout: str) -> None:
    # A meta-device model has every name and shape but allocates nothing.
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    unset = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [f"{k} {tuple(state[k].shape)} != {shape}" for k, shape in expected.items()
                 if k in state and tuple(state[k].shape) != shape]
    problems = problem_list(("weights not set", unset, 5), ("unexpected weights", unexpected, 5),
                            ("mis-shaped", misshaped, 3))
    if problems:
        raise CheckpointError(f"the {layout} conversion does not fit the model it describes: {problems}; "
                              f"check --heads and --layout")


def _read(path: Path, trust_pickle: bool) -> Any:
    """Safe loading first; full unpickling only when that refuses and the user trusts the file."""
    try:
        return read_file(path)
    except CheckpointError as exc:
        if not trust_pickle or not path.is_file():
            raise
        refused = exc
    log.warning("--trust-pickle: unpickling %s runs code from the file", path)
    # The one place that unpickles arbitrary objects, on the user's explicit request
    # (--trust-pickle): weights_only loading cannot rebuild a whole module object.
    unsafe_load: Callable[..., Any] = getattr(torch, "load")
    try:
        return unsafe_load(path, map_location="cpu", weights_only=False)
    except (AttributeError, ModuleNotFoundError) as exc:
        raise CheckpointError(f"{path} needs the code that defined its classes ({exc}); run from that "
                              f"project, or {RESAVE_HINT}") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile):
        raise refused from None  # broken either way; the safe reader's message says how


def _state_dict(data: Any, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a module, a state_dict, or a training checkpoint that wraps one; prefixes
    added by DataParallel (`module.`) or torch.compile (`_orig_mod.`) are removed."""
    found: dict[str, str] = {}
    if isinstance(data, torch.nn.Module):
        data, found["wrapper"] = data.state_dict(), "pickled module"
    wrapper = next((k for k in WRAPPER_KEYS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if wrapper is not None:
        data, found["wrapper"] = data[wrapper], f"[{wrapper!r}]"
    if not (isinstance(data, dict) and data and all(isinstance(v, torch.Tensor) for v in data.values())):
        raise CheckpointError(f"{path} holds no state_dict of tensors; {RESAVE_HINT}")
    state = dict(data)
    while prefix := next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in state)), None):
        state = {k[len(prefix):]: v for k, v in state.items()}
        found["prefix"] = found.get("prefix", "") + prefix
    return state, found


def _detect(state: dict[str, torch.Tensor], path: Path) -> str:
    for name, module_name in STATE_DICT_LAYOUTS.items():
        if importlib.import_module(module_name).matches(state):
            log.info("detected layout %s", name)
            return name
    for signature, reason in RECOGNISED_UNSUPPORTED.items():
        if signature in state:
            raise CheckpointError(f"{path} is {reason}")
    raise CheckpointError(f"cannot tell the layout of {path} from its keys ({shorten(sorted(state), 3)}); "
                          f"pass --layout, one of {', '.join(STATE_DICT_LAYOUTS)}")


def _bare_ours(state: dict[str, torch.Tensor], path: Path, options: dict[str, Any]) -> Checkpoint:
    if "config" not in options:
        raise ConfigError("a bare tfm-export state_dict needs --config CONFIG.json")
    try:
        config = TransformerConfig.from_dict(options["config"])
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid --config: {exc}") from None
    return Checkpoint(config=config, state_dict=state, path=str(path), meta={"layout": "tfm-export"})


def _load_folder(path: Path, layout: str, options: dict[str, Any]) -> Checkpoint:
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a folder; the {layout} layout reads a model folder")
    if layout not in FOLDER_LAYOUTS:
        raise ConfigError(f"layout {layout!r} reads a file, not the folder {path}")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} has no config.json; pass a checkpoint file or a Hugging Face model folder")
    importer = load_object(FOLDER_LAYOUTS[layout], ConfigError, f"{layout} importer")
    return importer(path, options)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
