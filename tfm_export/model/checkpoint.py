"""Checkpoint I/O: `{"format": "tfm-export/1", "config": {...}, "state_dict": {...}}` plus extras.

Loading always uses `torch.load(weights_only=True)`: a checkpoint can never run code. Every loaded
checkpoint, whatever its layout, ends with `check_checkpoint`: its weights fit its config
(`check_fits`) and are finite (`check_finite`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from ..config import TransformerConfig
from ..errors import OPTION_FIELD, CheckpointError, OutputError, first_line, problem_list, shorten
from ..files import write_file_atomically
from .transformer import Transformer

log = logging.getLogger(__name__)

FORMAT = "tfm-export/1"
RESAVE_HINT = ("re-save it as plain tensors: torch.save(model.state_dict(), 'model.pt'), "
               "or tfm_export.model.checkpoint.save_checkpoint(model, 'model.pt')")
FIT_HINT = "check the config saved with the weights"
# The weights_only refusals that mean "this pickle names code" (torch 2.6+ wording); any other
# refusal (e.g. "Unsupported operand 209") is a damaged file that happens to start like a pickle.
CODE_REFUSAL = re.compile(r"GLOBAL (\S+) (?:was not an allowed global|whose module)|(\S+) must be imported to load")


class CodePickleError(CheckpointError):
    """A real pickle that references classes or functions: loading it would run code."""


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
        check_fits(self.config, self.state_dict, self.path or "checkpoint", FIT_HINT)
        with _no_random_init():  # every parameter is replaced below: drawing them would touch GBs for nothing
            model = Transformer(self.config)
        # The model takes these tensors as its parameters (assign) instead of copying them, so a model of
        # several GB is held once, not twice (float16 weights, as many Hub folders ship, are widened).
        # Tied parameters are tied again: assign gives each name a Parameter of its own.
        float32 = {k: v.float() if v.is_floating_point() and v.dtype != torch.float32 else v
                   for k, v in self.state_dict.items()}
        model.load_state_dict(float32, strict=True, assign=True)
        model.tie()
        return model.eval()


# torch.nn.init's in-place initialisers, which module constructors call through the module attribute.
INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                "xavier_normal_", "constant_", "ones_", "zeros_")


@contextlib.contextmanager
def _no_random_init() -> Iterator[None]:
    """Modules built meanwhile keep torch.empty's parameters: large ones are pages the kernel has not
    handed out yet, so a model whose weights are assigned right after costs no memory of its own (what
    transformers' `no_init_weights` does for the same reason). Buffers are computed as usual."""
    saved = {name: getattr(torch.nn.init, name) for name in INITIALISERS}
    try:
        for name in INITIALISERS:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


def save_checkpoint(model: Transformer, path: str | os.PathLike, tokenizer: dict | None = None,
                    samples: list[str] | None = None) -> Path:
    """Write `model` (its config and weights) and extras atomically to `path`; an existing `path` is
    replaced only when it is a tfm-export checkpoint (OutputError otherwise, before anything is written)."""
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
    write_file_atomically(path, lambda tmp: _torch_save(payload, tmp, path), ("a tfm-export checkpoint", is_checkpoint))
    return path


def _torch_save(payload: dict[str, Any], tmp: Path, path: Path) -> None:
    try:
        torch.save(payload, tmp)
    except RuntimeError as exc:  # torch's file writer reports write failures (full disk) this way
        raise OutputError(f"cannot write {path}: {first_line(exc, 200)}") from exc


def is_checkpoint(path: str | os.PathLike) -> bool:
    """True when `path` is a checkpoint this package wrote (format tfm-export/1; read weights_only)."""
    try:
        data = read_file(path)
    except CheckpointError:
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def read_file(path: str | os.PathLike) -> Any:
    """`torch.load(weights_only=True)` with each failure turned into a one-line CheckpointError
    (CodePickleError when the file is a real pickle that needs code to load)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}; check the path")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise CheckpointError(f"{path} is empty; re-save the checkpoint")
    if not head.startswith(b"PK") and head[:1] != b"\x80":
        if (path.parent / "config.json").is_file():  # a file of a Hugging Face folder (weights, config)
            raise CheckpointError(f"{path} is a file of the Hugging Face folder {path.parent}; pass the folder")
        raise CheckpointError(f"{path} is not a PyTorch checkpoint (expected a file written by torch.save)")
    try:
        with warnings.catch_warnings():  # random bytes after b"\x80" read as an odd pickle protocol
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        code = CODE_REFUSAL.search(str(exc))
        if code:
            names, where = code.group(1) or code.group(2), path
            raise CodePickleError(
                f"{where} is a pickle that needs code to load (it references {names}: a whole module or custom "
                f"classes), which could run anything; {RESAVE_HINT}, or pass {{trust_pickle}} if you trust "
                f"the file and have its code", options={"trust_pickle": None}) from None
        raise _corrupt(path, exc) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _corrupt(path, exc) from None


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read and check a tfm-export checkpoint. A bare state_dict needs an importer (tfm_export.importers)."""
    return check_checkpoint(checkpoint_from(read_file(path), path), str(path), FIT_HINT)


def checkpoint_from(data: Any, path: str | os.PathLike) -> Checkpoint:
    """The Checkpoint that `data`, a loaded tfm-export file, holds (not yet checked)."""
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
        raise CheckpointError(f"{path} has an invalid config: {first_line(exc, 200)}") from None
    state = data.get("state_dict")
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise CheckpointError(f"{path} has no state_dict of tensors; re-save the checkpoint")
    return Checkpoint(config=config, state_dict=state, tokenizer=data.get("tokenizer"),
                      samples=data.get("samples"), path=str(path))


def check_checkpoint(checkpoint: Checkpoint, what: str, hint: str) -> Checkpoint:
    """The final check of every loaded checkpoint, before anything is built or exported."""
    check_fits(checkpoint.config, checkpoint.state_dict, what, hint)
    check_finite(checkpoint.state_dict, checkpoint.path or what)
    return checkpoint


def check_fits(config: TransformerConfig, state: Mapping[str, torch.Tensor], what: str = "checkpoint",
               hint: str = FIT_HINT) -> None:
    """Every weight of the model `config` describes is in `state` with its shape, and nothing else is."""
    with torch.device("meta"):  # names and shapes without allocating anything
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    problems = key_problems(expected, state)
    if problems:
        raise CheckpointError(f"{what} does not fit the model config: {problems}; {hint}",
                              options=dict.fromkeys(OPTION_FIELD.findall(hint)))


def key_problems(expected: Mapping[str, tuple[int, ...] | None], found: Mapping[str, Any],
                 labels: tuple[str, str] = ("missing keys", "unexpected keys")) -> str:
    """`missing keys: ...; unexpected keys: ...; mis-shaped: ...`, or '' when `found` has exactly
    the `expected` names (and shapes, where one is given)."""
    misshaped = [f"{k} {tuple(found[k].shape)} != {shape}" for k, shape in expected.items()
                 if shape is not None and k in found and tuple(found[k].shape) != shape]
    return problem_list((labels[0], sorted(set(expected) - set(found)), 5),
                        (labels[1], sorted(set(found) - set(expected)), 5), ("mis-shaped", misshaped, 3))


def check_finite(state: Mapping[str, torch.Tensor], source: str) -> None:
    """NaN or infinite weights turn every output into NaN; name them before anything is exported."""
    bad = []
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            nan = int(torch.isnan(tensor).sum())
            inf = int(torch.isinf(tensor).sum())
            bad.append(f"{name} ({', '.join(f'{n} {label}' for n, label in ((nan, 'NaN'), (inf, 'inf')) if n)})")
    if bad:
        raise CheckpointError(f"{source} has non-finite weights: {shorten(bad, 3)}; fix or retrain the model")


def _corrupt(path: Path, exc: BaseException) -> CheckpointError:
    # weights_only refusals bury the reason after "WeightsUnpickler error:".
    reason = str(exc).partition("WeightsUnpickler error:")[2].strip().splitlines()
    return CheckpointError(f"{path} is truncated or corrupt ({reason[0][:200] if reason else first_line(exc, 200)}); "
                           f"re-save or re-download it")
