"""Shared machinery of the importers: option look-up, position tables, and a key map that
tracks which source weights were used so that none is silently dropped or left unset."""

from __future__ import annotations

import re
from typing import Any

import torch

from ..config import POSITIONS
from ..errors import CheckpointError, ConfigError
from ..model.checkpoint import key_problems
from ..model.layers import sinusoidal_table

def option(options: dict[str, Any], name: str, default: Any) -> Any:
    """An optional option; None counts as not given (the CLI passes None for absent flags)."""
    value = options.get(name)
    return default if value is None else value


def require(options: dict[str, Any], name: str, what: str) -> Any:
    """An option the weights cannot tell; a ConfigError names the option when it is missing."""
    value = options.get(name)
    if value is None:
        raise ConfigError(f"{what} cannot be read from the weights; pass {{{name}}}", options={name: None})
    return value


# Import options that describe the model -> the TransformerConfig field each one sets.
CONFIG_FIELDS = {"heads": "n_heads", "src_pad_id": "src_pad_id", "tgt_pad_id": "tgt_pad_id", "bos_id": "bos_id",
                 "eos_id": "eos_id", "norm_first": "norm_first", "activation": "activation", "max_len": "max_len"}


def check_agrees(options: dict[str, Any], config: Any, what: str) -> None:
    """Refuse options that would describe a model whose config is already known (a tfm-export checkpoint
    carries its own): ignored, they would silently export something else than the user asked for."""
    for name, field_name in CONFIG_FIELDS.items():
        given, ours = options.get(name), getattr(config, field_name)
        if given is not None and given != ours:
            raise ConfigError(f"{{{name}}} does not apply: this {what}'s config sets {ours!r}", options={name: given})


def check_fixed(options: dict[str, Any], fixed: dict[str, Any], layout: str) -> None:
    """Refuse options that contradict what a layout's code fixes (e.g. --norm-first for a post-LN model)."""
    for name, value in fixed.items():
        given = options.get(name)
        if given is not None and given != value:
            raise ConfigError(f"{{{name}}} does not apply: the {layout} layout's code fixes {name}={value!r}",
                              options={name: given})


def max_len_for_table(options: dict[str, Any], rows: int, what: str) -> int:
    """The table's length, or a shorter --max-len (a smaller exported table); longer is an error."""
    max_len = option(options, "max_len", rows)
    if not 0 < max_len <= rows:
        raise ConfigError(f"{{max_len}} does not fit {what} of {rows} positions; pass 1..{rows}",
                          options={"max_len": max_len})
    return int(max_len)


def table_layout(table: torch.Tensor) -> str | None:
    """Which of our sinusoidal layouts a (max_len, d_model) table is, or None (then it is learned).

    Tables built in float32 carry angle rounding that grows with the position (about 4e-4 at
    position 5000), so the tolerance grows with it too; a different formula is off by O(1).
    """
    rows, width = table.shape
    tolerance = 1e-5 + 2.5e-7 * torch.arange(rows, dtype=torch.float32)[:, None]  # (rows, 1)
    for layout in (p for p in POSITIONS if p != "learned"):
        if bool(((table.float() - sinusoidal_table(rows, width, layout)).abs() <= tolerance).all()):
            return layout
    return None


def count_layers(state: dict[str, torch.Tensor], prefix: str) -> int:
    """How many `prefix{i}.` blocks the state dict has (0 when none)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for key in state if (m := pattern.match(key))}
    return max(found) + 1 if found else 0


class KeyMap:
    """Copies source tensors to target names, remembering which source names were asked for.

    `zero_bias`: a missing `.bias` becomes zeros, which is exact for models built with
    `bias=False` (nn.Transformer's option); otherwise a missing bias is a missing key.
    """

    def __init__(self, source: dict[str, torch.Tensor], layout: str, zero_bias: bool = False):
        self.source, self.layout, self.zero_bias = source, layout, zero_bias
        self.target: dict[str, torch.Tensor] = {}
        self.requested: dict[str, None] = {}  # source names asked for, in order (a dict as an ordered set)

    def get(self, key: str) -> torch.Tensor | None:
        """A source tensor, or None when the source lacks it (`finish` then reports it)."""
        self.requested[key] = None
        return self.source.get(key)

    def copy(self, target: str, key: str) -> None:
        """The source tensor itself under the target name: no copy, so a model of several GB is held once
        (tied embeddings share one tensor); `Checkpoint.build_model` never writes into it."""
        tensor = self.get(key)
        if tensor is not None:
            self.target[target] = tensor.detach()

    def linear(self, target: str, key: str) -> None:
        """A Linear's (or LayerNorm's) weight and bias."""
        self.copy(f"{target}.weight", f"{key}.weight")
        weight = self.target.get(f"{target}.weight")
        if self.zero_bias and f"{key}.bias" not in self.source and weight is not None:
            self.target[f"{target}.bias"] = weight.new_zeros(weight.shape[0])  # (out_features,)
            return
        self.copy(f"{target}.bias", f"{key}.bias")

    def pointwise_conv(self, target: str, key: str) -> None:
        """A Conv1d of kernel 1 (out, in, 1) as the Linear (out, in) it computes: the same weights, one per
        position; a wider kernel mixes positions, which no Linear does (one CheckpointError)."""
        self.linear(target, key)
        weight = self.target.get(f"{target}.weight")
        if weight is None:
            return
        if weight.dim() != 3 or weight.shape[2] != 1:
            raise CheckpointError(f"cannot convert this {self.layout} checkpoint: {key}.weight {tuple(weight.shape)} "
                                  f"is not a Conv1d of kernel size 1 (out, in, 1); only position-wise ones map "
                                  f"onto our feed-forward")
        self.target[f"{target}.weight"] = weight[:, :, 0].contiguous()  # (out, in)

    def split_in_proj(self, target: str, key: str) -> None:
        """nn.MultiheadAttention's fused in_proj (3*d_model, d_model) -> q/k/v projections."""
        weight = self.get(f"{key}.in_proj_weight")
        if self.zero_bias and f"{key}.in_proj_bias" not in self.source and weight is not None:
            bias = weight.new_zeros(weight.shape[0])  # (3 * d_model,)
        else:
            bias = self.get(f"{key}.in_proj_bias")
        if weight is None or bias is None:
            return
        # Rows are stacked q, k, v: each chunk is (d_model, d_model).
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), weight.chunk(3), bias.chunk(3)):
            self.target[f"{target}.{name}.weight"] = w.detach().clone()
            self.target[f"{target}.{name}.bias"] = b.detach().clone()
        self.linear(f"{target}.out_proj", f"{key}.out_proj")

    def finish(self, ignored: set[str] = frozenset()) -> dict[str, torch.Tensor]:
        """The target state dict; every source name asked for must exist, and every source weight
        must have been asked for (or be `ignored` on purpose)."""
        used = {k: v for k, v in self.source.items() if k in self.requested or k not in ignored}
        problems = key_problems(self.requested, used, labels=("missing source keys", "keys left over"))
        if problems:
            raise CheckpointError(f"cannot convert this {self.layout} checkpoint: {problems}; "
                                  f"check {{layout}} or the model definition", options={"layout": None})
        return self.target
