"""Shared machinery of the importers: option look-up and a key map that tracks consumption."""

from __future__ import annotations

import re
from typing import Any

import torch

from ..errors import CheckpointError, ConfigError, problem_list

# The CLI spelling of each option, for error messages.
CLI_NAMES = {"heads": "--heads N", "src_pad_id": "--src-pad-id N", "tgt_pad_id": "--tgt-pad-id N",
             "bos_id": "--bos-id N", "eos_id": "--eos-id N", "norm_first": "--norm-first/--norm-after",
             "activation": "--activation NAME", "max_len": "--max-len N"}


def require(options: dict[str, Any], name: str, what: str) -> Any:
    """An option the weights cannot tell; a ConfigError names the CLI flag when it is missing."""
    value = options.get(name)
    if value is None:
        raise ConfigError(f"{what} cannot be read from the weights; pass {CLI_NAMES[name]}")
    return value


def count_layers(state: dict[str, torch.Tensor], prefix: str) -> int:
    """How many `prefix{i}.` blocks the state dict has (0 when none)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for key in state if (m := pattern.match(key))}
    return max(found) + 1 if found else 0


class KeyMap:
    """Copies source tensors to target names, remembering what was consumed."""

    def __init__(self, source: dict[str, torch.Tensor], layout: str):
        self.source, self.layout = source, layout
        self.target: dict[str, torch.Tensor] = {}
        self.consumed: set[str] = set()
        self.missing: list[str] = []

    def get(self, key: str) -> torch.Tensor | None:
        """A source tensor (consumed), or None with the key recorded as missing."""
        if key not in self.source:
            self.missing.append(key)
            return None
        self.consumed.add(key)
        return self.source[key]

    def copy(self, target: str, key: str) -> None:
        tensor = self.get(key)
        if tensor is not None:
            self.target[target] = tensor.detach().clone()

    def linear(self, target: str, key: str) -> None:
        """A Linear's weight and bias."""
        self.copy(f"{target}.weight", f"{key}.weight")
        self.copy(f"{target}.bias", f"{key}.bias")

    def split_in_proj(self, target: str, key: str) -> None:
        """nn.MultiheadAttention's fused in_proj (3*d_model, d_model) -> q/k/v projections."""
        weight, bias = self.get(f"{key}.in_proj_weight"), self.get(f"{key}.in_proj_bias")
        if weight is None or bias is None:
            return
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), weight.chunk(3), bias.chunk(3)):
            self.target[f"{target}.{name}.weight"] = w.clone()
            self.target[f"{target}.{name}.bias"] = b.clone()
        self.linear(f"{target}.out_proj", f"{key}.out_proj")

    def finish(self, ignored: set[str] = frozenset()) -> dict[str, torch.Tensor]:
        """The target state dict; every source key must have been consumed (or ignored on purpose)."""
        leftover = sorted(set(self.source) - self.consumed - set(ignored))
        problems = problem_list(("missing source keys", self.missing, 5), ("keys left over", leftover, 5))
        if problems:
            raise CheckpointError(f"cannot convert this {self.layout} checkpoint: {problems}; "
                                  f"check --layout or the model definition")
        return self.target
