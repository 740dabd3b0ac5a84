"""The importer protocol, the load -> validate pipeline every importer runs through, and the
importer of state-dict layouts recognised by their key names (tutorial, nn_transformer)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError, first_line
from ..model.checkpoint import Checkpoint, check_checkpoint
from .source import Source


class Importer(Protocol):
    """One source format: `detect` says whether a source is in it, `load` reads it as a Checkpoint.

    `load` need not check the result: `run` does, the same way for every importer.
    """

    name: str  # the --layout value
    reads: str  # "file" or "folder"
    hint: str  # what to check when the loaded weights do not fit their config

    def detect(self, source: Source) -> bool: ...

    def load(self, source: Source, options: dict[str, Any]) -> Checkpoint: ...


def run(importer: Importer, source: Source, options: dict[str, Any], name: str | None = None) -> Checkpoint:
    """load -> validate: the importer's Checkpoint, once its weights fit its config and are finite.
    `name`: the layout as the user called it (an alias of importer.name), for messages."""
    path, name = source.path, name or importer.name
    if importer.reads == "folder" and not path.is_dir():
        raise CheckpointError(f"{path} is not a folder; the {name} layout reads a model folder")
    if importer.reads == "file" and path.is_dir():
        raise ConfigError(f"layout {name!r} reads a file, not the folder {path}")
    return check_checkpoint(importer.load(source, options), f"{path} (layout {name})", importer.hint)


@dataclass(frozen=True)
class StateDictImporter:
    """A state_dict layout: `module` has matches(state) and convert(state, options), which returns
    (config, our state_dict, what was detected)."""

    name: str
    module: ModuleType
    reads: str = "file"
    hint: str = "check {heads} and {layout}"  # option fields: see errors.TfmExportError

    def detect(self, source: Source) -> bool:
        return bool(self.module.matches(source.state))

    def load(self, source: Source, options: dict[str, Any]) -> Checkpoint:
        config, converted, detected = self._convert(source, options)
        meta = {"layout": self.name, "options": {k: v for k, v in options.items() if v is not None},
                "detected": {"d_model": config.d_model, "layers": [config.n_encoder_layers, config.n_decoder_layers],
                             "d_ff": config.d_ff, "vocab": [config.src_vocab_size, config.tgt_vocab_size],
                             "max_len": config.max_len, **detected, **source.unwrapped[1]}}
        return Checkpoint(config=config, state_dict=converted, path=str(source.path), meta=meta)

    def _convert(self, source: Source, options: dict[str, Any]
                 ) -> tuple[TransformerConfig, dict[str, torch.Tensor], dict[str, Any]]:
        """The module's conversion, its failures turned into one-line errors that name the layout."""
        what = f"cannot convert {source.path} as layout {self.name}"
        try:
            return self.module.convert(source.state, options)
        except KeyError as exc:
            raise CheckpointError(f"{what}: it has no {exc}; check {{layout}}", options={"layout": None}) from None
        except RuntimeError as exc:  # a tensor of the wrong shape for this layout
            raise CheckpointError(f"{what}: {first_line(exc, 200)}; check {{layout}}",
                                  options={"layout": None}) from None
        except ValueError as exc:  # TransformerConfig rejects a size or an id given as an option
            raise ConfigError(f"{what}: {exc}; check the options") from None
