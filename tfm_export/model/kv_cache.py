"""How the decoder's self-attention cache takes a step: the policy object every DecoderLayer is given.

One layer wiring (transformer.DecoderLayer) runs under three policies:

- `AppendCache`: the past (batch, heads, past_len, head_dim) grows by the step's keys/values
  (decoder.onnx, eager decoding). Positions start at past_len; attention is causal.
- `SlotCache`: a pre-allocated (batch, heads, max_len, head_dim) cache in which row b writes slot
  `cache_len[b]` and sees slots <= `cache_len[b]` (decoder_static.onnx). No shape depends on the
  step, so a CUDA graph of it replays; rows may be at different steps (in-flight batching).
- `RowCache`: the same pre-allocated cache, through one fused operator per layer
  (model.row_attention, exported as ONNX Runtime's GroupQueryAttention): row b attends over the
  slots <= `cache_len[b]` after writing its step's key/value at `cache_len[b]`, and the runtime
  binds the present cache to the past cache's memory, so the write is in place (decoder_rows.onnx,
  in-flight batching on CPU). A SlotCache step copies the whole cache into its output (a third of
  a step on CPU); this one does not.

A policy carries what the layers need: `offset` for the position embedding, and
`attend(attention, h, past, new)`: a layer's self-attention output and the keys/values it keeps
(its present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from .row_attention import row_attention

KV = tuple[Tensor, Tensor]  # (key, value), each (batch, heads, len, head_dim)


class CachePolicy(Protocol):
    offset: Tensor | int  # added to the new tokens' positions: int, () or (batch, 1)

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV) -> tuple[Tensor, KV]:
        """Self-attention of `h` over the past and the step's keys/values `new`; (output, present)."""
        ...


class _UpdatedCache:
    """Policies whose present is the whole updated cache: attend over `update(past, new)`."""

    allowed: Tensor

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        raise NotImplementedError

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV) -> tuple[Tensor, KV]:
        k, v = self.update(past[0], new[0]), self.update(past[1], new[1])  # (batch, heads, key_len, head_dim)
        return attention(h, k, v, self.allowed), (k, v)


@dataclass(frozen=True)
class AppendCache(_UpdatedCache):
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
class SlotCache(_UpdatedCache):
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


@dataclass(frozen=True)
class RowCache:
    """SlotCache's step as one fused operator per layer (model.row_attention); see the module docstring."""

    offset: Tensor  # (batch, 1): each row's position is its number of filled slots
    cache_len: Tensor  # (batch,): slots already filled per row, each < slots

    @classmethod
    def at(cls, cache_len: Tensor) -> "RowCache":
        return cls(cache_len[:, None], cache_len)

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV) -> tuple[Tensor, KV]:
        batch, tgt_len, d_model = h.shape

        def merge(x: Tensor) -> Tensor:  # (batch, heads, 1, head_dim) -> (batch, 1, d_model)
            return x.transpose(1, 2).reshape(batch, tgt_len, d_model)

        out, key, value = row_attention(attention.q_proj(h), merge(new[0]), merge(new[1]), past[0], past[1],
                                        self.cache_len, attention.n_heads, attention.scale)
        return attention.out_proj(out), (key, value)  # out: (batch, 1, d_model)
