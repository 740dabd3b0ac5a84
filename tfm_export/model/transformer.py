"""The encoder-decoder Transformer in PyTorch, with a KV cache.

One set of weights runs two ways: teacher-forced over a whole target (an empty past) and
incrementally (a growing self-attention past, or a pre-allocated one: see model.kv_cache).
Cross-attention keys/values are computed once per source. Everything is plain tensor ops with no
data-dependent Python branches on shapes, so torch.export traces one graph for every batch size and
length. The families (the paper's, Marian, BART, M2M100/NLLB, Pegasus, T5) are fields of the one
config: positions, norms, biases, gates, T5's relative position bias (model.layers, model.attention);
Whisper's encoder reads log-mel features, and users' speech models filterbank frames, through model.frontend
instead of token ids.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from .attention import KV, MultiHeadAttention, RelativePositionBias
from .frontend import SOURCE_MASKS, SOURCE_MODULES
from .kv_cache import AppendCache, CachePolicy
from .layers import Embeddings, FeedForward, make_norm


class Block(nn.Module):
    """Shared residual wiring: post-LN (the paper) or pre-LN, chosen once by the config."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = nn.Dropout(config.dropout)

    def residual(self, x: Tensor, norm: nn.Module, fn) -> Tensor:
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))


class EncoderLayer(Block):
    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.self_attn, self.ffn = MultiHeadAttention(config), FeedForward(config)
        self.norm1, self.norm2 = make_norm(config), make_norm(config)

    def forward(self, x: Tensor, allowed: Tensor | None, bias: Tensor | None = None) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            return self.self_attn(h, *self.self_attn.project_kv(h), allowed, bias)

        x = self.residual(x, self.norm1, attend)
        return self.residual(x, self.norm2, self.ffn)


class DecoderLayer(Block):
    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.self_attn, self.cross_attn = MultiHeadAttention(config), MultiHeadAttention(config)
        self.ffn = FeedForward(config)
        self.norm1, self.norm2, self.norm3 = (make_norm(config) for _ in range(3))

    def forward(self, x: Tensor, cache: CachePolicy, past: KV, cross: KV, src_allowed: Tensor,
                bias: Tensor | None = None) -> tuple[Tensor, KV]:
        """One layer over new positions x (batch, tgt_len, d_model); `cache` says how the past takes them,
        `bias` is the self-attention's position bias (T5)."""
        present: list[Tensor] = []

        def attend_self(h: Tensor) -> Tensor:
            new = self.self_attn.project_kv(h)  # (batch, heads, tgt_len, head_dim) each
            out, kept = cache.attend(self.self_attn, h, past, new, bias)
            present.extend(kept)
            return out

        def attend_cross(h: Tensor) -> Tensor:
            # A source's rows are consecutive (beams, samples): its group of rows attends as one row of
            # group * tgt_len queries over keys/values held once per source (src_batch, heads, src_len, head_dim).
            b, t, d = h.shape
            grouped = h.reshape(cross[0].shape[0], -1, d)  # (src_batch, group * tgt_len, d_model)
            return self.cross_attn(grouped, cross[0], cross[1], src_allowed).reshape(b, t, d)

        x = self.residual(x, self.norm1, attend_self)
        x = self.residual(x, self.norm2, attend_cross)
        x = self.residual(x, self.norm3, self.ffn)
        return x, (present[0], present[1])


def _final_norm(config: TransformerConfig) -> nn.Module:
    return make_norm(config) if config.final_norm else nn.Identity()


def _position_bias(config: TransformerConfig, bidirectional: bool) -> RelativePositionBias | None:
    return RelativePositionBias(config, bidirectional) if config.relative_buckets else None


class Transformer(nn.Module):
    """Encoder-decoder Transformer. `forward` is teacher-forced; `decode` takes and returns a KV cache."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.src_embed = SOURCE_MODULES[config.source](config)  # token embeddings or the features front end
        self.source_mask = SOURCE_MASKS[config.source]
        shared = self.src_embed.tokens if config.share_embeddings else None
        self.tgt_embed = Embeddings(config, config.tgt_vocab_size, tokens=shared)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.encoder_norm, self.decoder_norm = _final_norm(config), _final_norm(config)
        # T5: a bias by relative distance, held once per stack and added in every layer's self-attention.
        self.encoder_bias, self.decoder_bias = _position_bias(config, True), _position_bias(config, False)
        self.lm_head = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self.tie()
        self.output_scale = config.d_model ** -0.5 if config.output_scale else 1.0
        suppress = torch.zeros(config.tgt_vocab_size, dtype=torch.bool)
        suppress[list(config.suppress_ids)] = True
        self.register_buffer("suppress", suppress, persistent=False)

    def tie(self) -> None:
        """The output layer reads the target embedding's weights (config.tie_output); again after
        load_state_dict(assign=True), which gives each name a Parameter of its own."""
        if self.config.tie_output:
            self.lm_head.weight = self.tgt_embed.tokens.weight

    def encode(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Encode the source -> memory (batch, src_len, d_model), src_mask (batch, src_len) bool.

        `source`: token ids (batch, src_len), features (batch, n_mels, n_frames) with
        src_len = n_frames // 2, or frames (batch, src_len, n_feats), padded ones NaN (config.source)."""
        x = self.src_embed(source)  # (batch, src_len, d_model)
        src_mask = self.source_mask(self.config, source, x)  # True for real positions
        # (batch, 1, 1, src_len); None for Whisper's features, whose positions are all real: adding its zeros
        # changes no score, and cost ORT an Add of (batch, heads, 1500, 1500) per layer (65 ms of base's encoder)
        allowed = src_mask[:, None, None, :] if self.config.source_kind.masked else None
        bias = None
        if self.encoder_bias is not None:
            positions = torch.arange(x.shape[1], device=source.device)  # (src_len,)
            bias = self.encoder_bias(positions, positions)  # (heads, src_len, src_len)
        for layer in self.encoder_layers:
            x = layer(x, allowed, bias)
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

        `src_mask` (src_batch, src_len) and `cross` are per source; `batch` is a multiple of src_batch,
        rows i*g .. i*g + g-1 being source i's (g = batch / src_batch: beams, samples; 1 when greedy).

        `last_only` projects only the last position: logits (batch, tgt_vocab), all decoding needs.
        `cache` defaults to the growing cache (AppendCache after `past`); SlotCache writes in place.
        """
        x, present = self.decode_hidden(tgt_ids, src_mask, cross, past, cache)
        if last_only:  # (batch, d_model): the head's MatMul then writes the graph's logits output itself
            x = x[:, -1]  # (a (batch, 1, tgt_vocab) result cost a copy of every logit to drop its axis)
        return self.project(self.decoder_norm(x)), present

    def decode_hidden(self, tgt_ids: Tensor, src_mask: Tensor, cross: list[KV], past: list[KV],
                      cache: CachePolicy | None = None) -> tuple[Tensor, list[KV]]:
        """decode()'s decoder layers: the last layer's output (batch, tgt_len, d_model) before the final norm,
        and the present cache (a graph that projects some positions apart, export.graphs.DecoderGraph)."""
        if cache is None:
            cache = AppendCache.after(past[0][0].shape[2], tgt_ids.shape[1], tgt_ids.device)
        src_allowed = src_mask[:, None, None, :]  # (src_batch, 1, 1, src_len)
        # (heads, tgt_len, key_len) or (batch, heads, 1, slots): T5's bias of this step's positions
        bias = self.decoder_bias(cache.query_pos, cache.key_pos) if self.decoder_bias is not None else None
        x = self.tgt_embed(tgt_ids, offset=cache.offset)
        present: list[KV] = []
        for layer, layer_past, layer_cross in zip(self.decoder_layers, past, cross):
            x, kv = layer(x, cache, layer_past, layer_cross, src_allowed, bias)
            present.append(kv)
        return x, present

    def project(self, hidden: Tensor) -> Tensor:
        """Output logits (..., tgt_vocab), as the model computes them: banned ids are not masked here.

        The ban belongs after the log-softmax (runtime.decode.processors, as transformers' bad_words_ids):
        masked here, every beam score would leave out the banned ids' probability mass, and a
        repetition penalty would scale log-probabilities that transformers does not see."""
        # A MatMul with the weight transposed once (constant-folded at export), not nn.Linear: on the
        # (batch, d_model) rows of a decoder step Linear exports as a Gemm reading the tied embedding
        # with transB, which ORT's int8 quantizer neither quantizes nor shape-checks.
        return self._head(hidden, self.lm_head.weight.t())

    def project_apart(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """decode_hidden's (batch, tgt_len, d_model) as the logits of the positions before the last (batch,
        tgt_len - 1, tgt_vocab) and of the last (batch, tgt_vocab): two MatMuls reading one transposed weight (one
        initializer in the graph), so that a plain step's head writes the logits output itself and its other
        MatMul has no rows, while a speculative step reads every position (export.graphs.DecoderGraph)."""
        x, weight = self.decoder_norm(hidden), self.lm_head.weight.t()
        return self._head(x[:, :-1], weight), self._head(x[:, -1], weight)

    def _head(self, hidden: Tensor, weight: Tensor) -> Tensor:
        logits = torch.matmul(hidden * self.output_scale, weight)  # (..., tgt_vocab)
        return logits if self.lm_head.bias is None else logits + self.lm_head.bias

    def pick(self, logits: Tensor) -> Tensor:
        """Greedy ids (...,) of logits (..., tgt_vocab): the best id that is not banned (suppress_ids)."""
        if self.config.suppress_ids:
            logits = logits.masked_fill(self.suppress, torch.finfo(logits.dtype).min)
        return logits.argmax(-1)

    def forward(self, source: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher-forced logits (batch, tgt_len, tgt_vocab) for target inputs `tgt_ids`."""
        memory, src_mask = self.encode(source)
        empty = self.empty_cache(source.shape[0], source.device, memory.dtype)
        logits, _ = self.decode(tgt_ids, src_mask, self.cross_kv(memory), empty)
        return logits
