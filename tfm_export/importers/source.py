"""What an importer reads: a path, and for a file what it holds, read once whichever importer asks.

Safe loading first; full unpickling only when the file is a real code pickle and the user trusts it.
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import CheckpointError, first_line, shorten
from ..model.checkpoint import RESAVE_HINT, CodePickleError, read_file

log = logging.getLogger(__name__)

# Training scripts save {"epoch": ..., "model_state_dict": ..., "optimizer_state_dict": ...}.
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
# Added to every key by nn.DataParallel / DistributedDataParallel and by torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
# Exceptions that unpickling a damaged (but trusted) file raises.
UNPICKLING_ERRORS = (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, TypeError,
                     zipfile.BadZipFile)


@dataclass(frozen=True)
class Source:
    """A checkpoint file or a model folder. `data` and `state` are read on first use, then kept."""

    path: Path
    trust_pickle: bool = False  # allow unpickling whole modules (runs code from the file)

    @cached_property
    def data(self) -> Any:
        """Whatever the file holds (an error for a folder, a missing or a damaged file)."""
        return read_trusted(self.path, self.trust_pickle)

    @cached_property
    def unwrapped(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """(the state_dict, how it was wrapped: {"wrapper": ..., "prefix": ...})."""
        return unwrap(self.data, self.path)

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return self.unwrapped[0]


def read_trusted(path: Path, trust_pickle: bool) -> Any:
    """`read_file`, then, for a code pickle and on the user's explicit request, full unpickling."""
    try:
        return read_file(path)
    except CodePickleError:
        if not trust_pickle:
            raise
    log.warning("--trust-pickle: unpickling %s runs code from the file", path)
    # The one place that unpickles arbitrary objects, on the user's explicit request
    # (--trust-pickle): weights_only loading cannot rebuild a whole module object.
    unsafe_load: Callable[..., Any] = getattr(torch, "load")
    try:
        return unsafe_load(path, map_location="cpu", weights_only=False)
    except (AttributeError, ImportError) as exc:
        raise CheckpointError(f"{path} needs the code that defined its classes ({exc}); run from that "
                              f"project, or {RESAVE_HINT}") from None
    except UNPICKLING_ERRORS as exc:
        raise CheckpointError(f"{path} is truncated or corrupt ({first_line(exc, 200)}); "
                              f"re-save or re-download it") from None


def unwrap(data: Any, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a module, a state_dict, or a training checkpoint that wraps one; prefixes
    added by DataParallel (`module.`) or torch.compile (`_orig_mod.`) are removed."""
    found: dict[str, str] = {}
    if isinstance(data, torch.nn.Module):
        data, found["wrapper"] = data.state_dict(), "pickled module"
    wrapper = next((k for k in WRAPPER_KEYS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if wrapper is not None:
        data, found["wrapper"] = data[wrapper], f"[{wrapper!r}]"
    if not (isinstance(data, dict) and data and all(isinstance(v, torch.Tensor) for v in data.values())):
        raise CheckpointError(f"{path} holds {_describe(data)}, not a model or state_dict; {RESAVE_HINT}")
    state = dict(data)
    while prefix := next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in state)), None):
        state = {k[len(prefix):]: v for k, v in state.items()}
        found["prefix"] = found.get("prefix", "") + prefix
    return state, found


def _describe(data: Any) -> str:
    """`a list`, `an empty dict`, `a dict with non-tensor values (epoch, loss)`."""
    if isinstance(data, dict):
        others = [str(k) for k, v in data.items() if not isinstance(v, torch.Tensor)]
        return f"a dict with non-tensor values ({shorten(others, 3)})" if data else "an empty dict"
    name = type(data).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"
