"""Self-attention of one new token per row over a pre-allocated cache, as one operator.

`row_attention` is a torch custom op so that the exporter can write it as ONNX Runtime's fused
`com.microsoft.GroupQueryAttention` (export.contrib): that kernel writes each row's new key/value
into slot `cache_len[b]` of the cache *in place* when the runtime binds the present cache to the
past cache's memory (runtime.states.host_rows.HostRows), and attends only over the slots each row has filled.
Written as plain ONNX ops, the same step either copies the whole cache every step (decoder_static:
a third of a step on CPU) or runs about ten small ops per layer (transformer-base, batch 16: a
fifth of the step, against under a tenth fused).

The eager implementation is the SlotCache step itself (attention.slot_masks' write and mask, then
attention.scaled_attention), so a rows graph and a static graph of one model agree in eager PyTorch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import scaled_attention, scaled_queries, slot_masks


@torch.library.custom_op("tfm_export::row_attention", mutates_args=())
def row_attention(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor, cache_len: Tensor,
                  heads: int, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v (batch, 1, inner_dim): the step's projections; past_k/past_v (batch, heads, slots, head_dim);
    cache_len (batch,) int64, each < slots. Returns (output (batch, 1, inner_dim), present_k, present_v):
    the caches with slot cache_len[b] written (slots after it are unspecified: the fused kernel
    leaves them as they were when in place, and does not copy them otherwise)."""
    batch, tgt_len, inner = q.shape

    def split(x: Tensor) -> Tensor:
        return x.view(batch, tgt_len, heads, inner // heads).transpose(1, 2)  # (batch, heads, 1, head_dim)

    allowed, write = slot_masks(cache_len, past_k.shape[2])
    # (batch, heads, slots, head_dim): kv_cache.SlotCache's select
    present_k, present_v = torch.where(write, split(k), past_k), torch.where(write, split(v), past_v)
    q = split(scaled_queries(q, scale))  # (batch, heads, 1, head_dim)
    out = scaled_attention(q, present_k, present_v, allowed)  # (batch, heads, 1, head_dim)
    return out.transpose(1, 2).reshape(batch, tgt_len, inner), present_k, present_v


@row_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor, cache_len: Tensor, heads: int,
      scale: float) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(past_k), torch.empty_like(past_v)
