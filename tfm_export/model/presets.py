"""Randomly initialised checkpoints from the presets (try every command without training)."""

from __future__ import annotations

import os

import torch

from .checkpoint import save_checkpoint
from ..config import PRESETS, TransformerConfig
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

    save_checkpoint writes beside `path` and renames into place, so a failure (full disk, ...) leaves
    neither a partial `path` nor a temporary file; an existing `path` is replaced only when it is a
    tfm-export checkpoint.
    """
    model = init_model(preset, seed)
    save_checkpoint(model, path)
    return model.config
