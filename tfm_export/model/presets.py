"""Randomly initialised checkpoints from the presets (try every command without training)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .checkpoint import save_checkpoint
from ..config import PRESETS, TransformerConfig
from ..errors import OutputError
from ..files import write_file_atomically
from .transformer import Transformer


def init_model(preset: str | TransformerConfig, seed: int = 0) -> Transformer:
    """A Transformer with seeded random weights, in eval mode."""
    config = PRESETS[preset] if isinstance(preset, str) else preset
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Transformer(config)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def init_checkpoint(path: str | os.PathLike, preset: str, seed: int = 0) -> TransformerConfig:
    """Write a seeded random checkpoint of `preset` to `path` (parents created); returns its config.

    The file is written beside `path` and renamed into place, so a failure (full disk, ...) leaves
    neither a partial `path` nor a temporary file.
    """
    model = init_model(preset, seed)
    write_file_atomically(path, lambda tmp: _save(model, tmp, Path(path)))
    return model.config


def _save(model: Transformer, tmp: Path, path: Path) -> None:
    try:
        save_checkpoint(model, tmp)
    except RuntimeError as exc:  # torch's file writer reports write failures (full disk) this way
        raise OutputError(f"cannot write {path}: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
