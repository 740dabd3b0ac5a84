"""The registry of Hugging Face families: config.json's model_type -> one `Family` that holds all its facts.

A family is what transformers' code fixes for one model_type and config.json does not say: how
config.json and the weights map onto our one TransformerConfig and our weight names (its `layout`,
shared by the families of one kind: importers.families.bart, importers.families.t5), the defaults of
its config class, and how its tokenizer files become the export's tokenizer (`tokenizer`: its source
template and the shape of its language tokens). The generic importer (importers.hf) only looks the
family up and asks it; a new family is one `register_family` call in the module of its kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import torch

from ...config import TransformerConfig
from ...errors import ConfigError
from ..hf_tokenizers import TokenizerRule


class Layout(Protocol):
    """How one kind of family maps config.json and the weights onto ours."""

    table: str  # what bounds --max-len, for messages ("the position table")
    unbounded: bool  # no position table bounds the length (T5): any --max-len is allowed

    def check(self, hf: dict[str, Any]) -> None:
        """Refuse what config.json alone rules out, before the weights (which may be large) are read."""

    def load(self, hf: dict[str, Any], generation: dict[str, Any], state: dict[str, torch.Tensor]
             ) -> tuple[TransformerConfig, dict[str, str]]:
        """Our config, and which saved tensor each embedding role (src, tgt, out) uses."""

    def convert(self, state: dict[str, torch.Tensor], config: TransformerConfig, embeddings: dict[str, str]
                ) -> dict[str, torch.Tensor]:
        """Their weights under our names, every one used (common.KeyMap)."""


@dataclass(frozen=True)
class Family:
    """One Hugging Face model_type: everything about it that config.json does not say."""

    model_type: str  # config.json's model_type
    layout: Layout  # config.json -> our config, their weight names -> ours
    defaults: Mapping[str, Any]  # the config class's values for what a hand-written config.json leaves out
    tokenizer: TokenizerRule  # which tokenizer files are read, the source template, the language tokens
    # Families whose encoder reads features (config.source "features"): (folder, config) -> the folder's
    # audio.features.FeatureConfig, checked against the config; recorded in the manifest (Manifest.features).
    features: Callable[[Path, TransformerConfig], Any] | None = None
    # Speech families (Whisper): the folder's generation settings (generation_config.json, else config.json)
    # -> the decoding settings the runtime's transcribe needs (Manifest.speech).
    speech: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # Generation settings the family's own decoding reproduces (Whisper's rules read begin_suppress_tokens),
    # so that the import does not warn that they are not.
    reproduces: tuple[str, ...] = ()
    # The FFN output projection reads outlier activations (transformers keeps T5's `wo` in float32,
    # `_keep_in_fp32_modules`): `--quantize int4` keeps it int8 by default (export.int4.Int4Settings.ffn_output).
    ffn_output_outliers: bool = False

    def config_json(self, raw: dict[str, Any]) -> dict[str, Any]:
        """config.json with the config class's defaults filled in."""
        return {**self.defaults, **raw}


_FAMILIES: dict[str, Family] = {}
FAMILIES: Mapping[str, Family] = MappingProxyType(_FAMILIES)  # model_type -> Family, read-only


def register_family(family: Family) -> Family:
    """Add `family` to the registry; a model_type is registered once."""
    if family.model_type in _FAMILIES:
        raise ValueError(f"model_type {family.model_type!r} is registered already")
    _FAMILIES[family.model_type] = family
    return family


def supported() -> list[str]:
    """The registered model types, sorted."""
    return sorted(_FAMILIES)


def family_for(model_type: Any, where: str) -> Family:
    """The family of config.json's `model_type`; a ConfigError names the supported ones (`where`:
    the config.json, for the message)."""
    family = _FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise ConfigError(f"{where} describes a {model_type!r} model; supported model types: "
                          f"{', '.join(supported())}")
    return family
