"""The encoder-decoder Transformer in PyTorch, with a KV cache.

One set of weights runs two ways: teacher-forced over a whole target (an empty past) and
incrementally (a growing self-attention past, or a pre-allocated one: see model.kv_cache).
Cross-attention keys/values are computed once per source. Everything is plain tensor ops with no data-dependent Python branches on shapes,
so torch.export traces one graph for every batch size and length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from .kv_cache import KV, AppendCache, CachePolicy

ACTIVATION_MODULES: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def sinusoidal_table(max_len: int, d_model: int, layout: str = "sinusoidal") -> Tensor:
    """The paper's position table (max_len, d_model); `layout` picks interleaved or concat."""
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


class Embeddings(nn.Module):
    """Token embedding (optionally scaled by sqrt(d_model)) plus positions."""

    def __init__(self, config: TransformerConfig, vocab_size: int, tokens: nn.Embedding | None = None):
        super().__init__()
        self.tokens = tokens if tokens is not None else nn.Embedding(vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        if config.positions == "learned":
            self.positions = nn.Embedding(config.max_len, config.d_model)
        else:
            table = sinusoidal_table(config.max_len, config.d_model, config.positions)
            self.register_buffer("table", table, persistent=False)
            self.positions = None
        self.dropout = nn.Dropout(config.dropout)

    def position_table(self) -> Tensor:
        """The (max_len, d_model) table added to the token embeddings."""
        return self.positions.weight if self.positions is not None else self.table

    def forward(self, ids: Tensor, offset: Tensor | int = 0) -> Tensor:
        """`offset`: the first position, one for all rows (int) or per row (batch, 1)."""
        positions = torch.arange(ids.shape[1], device=ids.device) + offset  # (len,) or (batch, len)
        x = self.tokens(ids) * self.scale  # (batch, len, d_model)
        # F.embedding exports as a plain Gather (indexing would give GatherND).
        return self.dropout(x + nn.functional.embedding(positions, self.position_table()))


def scaled_attention(q: Tensor, key: Tensor, value: Tensor, allowed: Tensor, scale: float,
                     dropout: nn.Module | None = None) -> Tensor:
    """q (batch, heads, tgt_len, head_dim) over key/value (batch, heads, key_len, head_dim) where
    `allowed` (broadcast to the scores) is True; returns (batch, heads, tgt_len, head_dim)."""
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale  # (batch, heads, tgt_len, key_len)
    # Added, not masked_fill: ORT's attention fusion (--optimize) matches `scores + bias`. A finite
    # floor rather than -inf: a fully masked row gives uniform weights, not NaN; floor + score
    # rounds back to the floor, so the weights equal masked_fill's.
    scores = scores + torch.where(allowed, 0.0, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(dropout(weights) if dropout is not None else weights, value)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over several heads; keys/values can be precomputed."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        d = config.d_model
        self.n_heads, self.head_dim, self.scale = config.n_heads, config.head_dim, config.attn_scale
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.dropout = nn.Dropout(config.dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (batch, heads, len, head_dim)

    def project_kv(self, x: Tensor) -> KV:
        """Keys and values of `x` (batch, len, d_model), each (batch, heads, len, head_dim)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, x: Tensor, key: Tensor, value: Tensor, allowed: Tensor) -> Tensor:
        """Attend from `x` (batch, tgt_len, d_model) to key/value; `allowed` broadcasts to the scores."""
        q = self.split_heads(self.q_proj(x))  # (batch, heads, tgt_len, head_dim)
        out = scaled_attention(q, key, value, allowed, self.scale, self.dropout)  # (batch, heads, tgt_len, head_dim)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (batch, tgt_len, d_model)
        return self.out_proj(out)


class FeedForward(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.act = ACTIVATION_MODULES[config.activation]()
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))


class Block(nn.Module):
    """Shared residual wiring: post-LN (the paper) or pre-LN, chosen once by the config."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = nn.Dropout(config.dropout)

    def residual(self, x: Tensor, norm: nn.LayerNorm, fn) -> Tensor:
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))


class EncoderLayer(Block):
    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        eps = config.layer_norm_eps
        self.self_attn, self.ffn = MultiHeadAttention(config), FeedForward(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model, eps), nn.LayerNorm(config.d_model, eps)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            return self.self_attn(h, *self.self_attn.project_kv(h), allowed)

        x = self.residual(x, self.norm1, attend)
        return self.residual(x, self.norm2, self.ffn)


class DecoderLayer(Block):
    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        eps, d = config.layer_norm_eps, config.d_model
        self.self_attn, self.cross_attn = MultiHeadAttention(config), MultiHeadAttention(config)
        self.ffn = FeedForward(config)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d, eps) for _ in range(3))

    def forward(self, x: Tensor, cache: CachePolicy, past: KV, cross: KV, src_allowed: Tensor
                ) -> tuple[Tensor, KV]:
        """One layer over new positions x (batch, tgt_len, d_model); `cache` says how the past takes them."""
        present: list[Tensor] = []

        def attend_self(h: Tensor) -> Tensor:
            new = self.self_attn.project_kv(h)  # (batch, heads, tgt_len, head_dim) each
            out, kept = cache.attend(self.self_attn, h, past, new)
            present.extend(kept)
            return out

        x = self.residual(x, self.norm1, attend_self)
        x = self.residual(x, self.norm2, lambda h: self.cross_attn(h, cross[0], cross[1], src_allowed))
        x = self.residual(x, self.norm3, self.ffn)
        return x, (present[0], present[1])


def _final_norm(config: TransformerConfig) -> nn.Module:
    return nn.LayerNorm(config.d_model, config.layer_norm_eps) if config.final_norm else nn.Identity()


class Transformer(nn.Module):
    """Encoder-decoder Transformer. `forward` is teacher-forced; `decode` takes and returns a KV cache."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.src_embed = Embeddings(config, config.src_vocab_size)
        shared = self.src_embed.tokens if config.share_embeddings else None
        self.tgt_embed = Embeddings(config, config.tgt_vocab_size, tokens=shared)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.encoder_norm, self.decoder_norm = _final_norm(config), _final_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        if config.tie_output:
            self.lm_head.weight = self.tgt_embed.tokens.weight
        suppress = torch.zeros(config.tgt_vocab_size, dtype=torch.bool)
        suppress[list(config.suppress_ids)] = True
        self.register_buffer("suppress", suppress, persistent=False)

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Encode (batch, src_len) ids -> memory (batch, src_len, d_model), src_mask (batch, src_len) bool."""
        src_mask = src_ids != self.config.src_pad_id  # True for real tokens
        allowed = src_mask[:, None, None, :]  # (batch, 1, 1, src_len)
        x = self.src_embed(src_ids)
        for layer in self.encoder_layers:
            x = layer(x, allowed)
        return self.encoder_norm(x), src_mask

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Cross-attention keys/values of every decoder layer, computed once per source."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def empty_cache(self, batch: int, device: torch.device | None = None,
                    dtype: torch.dtype = torch.float32) -> list[KV]:
        """A self-attention past of length 0 for every decoder layer."""
        shape = (batch, self.config.n_heads, 0, self.config.head_dim)  # (batch, heads, past_len, head_dim)
        return [(torch.zeros(shape, device=device, dtype=dtype),) * 2 for _ in self.decoder_layers]

    def decode(self, tgt_ids: Tensor, src_mask: Tensor, cross: list[KV], past: list[KV],
               last_only: bool = False, cache: CachePolicy | None = None) -> tuple[Tensor, list[KV]]:
        """Run the decoder on new ids (batch, tgt_len) after `past`; returns logits and the present cache.

        `last_only` projects only the last position (batch, 1, tgt_vocab): all greedy decoding needs.
        `cache` defaults to the growing cache (AppendCache after `past`); SlotCache writes in place.
        """
        if cache is None:
            cache = AppendCache.after(past[0][0].shape[2], tgt_ids.shape[1], tgt_ids.device)
        src_allowed = src_mask[:, None, None, :]  # (batch, 1, 1, src_len)
        x = self.tgt_embed(tgt_ids, offset=cache.offset)
        present: list[KV] = []
        for layer, layer_past, layer_cross in zip(self.decoder_layers, past, cross):
            x, kv = layer(x, cache, layer_past, layer_cross, src_allowed)
            present.append(kv)
        if last_only:
            x = x[:, -1:]  # (batch, 1, d_model)
        return self.project(self.decoder_norm(x)), present

    def project(self, hidden: Tensor) -> Tensor:
        """Output logits (..., tgt_vocab), as the model computes them: banned ids are not masked here.

        The ban belongs after the log-softmax (runtime.processors, as transformers' bad_words_ids):
        masked here, every beam score would leave out the banned ids' probability mass, and a
        repetition penalty would scale log-probabilities that transformers does not see."""
        return self.lm_head(hidden)

    def pick(self, logits: Tensor) -> Tensor:
        """Greedy ids (...,) of logits (..., tgt_vocab): the best id that is not banned (suppress_ids)."""
        if self.config.suppress_ids:
            logits = logits.masked_fill(self.suppress, torch.finfo(logits.dtype).min)
        return logits.argmax(-1)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher-forced logits (batch, tgt_len, tgt_vocab) for target inputs `tgt_ids`."""
        memory, src_mask = self.encode(src_ids)
        empty = self.empty_cache(src_ids.shape[0], src_ids.device, memory.dtype)
        logits, _ = self.decode(tgt_ids, src_mask, self.cross_kv(memory), empty)
        return logits
