"""Our own layout: a tfm-export checkpoint file, a trusted pickle of our Transformer (it carries
its config), or a bare state_dict of our model with its config given as an option."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import TransformerConfig
from ..errors import ConfigError
from ..model.checkpoint import FIT_HINT, FORMAT, Checkpoint, checkpoint_from
from ..model.transformer import Transformer
from .common import check_agrees
from .source import Source


@dataclass(frozen=True)
class NativeImporter:
    name: str = "tfm-export"
    reads: str = "file"
    hint: str = FIT_HINT

    def detect(self, source: Source) -> bool:
        data = source.data
        return isinstance(data, Transformer) or (isinstance(data, dict) and data.get("format") == FORMAT)

    def load(self, source: Source, options: dict[str, Any]) -> Checkpoint:
        checkpoint = self._load(source, options)
        check_agrees(options, checkpoint.config, "tfm-export checkpoint")
        return checkpoint

    def _load(self, source: Source, options: dict[str, Any]) -> Checkpoint:
        data, path = source.data, str(source.path)
        if isinstance(data, Transformer):  # unpickled with --trust-pickle
            return Checkpoint(config=data.config, state_dict=data.state_dict(), path=path,
                              meta={"layout": self.name, "detected": {"wrapper": "pickled module"}})
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return checkpoint_from(data, path)
        state = source.state
        if "config" not in options:
            raise ConfigError("a bare tfm-export state_dict needs {config}", options={"config": None})
        try:
            config = TransformerConfig.from_dict(options["config"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid {{config}}: {exc}", options={"config": None}) from None
        return Checkpoint(config=config, state_dict=state, path=path, meta={"layout": self.name})
