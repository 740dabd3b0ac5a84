"""Self-attention of one new token per row over a pre-allocated cache, as one operator.

`row_attention` is a torch custom op so that the exporter can write it as ONNX Runtime's fused
`com.microsoft.GroupQueryAttention` (export.contrib): that kernel writes each row's new key/value
into slot `cache_len[b]` of the cache *in place* when the runtime binds the present cache to the
past cache's memory (runtime.rows.HostRows), and attends only over the slots each row has filled.
Written as plain ONNX ops, the same step either copies the whole cache every step (decoder_static:
a third of a step on CPU) or runs about ten small ops per layer (transformer-base, batch 16: a
fifth of the step, against under a tenth fused).

The eager implementation is the SlotCache step itself (kv_cache.SlotCache's write and mask, then
transformer.scaled_attention), so a rows graph and a static graph of one model agree in eager PyTorch.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("tfm_export::row_attention", mutates_args=())
def row_attention(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor, cache_len: Tensor,
                  heads: int, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v (batch, 1, d_model): the step's projections; past_k/past_v (batch, heads, slots, head_dim);
    cache_len (batch,) int64, each < slots. Returns (output (batch, 1, d_model), present_k, present_v):
    the caches with slot cache_len[b] written (slots after it are unspecified: the fused kernel
    leaves them as they were when in place, and does not copy them otherwise)."""
    from .kv_cache import SlotCache  # not at the top: kv_cache imports this module
    from .transformer import scaled_attention

    batch, tgt_len, d_model = q.shape

    def split(x: Tensor) -> Tensor:
        return x.view(batch, tgt_len, heads, d_model // heads).transpose(1, 2)  # (batch, heads, 1, head_dim)

    step = SlotCache.at(cache_len, past_k.shape[2])
    present_k, present_v = step.update(past_k, split(k)), step.update(past_v, split(v))  # (batch, heads, slots, head_dim)
    out = scaled_attention(split(q), present_k, present_v, step.allowed, scale)  # (batch, heads, 1, head_dim)
    return out.transpose(1, 2).reshape(batch, tgt_len, d_model), present_k, present_v


@row_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor, cache_len: Tensor, heads: int,
      scale: float) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(past_k), torch.empty_like(past_v)
