"""Checkpoint I/O: `{"format": "tfm-export/1", "config": {...}, "state_dict": {...}}` plus extras.

Loading always uses `torch.load(weights_only=True)`: a checkpoint can never run code.
"""

from __future__ import annotations

import logging
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError, problem_list
from .transformer import Transformer

log = logging.getLogger(__name__)

FORMAT = "tfm-export/1"
RESAVE_HINT = ("re-save it as plain tensors: torch.save(model.state_dict(), 'model.pt'), "
               "or tfm_export.checkpoint.save_checkpoint(model, 'model.pt')")


@dataclass
class Checkpoint:
    """A config, its weights and optional extras (tokenizer, sample inputs)."""

    config: TransformerConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: dict[str, Any] | None = None  # tfm_export.tokenizer's dict form, when trained with one
    samples: list[str] | None = None  # sample source texts for validation and demos
    path: str = ""  # where it was read from
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the detected import layout

    def build_model(self) -> Transformer:
        """A Transformer in eval mode with these weights (strict: every key must fit)."""
        model = Transformer(self.config)
        load_weights(model, self.state_dict, self.path)
        return model.eval()


def save_checkpoint(model: Transformer, path: str | os.PathLike, tokenizer: dict | None = None,
                    samples: list[str] | None = None) -> Path:
    """Write `model` (its config and weights) and extras atomically to `path`."""
    path = Path(path)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "config": model.config.to_dict(),
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
    }
    if tokenizer is not None:
        payload["tokenizer"] = tokenizer
    if samples is not None:
        payload["samples"] = list(samples)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def read_file(path: str | os.PathLike) -> Any:
    """`torch.load(weights_only=True)` with each failure turned into a one-line CheckpointError."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}; check the path")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise CheckpointError(f"{path} is empty; re-save the checkpoint")
    is_zip = head.startswith(b"PK")
    if not is_zip and head[:1] != b"\x80":
        raise CheckpointError(f"{path} is not a PyTorch checkpoint (expected a file written by torch.save)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc) or "weights_only" in str(exc):
            raise CheckpointError(
                f"{path} is a pickle that needs code to load (a whole module or custom classes), which "
                f"could run anything; {RESAVE_HINT}") from None
        raise CheckpointError(f"{path} is corrupt ({_first_line(exc)}); re-save the checkpoint") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is truncated or corrupt ({_first_line(exc)}); "
                              f"re-save or re-download it") from None


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a tfm-export checkpoint. A bare state_dict needs an importer (tfm_export.importers)."""
    data = read_file(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not a dict of weights; {RESAVE_HINT}")
    if data.get("format") != FORMAT:
        if data and all(isinstance(v, torch.Tensor) for v in data.values()):
            raise CheckpointError(
                f"{path} is a bare state_dict without a config; pass the model's sizes "
                f"(--config CONFIG.json, or --heads/--src-pad-id for tutorial and nn.Transformer layouts)")
        raise CheckpointError(f"{path} is not a tfm-export checkpoint (format {data.get('format')!r}, "
                              f"expected {FORMAT!r})")
    try:
        config = TransformerConfig.from_dict(data["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} has an invalid config: {_first_line(exc)}") from None
    state = data.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} has no state_dict; re-save the checkpoint")
    return Checkpoint(config=config, state_dict=state, tokenizer=data.get("tokenizer"),
                      samples=data.get("samples"), path=str(path))


def load_weights(model: Transformer, state: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Strictly load `state` into `model`, listing missing, unexpected and mis-shaped keys."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items()
                 if k in state and tuple(state[k].shape) != tuple(v.shape)]
    problems = problem_list(("missing keys", missing, 5), ("unexpected keys", unexpected, 5),
                            ("mis-shaped", misshaped, 3))
    if problems:
        raise CheckpointError(f"{source} does not fit the model config: {problems}; "
                              f"check the config saved with the weights")
    model.load_state_dict(state, strict=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
