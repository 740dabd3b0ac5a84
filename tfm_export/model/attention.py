"""Attention: the one scaled dot-product core, multi-head attention, and T5's relative position bias.

Shapes use the ONNX axis names: batch, src_batch, src_len, tgt_len, past_len; `key_len` is whatever the keys
span (src_len, past_len + tgt_len, or a static cache's slots). Plain tensor ops only, with no
data-dependent Python branches on shapes, so torch.export traces one graph for every size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..config import TransformerConfig

KV = tuple[Tensor, Tensor]  # (key, value), each (batch, heads, len, head_dim)


def scaled_queries(q: Tensor, scale: float) -> Tensor:
    """The query projections (batch, tgt_len, inner_dim) times the attention scale, before their heads are
    split, as transformers' attention scales them. Not the scores: ORT fuses a scalar Mul on q @ k^T (or on
    its split-heads input) into its MatMul (alpha), and that kernel runs a one-token decoder step's
    q @ k^T about 4x slower than alpha 1 (onnxruntime 1.30-1.31 CPU: 0.55 vs 0.13 ms for Whisper tiny's
    1500 cross keys). Whisper's head_dim 64 (scale 1/8) gives the very scores of scaling them."""
    return q if scale == 1.0 else q * scale


def scaled_attention(q: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None,
                     dropout: nn.Module | None = None, bias: Tensor | None = None) -> Tensor:
    """q (batch, heads, tgt_len, head_dim), already scaled (`scaled_queries`), over key/value (batch,
    heads, key_len, head_dim) where `allowed` (broadcast to the scores; None: every key) is True; `bias`
    (broadcast to the scores) is added first (T5's relative positions). Returns (batch, heads, tgt_len, head_dim)."""
    scores = torch.matmul(q, key.transpose(-1, -2))  # (batch, heads, tgt_len, key_len)
    if bias is not None:
        scores = scores + bias
    # Added, not masked_fill: ORT's attention fusion (--optimize) matches `scores + bias`. A finite
    # floor rather than -inf: a fully masked row gives uniform weights, not NaN; floor + score
    # rounds back to the floor, so the weights equal masked_fill's.
    if allowed is not None:
        scores = scores + torch.where(allowed, 0.0, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(dropout(weights) if dropout is not None else weights, value)


def slot_masks(cache_len: Tensor, slots: int) -> tuple[Tensor, Tensor]:
    """A static cache's step: row b writes slot cache_len[b] (batch,) and sees the slots up to it.
    Returns `allowed` (batch, 1, 1, slots) and `write` (batch, 1, slots, 1)."""
    positions = torch.arange(slots, device=cache_len.device)  # (slots,)
    filled = cache_len[:, None]  # (batch, 1)
    return (positions <= filled)[:, None, None, :], (positions == filled)[:, None, :, None]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over several heads; keys/values can be precomputed."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        d, inner, bias = config.d_model, config.inner_dim, config.attention_bias
        self.n_heads, self.head_dim, self.scale = config.n_heads, config.head_dim, config.attn_scale
        self.q_proj = nn.Linear(d, inner, bias=bias)
        self.k_proj = nn.Linear(d, inner, bias=bias and config.key_bias)  # Whisper's has none
        self.v_proj, self.out_proj = nn.Linear(d, inner, bias=bias), nn.Linear(inner, d, bias=bias)
        self.dropout = nn.Dropout(config.dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (batch, heads, len, head_dim)

    def project_kv(self, x: Tensor) -> KV:
        """Keys and values of `x` (batch, len, d_model), each (batch, heads, len, head_dim)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, x: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None,
                bias: Tensor | None = None) -> Tensor:
        """Attend from `x` (batch, tgt_len, d_model) to key/value; `allowed` and `bias` broadcast to the scores."""
        q = self.split_heads(scaled_queries(self.q_proj(x), self.scale))  # (batch, heads, tgt_len, head_dim)
        out = scaled_attention(q, key, value, allowed, self.dropout, bias)  # (batch, heads, tgt_len, head_dim)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (batch, tgt_len, inner_dim)
        return self.out_proj(out)


def bucket_table(buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each distance 0..max_distance (int64): exact buckets below buckets // 2, then
    log-spaced ones; max_distance and beyond share the last.

    Computed once here with transformers' float32 expression, and gathered from in the graphs: the
    expression lands exactly on whole numbers (distance 16, 32, 64 with 32 buckets over 128), so
    another runtime's float32 log, one unit in the last place lower, would move those distances to
    the previous bucket."""
    exact = buckets // 2
    distance = torch.arange(max_distance + 1)  # (max_distance + 1,)
    far = exact + (torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                   * (buckets - exact)).to(torch.long)
    return torch.where(distance < exact, distance, torch.clamp(far, max=buckets - 1))


class RelativePositionBias(nn.Module):
    """T5's learned attention bias by relative distance: one scalar per (bucket, head), held by the
    first layer of a stack and added to every layer's self-attention scores. A bidirectional bias
    (the encoder's) gives keys after the query the upper half of the buckets; a causal one (the
    decoder's) gives them bucket 0 (they are masked anyway)."""

    def __init__(self, config: TransformerConfig, bidirectional: bool):
        super().__init__()
        self.bidirectional, self.max_distance = bidirectional, config.relative_max_distance
        half = config.relative_buckets // 2 if bidirectional else config.relative_buckets
        self.offset = half if bidirectional else 0  # the first bucket of keys after the query
        self.register_buffer("buckets", bucket_table(half, self.max_distance), persistent=False)
        self.table = nn.Embedding(config.relative_buckets, config.n_heads)

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        """query_pos (..., q) and key_pos (k,) int64 -> the bias (..., heads, q, k)."""
        distance = key_pos[None, :] - query_pos[..., None]  # (..., q, k): key - query
        if self.bidirectional:
            later = (distance > 0).to(distance.dtype) * self.offset
            bucket = later + self.buckets[distance.abs().clamp(max=self.max_distance)]
        else:
            bucket = self.buckets[(-distance).clamp(min=0, max=self.max_distance)]
        return self.table(bucket).movedim(-1, -3)  # (..., q, k, heads) -> (..., heads, q, k)
