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

A policy carries what the layers need: `offset` for the position embedding, the query and key
positions of its step (`query_pos`, `key_pos`: T5's relative position bias, computed once per step
by the model), and `attend(attention, h, past, new, bias)`: a layer's self-attention output and the
keys/values it keeps (its present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from .attention import KV, slot_masks
from .row_attention import row_attention


class CachePolicy(Protocol):
    offset: Tensor | int  # added to the new tokens' positions: int, () or (batch, 1)
    query_pos: Tensor  # the new tokens' positions: (tgt_len,) or (batch, 1)
    key_pos: Tensor  # the positions the keys sit at: (key_len,)

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV, bias: Tensor | None = None
               ) -> tuple[Tensor, KV]:
        """Self-attention of `h` over the past and the step's keys/values `new` (plus `bias`, broadcast
        to the scores); (output, present)."""
        ...


class _UpdatedCache:
    """Policies whose present is the whole updated cache: attend over `update(past, new)`."""

    allowed: Tensor

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        raise NotImplementedError

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV, bias: Tensor | None = None
               ) -> tuple[Tensor, KV]:
        k, v = self.update(past[0], new[0]), self.update(past[1], new[1])  # (batch, heads, key_len, head_dim)
        return attention(h, k, v, self.allowed, bias), (k, v)


@dataclass(frozen=True)
class AppendCache(_UpdatedCache):
    """The growing cache: the step's keys/values are concatenated after the past."""

    offset: Tensor | int  # past_len
    allowed: Tensor  # (tgt_len, past_len + tgt_len): causal over the past and the new positions
    query_pos: Tensor  # (tgt_len,)
    key_pos: Tensor  # (past_len + tgt_len,)

    @classmethod
    def after(cls, past_len: int, tgt_len: int, device: torch.device) -> "AppendCache":
        query_pos = torch.arange(tgt_len, device=device) + past_len  # (tgt_len,)
        key_pos = torch.arange(tgt_len + past_len, device=device)  # (past_len + tgt_len,)
        return cls(past_len, key_pos[None, :] <= query_pos[:, None], query_pos, key_pos)

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        # dim=-2, not 2: ORT's attention-with-past fusion (--optimize) matches Concat(axis=-2) only.
        return torch.cat([past, new], dim=-2)  # (batch, heads, past_len + tgt_len, head_dim)


@dataclass(frozen=True)
class SlotCache(_UpdatedCache):
    """The static cache of max_len slots: one new token per row, written at that row's `cache_len`."""

    offset: Tensor  # (batch, 1): each row's position is its number of filled slots
    allowed: Tensor  # (batch, 1, 1, max_len): the filled slots and this step's
    write: Tensor  # (batch, 1, max_len, 1): this step's slot
    query_pos: Tensor  # (batch, 1): the offset
    key_pos: Tensor  # (max_len,): slot s holds position s

    @classmethod
    def at(cls, cache_len: Tensor, max_len: int) -> "SlotCache":
        """`cache_len` (batch,) int64: slots already filled per row, each < max_len."""
        allowed, write = slot_masks(cache_len, max_len)
        filled = cache_len[:, None]  # (batch, 1)
        return cls(filled, allowed, write, filled, torch.arange(max_len, device=cache_len.device))

    def update(self, past: Tensor, new: Tensor) -> Tensor:
        # A select rather than a scatter: elementwise, so it exports and runs the same everywhere.
        return torch.where(self.write, new, past)  # (batch, heads, max_len, head_dim)


@dataclass(frozen=True)
class RowCache:
    """SlotCache's step as one fused operator per layer (model.row_attention); see the module docstring."""

    offset: Tensor  # (batch, 1): each row's position is its number of filled slots
    cache_len: Tensor  # (batch,): slots already filled per row, each < slots
    query_pos: Tensor  # (batch, 1): the offset (no model with a position bias is exported with rows)
    key_pos: Tensor  # (0,): unused

    @classmethod
    def at(cls, cache_len: Tensor) -> "RowCache":
        return cls(cache_len[:, None], cache_len, cache_len[:, None], cache_len[:0])

    def attend(self, attention: Any, h: Tensor, past: KV, new: KV, bias: Tensor | None = None
               ) -> tuple[Tensor, KV]:
        if bias is not None:
            raise ValueError("the fused rows step takes no attention bias (T5's relative positions)")
        batch, tgt_len, _ = h.shape
        inner = attention.n_heads * attention.head_dim

        def merge(x: Tensor) -> Tensor:  # (batch, heads, 1, head_dim) -> (batch, 1, inner_dim)
            return x.transpose(1, 2).reshape(batch, tgt_len, inner)

        out, key, value = row_attention(attention.q_proj(h), merge(new[0]), merge(new[1]), past[0], past[1],
                                        self.cache_len, attention.n_heads, attention.scale)
        return attention.out_proj(out), (key, value)  # out: (batch, 1, d_model)
