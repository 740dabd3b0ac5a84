"""The users' own architectures of #42 (../shared/seeds/003 and 004), as their tutorials write them.

Not a test module: models, adapters and a tiny trainer for tests/test_any_module.py. The CLI tests
pickle these modules whole and name the adapters as `seed_models:SEED_004` (tests/ is on sys.path).

004 ("Attention Is All You Need" notes) as published does not run; the fixes, each marked FIX:
MultiHeadAttention calls nn.Module.__init__; its per-head attention returns one tensor (not a pair) and
the heads are concatenated on the feature axis (not the batch); scores are masked before the softmax (not
after, on .data); an encoder block passes x to its attention (not the bound method); masks are call
arguments (not fixed at construction). Kept as written: the per-head q/k/v projectors in plain Python
lists (so state_dict() has none of them), one attention module and one feed-forward shared by every
block, encoder blocks without residuals, the decoder's second norm over self-attention + cross-attention
outputs, the decoder embedding sized by the source vocabulary, positions 1..d_model.

003 (a BERT-like encoder-only classifier, pre-LN, learned positions, [CLS] pooling) runs as written.
"""

from __future__ import annotations

import abc
from types import SimpleNamespace
from typing import Optional

import torch
from torch import Tensor, nn

from helpers import one_thread

# ---------------------------------------------------------------- 004: per-head projectors in lists


class ScaledDotProductAttention(nn.Module):
    def __init__(self, d_k: int) -> None:
        super().__init__()
        self.d_k = d_k

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        scores = torch.matmul(query, key.transpose(-2, -1)) / torch.sqrt(torch.tensor(self.d_k, dtype=torch.float32))
        if mask is not None:  # FIX: True = masked, filled before the softmax
            if mask.dim() != scores.dim():
                raise ValueError(f"mask.dim != attention_weight.dim, mask.dim={mask.dim()}")
            scores = scores.masked_fill(mask, -torch.finfo(torch.float).max)
        return torch.matmul(torch.softmax(scores, dim=-1), value)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()  # FIX
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.d_v = d_model // num_heads
        self.attention_func = ScaledDotProductAttention(self.d_k)
        # As published: plain lists, so these are neither submodules nor in state_dict().
        self.query_linear_projectors = [nn.Linear(d_model, self.d_k) for _ in range(self.num_heads)]
        self.key_linear_projectors = [nn.Linear(d_model, self.d_k) for _ in range(self.num_heads)]
        self.value_linear_projectors = [nn.Linear(d_model, self.d_v) for _ in range(self.num_heads)]
        self.output_linear_projector = nn.Linear(self.num_heads * self.d_v, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask_3d: Optional[Tensor] = None) -> Tensor:
        heads = []
        for i in range(self.num_heads):
            attention_output = self.attention_func(  # FIX: one tensor, mask not repeated per head
                self.query_linear_projectors[i](query), self.key_linear_projectors[i](key),
                self.value_linear_projectors[i](value), mask_3d)
            heads.append(attention_output)
        return self.output_linear_projector(torch.cat(heads, dim=-1))  # FIX: features, not batch


class PositionWiseFFN(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(d_model, d_ff)
        self.linear_2 = nn.Linear(d_ff, d_model)
        self.activate_func = nn.functional.relu

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_2(self.activate_func(self.linear_1(x)))


class PositionalEncoding(abc.ABC):
    """Not an nn.Module: its table is a plain tensor attribute (positions 1..d_model, as published)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        self.d_model, self.max_len = d_model, max_len
        self.positional_encoding_weights = torch.stack([self._vector(pos) for pos in range(1, d_model + 1)])

    def forward(self, x: Tensor) -> Tensor:
        return x + self.positional_encoding_weights[: x.size(1), :].unsqueeze(0)

    def _vector(self, position_idx: int) -> Tensor:
        pe = torch.zeros(self.d_model)
        odd, even = torch.arange(0, self.d_model, 2), torch.arange(1, self.d_model, 2)
        pe[odd] = torch.cos(position_idx / (10000 ** (odd.float() / self.d_model)))
        pe[even] = torch.sin(position_idx / (10000 ** (even.float() / self.d_model)))
        return pe


class TransformerEncoderBlock(nn.Module):
    def __init__(self, d_model, self_attention, feed_forward_network, dropout_rate, layer_norm_epsilon):
        super().__init__()
        self.multi_head_attention = self_attention
        self.dropout_self_attention = nn.Dropout(dropout_rate)
        self.layer_norm_self_attention = nn.LayerNorm(d_model, layer_norm_epsilon)
        self.ffn = feed_forward_network
        self.dropout_ffn = nn.Dropout(dropout_rate)
        self.layer_norm_ffn = nn.LayerNorm(d_model, layer_norm_epsilon)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        x = self.layer_norm_self_attention(self._self_attention_block(x, mask))  # FIX: x; no residual (as published)
        return self.layer_norm_ffn(self._feed_forward_block(x))

    def _self_attention_block(self, x, mask):
        return self.dropout_self_attention(self.multi_head_attention(x, x, x, mask))

    def _feed_forward_block(self, x):
        return self.dropout_ffn(self.ffn(x))


class TransformerEncoder(nn.Module):
    def __init__(self, d_model, N, positional_encoding, self_attention, feed_forward_network, vocab_size,
                 max_len, padding_idx, dropout_rate, layer_norm_epsilon):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx)
        self.positional_encoding = positional_encoding
        self.encoder_blocks = nn.ModuleList([TransformerEncoderBlock(
            d_model, self_attention, feed_forward_network, dropout_rate, layer_norm_epsilon) for _ in range(N)])

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        x = self.positional_encoding.forward(self.embedding(x))
        for block in self.encoder_blocks:
            x = block(x, mask)
        return x


class TransformerDecoderBlock(nn.Module):
    def __init__(self, d_model, self_attention, src_to_tgt_attention, feed_forward_network, dropout_rate,
                 layer_norm_epsilon):
        super().__init__()
        self.self_attention = self_attention
        self.dropout_self_attention = nn.Dropout(dropout_rate)
        self.layer_norm_self_attention = nn.LayerNorm(d_model, layer_norm_epsilon)
        self.src_to_tgt_attention = src_to_tgt_attention
        self.dropout_src_to_tgt_attention = nn.Dropout(dropout_rate)
        self.layer_norm_src_to_tgt_attention = nn.LayerNorm(d_model, layer_norm_epsilon)
        self.ffn = feed_forward_network
        self.dropout_ffn = nn.Dropout(dropout_rate)
        self.layer_norm_ffn = nn.LayerNorm(d_model, layer_norm_epsilon)

    def forward(self, tgt, src, mask_src_to_tgt, mask_self):
        tgt_self = self.dropout_self_attention(self.self_attention(tgt, tgt, tgt, mask_self))
        tgt_self_norm = self.layer_norm_self_attention(tgt + tgt_self)
        x_cross = self.dropout_src_to_tgt_attention(self.src_to_tgt_attention(tgt_self_norm, src, src, mask_src_to_tgt))
        x_cross_norm = self.layer_norm_src_to_tgt_attention(tgt_self + x_cross)  # as published: not a residual
        return self.layer_norm_ffn(x_cross_norm + self.dropout_ffn(self.ffn(x_cross_norm)))


class TransformerDecoder(nn.Module):
    def __init__(self, d_model, N, positional_encoding, self_attention, src_to_tgt_attention, feed_forward_network,
                 vocab_size, max_len, padding_idx, dropout_rate, layer_norm_epsilon):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx)
        self.positional_encoding = positional_encoding
        self.decoder_blocks = nn.ModuleList([TransformerDecoderBlock(
            d_model, self_attention, src_to_tgt_attention, feed_forward_network, dropout_rate, layer_norm_epsilon)
            for _ in range(N)])

    def forward(self, tgt, src, mask_src_tgt, mask_self):
        tgt = self.positional_encoding.forward(self.embedding(tgt))
        for block in self.decoder_blocks:
            tgt = block(tgt, src, mask_src_tgt, mask_self)
        return tgt


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, max_len, d_model=512, heads_num=8, d_ff=2048, N=6,
                 dropout_rate=0.1, layer_norm_epsilon=1e-5, pad_idx=0):
        super().__init__()
        self.pad_idx = pad_idx
        self.encoder = TransformerEncoder(
            d_model, N, PositionalEncoding(d_model, max_len), MultiHeadAttention(d_model, heads_num),
            PositionWiseFFN(d_model, d_ff), src_vocab_size, max_len, pad_idx, dropout_rate, layer_norm_epsilon)
        self.decoder = TransformerDecoder(
            d_model, N, PositionalEncoding(d_model, max_len), MultiHeadAttention(d_model, heads_num),
            MultiHeadAttention(d_model, heads_num), PositionWiseFFN(d_model, d_ff), src_vocab_size, max_len,
            pad_idx, dropout_rate, layer_norm_epsilon)
        self.linear_trans = nn.Linear(d_model, tgt_vocab_size)
        self.softmax_func = nn.Softmax(dim=1)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """FIX: masks from the ids (True = masked); logits, not softmax over the wrong axis (training)."""
        src_mask = src == self.pad_idx  # (batch, src_len)
        memory = self.encoder(src, src_mask.unsqueeze(1).expand(-1, src.shape[1], -1))
        return self.linear_trans(self.decoder(tgt, memory, *decoder_masks(tgt, src_mask)))


def decoder_masks(tgt: Tensor, src_pad: Tensor) -> tuple[Tensor, Tensor]:
    """(cross mask (batch, tgt_len, src_len), causal mask (batch, tgt_len, tgt_len)); True = masked."""
    n = tgt.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).triu(1).unsqueeze(0).expand(tgt.shape[0], -1, -1)
    return src_pad.unsqueeze(1).expand(-1, n, -1), causal


def all_parameters(module: nn.Module) -> list[nn.Parameter]:
    """Registered parameters plus those of the per-head projectors kept in plain lists."""
    params = {id(p): p for p in module.parameters()}
    for sub in module.modules():
        for value in vars(sub).values():
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, nn.Module):
                        params.update({id(p): p for p in item.parameters()})
    return list(params.values())


# Special ids and sizes of the toy task: 0 pad, 1 BOS, 2 EOS, digits 3..12.
PAD, BOS, EOS, VOCAB, MAX_LEN = 0, 1, 2, 13, 24


def seed_004(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(VOCAB, VOCAB, MAX_LEN, d_model=32, heads_num=4, d_ff=64, N=2, dropout_rate=0.0)


def encode_004(model: Transformer, src_ids: Tensor, src_mask: Tensor) -> Tensor:
    """src_mask: True = a real token (tfm-export's convention); the tutorial masks where True."""
    pad = ~src_mask
    return model.encoder(src_ids, pad.unsqueeze(1).expand(-1, src_ids.shape[1], -1))


def decode_004(model: Transformer, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
    return model.linear_trans(model.decoder(tgt_ids, memory, *decoder_masks(tgt_ids, ~src_mask)))


# The adapter `tfm-export MODEL.pt --trust-pickle --adapter seed_models:SEED_004` names.
SEED_004 = SimpleNamespace(encode=encode_004, decode=decode_004, bos_id=BOS, eos_id=EOS, src_pad_id=PAD,
                           tgt_pad_id=PAD, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, max_len=MAX_LEN)


def toy_batch(gen: torch.Generator, batch: int, reverse: bool = True) -> tuple[Tensor, Tensor]:
    """Digit strings of 2..8 tokens and their reversals (+ EOS), padded."""
    lengths = torch.randint(2, 9, (batch,), generator=gen)
    width = int(lengths.max())
    src = torch.full((batch, width), PAD)
    tgt = torch.full((batch, width + 2), PAD)
    tgt[:, 0] = BOS
    for row, n in enumerate(lengths.tolist()):
        digits = torch.randint(3, VOCAB, (n,), generator=gen)
        src[row, :n] = digits
        tgt[row, 1:n + 1] = digits.flip(0) if reverse else digits
        tgt[row, n + 1] = EOS
    return src, tgt


def held_out(seed: int = 1234, n: int = 6) -> list[list[int]]:
    """Digit strings the training never drew (another generator), unpadded."""
    src, _ = toy_batch(torch.Generator().manual_seed(seed), n)
    return [[t for t in row if t != PAD] for row in src.tolist()]


def train_004(model: Transformer, steps: int = 400, seed: int = 0) -> Transformer:
    """A few hundred Adam steps on reversing digits: enough that greedy output is not one token repeated."""
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(all_parameters(model), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    model.train()
    with one_thread():
        for _ in range(steps):
            src, tgt = toy_batch(gen, 64)
            logits = model(src, tgt[:, :-1])
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


# ---------------------------------------------------------------- 003: an encoder-only classifier


def scaled_dot_product_attention(query, key, value):
    dim_k = query.size(-1)
    scores = torch.bmm(query, key.transpose(1, 2)) / dim_k ** 0.5
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, value)


class AttentionHead(nn.Module):
    def __init__(self, embed_dim, head_dim):
        super().__init__()
        self.q = nn.Linear(embed_dim, head_dim)
        self.k = nn.Linear(embed_dim, head_dim)
        self.v = nn.Linear(embed_dim, head_dim)

    def forward(self, hidden_state):
        return scaled_dot_product_attention(self.q(hidden_state), self.k(hidden_state), self.v(hidden_state))


class BertMultiHeadAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        embed_dim = config.hidden_size
        num_heads = config.num_attention_heads
        head_dim = embed_dim // num_heads
        self.heads = nn.ModuleList([AttentionHead(embed_dim, head_dim) for _ in range(num_heads)])
        self.output_linear = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_state):
        return self.output_linear(torch.cat([h(hidden_state) for h in self.heads], dim=-1))


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.linear_1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.linear_2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.gelu = nn.GELU()
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x):
        return self.dropout(self.linear_2(self.gelu(self.linear_1(x))))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer_norm_1 = nn.LayerNorm(config.hidden_size)
        self.layer_norm_2 = nn.LayerNorm(config.hidden_size)
        self.attention = BertMultiHeadAttention(config)
        self.feed_forward = FeedForward(config)

    def forward(self, x):
        hidden_state = self.layer_norm_1(x)
        x = x + self.attention(hidden_state)
        return x + self.feed_forward(self.layer_norm_2(x))


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.token_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout()

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long).unsqueeze(0)
        embeddings = self.token_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.layer_norm(embeddings))


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList([TransformerEncoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, x):
        x = self.embeddings(x)
        for layer in self.layers:
            x = layer(x)
        return x


class TransformerForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.encoder = BertEncoder(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, x):
        x = self.encoder(x)[:, 0, :]  # the [CLS] token's hidden state
        return self.classifier(self.dropout(x))


CONFIG_003 = SimpleNamespace(vocab_size=50, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                             hidden_dropout_prob=0.1, max_position_embeddings=20, num_hidden_layers=2, num_labels=3)


def seed_003(seed: int = 0) -> TransformerForSequenceClassification:
    torch.manual_seed(seed)
    return TransformerForSequenceClassification(CONFIG_003).eval()


def encode_003(model: TransformerForSequenceClassification, src_ids: Tensor, src_mask: Tensor) -> Tensor:
    """The classifier's logits (batch, num_labels); as published it reads no mask."""
    return model(src_ids)


SEED_003 = SimpleNamespace(encode=encode_003, src_pad_id=0, src_vocab_size=CONFIG_003.vocab_size,
                           max_len=CONFIG_003.max_position_embeddings, output_names=("logits",))
