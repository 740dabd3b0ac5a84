"""How the decoder's self-attention cache takes a step: the policy object every DecoderLayer is given.

One layer wiring (transformer.DecoderLayer) runs under two policies:

- `AppendCache`: the past (batch, heads, past_len, head_dim) grows by the step's keys/values
  (decoder.onnx, eager decoding). Positions start at past_len; attention is causal.
- `SlotCache`: a pre-allocated (batch, heads, max_len, head_dim) cache in which row b writes slot
  `cache_len[b]` and sees slots <= `cache_len[b]` (decoder_static.onnx). No shape depends on the
  step, so a CUDA graph of it replays; rows may be at different steps (in-flight batching).

A policy carries what the layers need: `offset` for the position embedding, `allowed` for the
self-attention mask, and `update(past, new)` for each layer's keys and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


class CachePolicy(Protocol):
    offset: Tensor | int  # added to the new tokens' positions: int, () or (batch, 1)
    allowed: Tensor  # self-attention mask, broadcast to (batch, heads, tgt_len, key_len)

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        """A layer's cache after this step, from its past and the step's keys or values."""
        ...


@dataclass(frozen=True)
class AppendCache:
    """The growing cache: the step's keys/values are concatenated after the past."""

    offset: Tensor | int  # past_len
    allowed: Tensor  # (tgt_len, past_len + tgt_len): causal over the past and the new positions

    @classmethod
    def after(cls, past_len: int, tgt_len: int, device: torch.device) -> "AppendCache":
        query_pos = torch.arange(tgt_len, device=device) + past_len  # (tgt_len,)
        key_pos = torch.arange(tgt_len + past_len, device=device)  # (past_len + tgt_len,)
        return cls(past_len, key_pos[None, :] <= query_pos[:, None])

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        # dim=-2, not 2: ORT's attention-with-past fusion (--optimize) matches Concat(axis=-2) only.
        return torch.cat([past, new], dim=-2)  # (batch, heads, past_len + tgt_len, head_dim)


@dataclass(frozen=True)
class SlotCache:
    """The static cache of max_len slots: one new token per row, written at that row's `cache_len`."""

    offset: Tensor  # (batch, 1): each row's position is its number of filled slots
    allowed: Tensor  # (batch, 1, 1, max_len): the filled slots and this step's
    write: Tensor  # (batch, 1, max_len, 1): this step's slot

    @classmethod
    def at(cls, cache_len: Tensor, max_len: int) -> "SlotCache":
        """`cache_len` (batch,) int64: slots already filled per row, each < max_len."""
        slots = torch.arange(max_len, device=cache_len.device)  # (max_len,)
        filled = cache_len[:, None]  # (batch, 1)
        return cls(filled, (slots <= filled)[:, None, None, :], (slots == filled)[:, None, :, None])

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        # A select rather than a scatter: elementwise, so it exports and runs the same everywhere.
        return torch.where(self.write, new, past)  # (batch, heads, max_len, head_dim)
