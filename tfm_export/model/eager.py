"""The runtime's API over the eager PyTorch model (KV cache, CPU or CUDA): for comparisons."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from .checkpoint import Checkpoint
from ..runtime.api import GenerateMixin
from ..runtime.decode.loop import DecoderCache
from ..runtime.device import device_kind
from ..runtime.options.generation import GenerationConfig
from ..runtime.sources import float_source, source_batch
from ..errors import DeviceError
from .generate import EagerCache
from .transformer import Transformer


def torch_device(spec: str) -> torch.device:
    """`cpu`, `cuda`, `cuda:N`, `auto` -> a torch device; CUDA without a GPU is a DeviceError."""
    kind = device_kind(spec)
    if kind is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if kind[0] == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA requested but PyTorch sees no GPU (or is a CPU build); use --device cpu")
    return torch.device("cpu") if kind[0] == "cpu" else torch.device("cuda", kind[1])


class EagerModel(GenerateMixin):
    """`generate`, `generate_ids`, `translate`, `stream` like tfm_export.runtime.ExportedModel (runtime.api),
    on PyTorch with its KV cache."""

    def __init__(self, model: Transformer, device: str = "cpu", tokenizer: dict[str, Any] | None = None,
                 tokenizer_folder: str | os.PathLike | None = None, generation: GenerationConfig | None = None):
        self.device = torch_device(device)
        self.model = model.to(self.device).eval()
        self.config = model.config
        self._tokenizer, self._tokenizer_folder = tokenizer, tokenizer_folder
        self.generation = generation or GenerationConfig()
        self.cache = EagerCache(self.model)
        self.draft_lengths = {}  # GenerateMixin's; unused: the eager model has no checking cache

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint | str | os.PathLike, device: str = "cpu") -> "EagerModel":
        if not isinstance(checkpoint, Checkpoint):
            from ..importers import load_any

            checkpoint = load_any(checkpoint)
        return cls(checkpoint.build_model(), device, checkpoint.tokenizer, checkpoint.meta.get("tokenizer_folder"),
                   GenerationConfig.from_dict(checkpoint.meta.get("generation_defaults")))

    @cached_property
    def tokenizer(self) -> Any:
        from ..errors import InputError
        from ..text.tokenizer import tokenizer_from_dict

        if not self._tokenizer:
            raise InputError("this checkpoint has no tokenizer; pass token ids instead of text")
        folder = Path(self._tokenizer_folder) if self._tokenizer_folder else None
        return tokenizer_from_dict(self._tokenizer, folder)

    def source_input(self, sources: Any) -> torch.Tensor:
        """Token ids (batch, src_len), or float32 features (batch, n_mels, n_frames) or padded frames (batch,
        src_len, n_feats), as the export would declare them (export.specs.encoder_input)."""
        if not self.config.source_kind.ids:
            from ..export.specs import encoder_input

            floats = float_source(sources, encoder_input(self.config), self.config.max_len)
            return torch.from_numpy(floats).to(self.device)
        return torch.from_numpy(source_batch(sources, self.config)).to(self.device)  # (batch, src_len)

    def cache_for(self, config: GenerationConfig, steps: int) -> DecoderCache:
        return self.cache
