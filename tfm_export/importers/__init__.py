"""Load any supported checkpoint as a tfm_export Checkpoint.

Layouts are detected from key names (`layout=` overrides). Each importer maps the other
framework's weights onto our Transformer and checks that every key was used.
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any, Callable

import torch

from ..checkpoint import FORMAT, RESAVE_HINT, Checkpoint, load_checkpoint, read_file
from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError, load_object, shorten

log = logging.getLogger(__name__)

# State-dict layouts: name -> module with matches(state) and convert(state, options).
STATE_DICT_LAYOUTS = {
    "tutorial": "tfm_export.importers.tutorial",
    "nn_transformer": "tfm_export.importers.nn_transformer",
}
# Folder layouts: name -> "module:function" taking (path, options).
FOLDER_LAYOUTS = {"marian": "tfm_export.importers.marian:import_marian"}
LAYOUTS = ("tfm-export", *STATE_DICT_LAYOUTS, *FOLDER_LAYOUTS)


def load_any(path: str | os.PathLike, layout: str | None = None, trust_pickle: bool = False,
             options: dict[str, Any] | None = None) -> Checkpoint:
    """Read `path` (a checkpoint file or a model folder) of any supported layout."""
    path, options = Path(path), dict(options or {})
    if layout is not None and layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; supported: {', '.join(LAYOUTS)}")
    if path.is_dir() or layout in FOLDER_LAYOUTS:
        return _load_folder(path, layout or "marian", options)
    data = _read(path, trust_pickle)
    if isinstance(data, dict) and data.get("format") == FORMAT and layout in (None, "tfm-export"):
        return load_checkpoint(path)
    state = _state_dict(data, path)
    if "config" in options or layout == "tfm-export":
        return _bare_ours(state, path, options)
    name = layout or _detect(state, path)
    module = importlib.import_module(STATE_DICT_LAYOUTS[name])
    try:
        config, converted = module.convert(state, options)
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot convert {path} as layout {name}: {exc}") from None
    used = {k: v for k, v in options.items() if v is not None}
    meta = {"layout": name, "options": used,
            "detected": {"d_model": config.d_model, "layers": [config.n_encoder_layers, config.n_decoder_layers],
                         "d_ff": config.d_ff, "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                         "max_len": config.max_len}}
    return Checkpoint(config=config, state_dict=converted, path=str(path), meta=meta)


def _read(path: Path, trust_pickle: bool) -> Any:
    if not trust_pickle:
        return read_file(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}; check the path")
    log.warning("--trust-pickle: unpickling %s runs code from the file", path)
    # Full unpickling on the user's explicit request (--trust-pickle) only; weights_only loading
    # cannot rebuild a whole module object.
    unsafe_load: Callable[..., Any] = getattr(torch, "load")
    try:
        return unsafe_load(path, map_location="cpu", weights_only=False)
    except (AttributeError, ModuleNotFoundError) as exc:
        raise CheckpointError(f"{path} needs the code that defined its classes ({exc}); run from that "
                              f"project, or {RESAVE_HINT}") from None


def _state_dict(data: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(data, torch.nn.Module):
        data = data.state_dict()
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not (isinstance(data, dict) and data and all(isinstance(v, torch.Tensor) for v in data.values())):
        raise CheckpointError(f"{path} holds no state_dict of tensors; {RESAVE_HINT}")
    return dict(data)


def _detect(state: dict[str, torch.Tensor], path: Path) -> str:
    for name, module_name in STATE_DICT_LAYOUTS.items():
        if importlib.import_module(module_name).matches(state):
            log.info("detected layout %s", name)
            return name
    if "encoder_layers.0.self_attn.q_proj.weight" in state:
        raise CheckpointError(f"{path} is a bare state_dict of a tfm-export model without its config; pass "
                              f"--config CONFIG.json (the model's TransformerConfig as JSON)")
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
