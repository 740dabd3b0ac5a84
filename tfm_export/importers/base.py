"""The importer protocol, the load -> validate pipeline every importer runs through, and the
importer of state-dict layouts recognised by their key names (tutorial, nn_transformer), and what a
state_dict no layout matches looks like (`recognised`: the error then points at export.module_export)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import torch

from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError, first_line, shorten
from ..model.checkpoint import Checkpoint, check_checkpoint
from .frontend import declare_frontend
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
    checkpoint = check_checkpoint(importer.load(source, options), f"{path} (layout {name})", importer.hint)
    # A frames model's filterbank, when its layout tells one (`frontend`: an importer's default; none else)
    return declare_frontend(checkpoint, options, getattr(importer, "frontend", "none"))


@dataclass(frozen=True)
class StateDictImporter:
    """A state_dict layout: `module` has matches(state) and convert(state, options), which returns
    (config, our state_dict, what was detected)."""

    name: str
    module: ModuleType
    reads: str = "file"
    hint: str = "check {heads} and {layout}"  # option fields: see errors.TfmExportError
    frontend: str = "none"  # what computes a frames layout's frames from audio (importers.frontend.FRONTENDS)

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


# ---------------------------------------------------------------- what an unknown layout looks like

# Where a model that no layout maps goes instead (export.module_export).
OWN_ARCHITECTURE = ("export the module itself through your own encode/decode functions: `tfm-export MODEL.pt "
                    "--trust-pickle --adapter package.module:object` (a module saved whole with torch.save(model, "
                    "path)) or tfm_export.export.module_export.export_module (docs/exporting.md, 'Your own "
                    "architecture')")
# A path segment that names query/key/value weights in the layouts people write.
QKV_SEGMENT = re.compile(r"^(q|k|v|wq|wk|wv|w_q|w_k|w_v|qkv|to_q|to_k|to_v|in_proj\w*|[qkv]_proj|[qkv]_lin)$|"
                         r"^(query|key|value|queries|keys|values)", re.I)
ATTENTION_SEGMENT = re.compile(r"attn|attention", re.I)
HEAD_SEGMENT = re.compile(r"^(classifier|cls|classification_head|score|pooler|head|fc)$", re.I)


def recognised(data: Any, state: dict[str, torch.Tensor]) -> str | None:
    """What a state_dict (or the pickled module it came from) that no layout matched looks like, when it
    is something no layout can map; None when nothing is recognised."""
    if isinstance(data, torch.nn.Module):
        hidden = hidden_layers(data)
        if hidden:
            return (f"a pickled {type(data).__name__} that keeps layers in plain Python lists "
                    f"({shorten(hidden, 3)}): state_dict() leaves their weights out, so no layout can rebuild it")
    segments = [k.split(".") for k in state]
    decoder = any(any("decoder" in s.lower() for s in parts) for parts in segments)
    embeddings = [k for k, v in state.items() if v.dim() == 2 and "emb" in k.lower()]
    source_embedding = [k for k in embeddings if not any("decoder" in s.lower() or "tgt" in s.lower()
                                                         for s in k.split("."))]
    if not source_embedding and any(v.dim() >= 3 for v in state.values()):
        return ("a model with a feature front end (convolutions over features, no source token embedding): "
                "no token-id layout maps it")
    if not decoder:
        heads = [k for k, v in state.items() if k.endswith("weight") and v.dim() == 2
                 and any(HEAD_SEGMENT.match(s) for s in k.split(".")[:-1])]
        labels = f" ({heads[-1]}: {state[heads[-1]].shape[0]} outputs)" if heads else ""
        return (f"an encoder-only model{' with a classification head' if heads else ''}{labels}, no decoder "
                f"weights: the layouts map encoder-decoder models")
    attention = [parts for parts in segments if any(ATTENTION_SEGMENT.search(s) for s in parts)]
    if attention and not any(QKV_SEGMENT.match(s) for parts in segments for s in parts):
        return ("a model whose attention blocks have output projections but no query/key/value weights (per-head "
                "projections kept outside the state_dict, e.g. in plain Python lists)")
    return None


def hidden_layers(module: torch.nn.Module) -> list[str]:
    """Attributes (`path.name`) holding nn.Modules in plain lists, tuples or dicts: not registered, so left
    out of state_dict() (and of parameters(), .to() and .eval())."""
    found = []
    for path, sub in module.named_modules():
        for name, value in vars(sub).items():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            if not name.startswith("_") and any(isinstance(i, torch.nn.Module) for i in items):
                found.append(f"{path}.{name}" if path else name)
    return found
