"""The model's building blocks besides attention: position tables, embeddings, norms, feed-forward.

Each family's difference is a field of the one TransformerConfig (config.py), read here once.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from ..config import TransformerConfig


# The GELUs are written out in the forms ONNX Runtime's graph optimizer fuses into one node (Gelu,
# FastGelu) when a session opens: nn.GELU exports as x * (0.5 * (1 + erf(...))), which it leaves as
# five elementwise passes over (batch, tgt_len, d_ff). gelu_tanh is transformers' NewGELUActivation
# (gelu_new, T5 v1.1's) term for term. (SiLU's Sigmoid * x fuses as it is.)
def gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Activation(nn.Module):
    """A parameter-free activation given as a function."""

    def __init__(self, fn: Callable[[Tensor], Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "gelu": lambda: Activation(gelu), "gelu_tanh": lambda: Activation(gelu_tanh), "silu": nn.SiLU}


def sinusoidal_table(max_len: int, d_model: int, layout: str = "sinusoidal") -> Tensor:
    """A fixed position table (max_len, d_model); `layout` is one of config.POSITIONS' sinusoidal ones."""
    if layout == "sinusoidal_fairseq":
        return fairseq_table(max_len, d_model)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = pos * inv  # (max_len, d_model / 2)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    if layout == "sinusoidal_concat":
        half = (d_model + 1) // 2
        table[:, :half] = torch.sin(angles)
        table[:, half:] = torch.cos(angles[:, : d_model // 2])
    else:
        table[:, 0::2] = torch.sin(angles)
        table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


def fairseq_table(max_len: int, d_model: int) -> Tensor:
    """fairseq's table (M2M100, NLLB): sines then cosines, frequencies spaced by half_dim - 1, computed in
    float32 as fairseq and transformers do (so that the same rounding gives the same values)."""
    half = d_model // 2
    step = math.log(10000.0) / (half - 1)
    angles = torch.arange(max_len).float()[:, None] * torch.exp(torch.arange(half).float() * -step)[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (max_len, 2 * half)
    return torch.cat([table, torch.zeros(max_len, d_model - 2 * half)], dim=1)


def position_table(kind: str, rows: int, d_model: int) -> tuple[nn.Embedding | None, Tensor | None]:
    """A learned table (an Embedding of `rows`) or a fixed one (a buffer) of the kind, or neither ("none")."""
    learned = nn.Embedding(rows, d_model) if kind == "learned" else None
    fixed = sinusoidal_table(rows, d_model, kind) if kind not in ("learned", "none") else None
    return learned, fixed


def make_norm(config: TransformerConfig) -> nn.Module:
    return RMSNorm(config.d_model, config.layer_norm_eps) if config.norm == "rms" else nn.LayerNorm(
        config.d_model, config.layer_norm_eps)


class RMSNorm(nn.Module):
    """T5's layer norm: x / sqrt(mean(x^2) + eps) * weight; no mean subtraction, no bias.

    Divided by the root rather than multiplied by torch.rsqrt (T5LayerNorm's way, within a rounding):
    that is the form ONNX Runtime fuses into one SimplifiedLayerNormalization node (the rsqrt form
    stays seven nodes, 7 % of a flan-t5-base decoder step at 64 rows)."""

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d_model)), eps

    def forward(self, x: Tensor) -> Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)  # (..., 1), float32 as T5's
        return self.weight * (x.float() / torch.sqrt(variance + self.eps)).to(x.dtype)


class Embeddings(nn.Module):
    """Token embedding (optionally scaled by sqrt(d_model)) plus positions, optionally normed."""

    def __init__(self, config: TransformerConfig, vocab_size: int, tokens: nn.Embedding | None = None,
                 positions: str | None = None):
        """`positions`: the kind of position table (config.POSITIONS; None: config.positions)."""
        super().__init__()
        self.tokens = tokens if tokens is not None else nn.Embedding(vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        self.offset = config.position_offset  # table rows before position 0
        self.positions, table = position_table(positions or config.positions, config.max_len + config.position_offset,
                                               config.d_model)
        self.register_buffer("table", table, persistent=False)
        self.norm = make_norm(config) if config.embed_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)

    def position_table(self) -> Tensor | None:
        """The (position_offset + max_len, d_model) table added to the token embeddings (None: no positions)."""
        return self.positions.weight if self.positions is not None else self.table

    def forward(self, ids: Tensor, offset: Tensor | int = 0) -> Tensor:
        """`offset`: the first position, one for all rows (int) or per row (batch, 1)."""
        x = self.tokens(ids) * self.scale  # (batch, len, d_model)
        table = self.position_table()
        if table is not None:
            positions = torch.arange(ids.shape[1], device=ids.device) + offset + self.offset  # (len,) or (batch, len)
            # F.embedding exports as a plain Gather (indexing would give GatherND).
            x = x + nn.functional.embedding(positions, table)
        return self.dropout(self.norm(x))


class FeedForward(nn.Module):
    """fc2(act(fc1(x))), or with a gate (T5 v1.1) fc2(act(fc1(x)) * gate(x))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        d, ff, bias = config.d_model, config.d_ff, config.ffn_bias
        self.fc1, self.fc2 = nn.Linear(d, ff, bias=bias), nn.Linear(ff, d, bias=bias)
        self.gate = nn.Linear(d, ff, bias=bias) if config.ffn_gated else None
        self.act = ACTIVATION_MODULES[config.activation]()
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.act(self.fc1(x))  # (..., d_ff)
        if self.gate is not None:
            hidden = hidden * self.gate(x)
        return self.fc2(self.dropout(hidden))
