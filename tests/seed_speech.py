"""Seed 001 (../shared/seeds/001, "Tranform实现"), a user's own speech Transformer, as its tutorial writes it:
filterbank frames (batch, frames, 80) through a Linear `frontend`, an encoder with no token embedding
(sinusoidal `pos_emb` added to the frames), Conv1d (kernel 1) feed-forward layers, post-LN, masks from the
frame lengths, a token decoder and a `linear` output layer. It runs as published; only the page's lost
indentation is restored. Its dropouts are 0 here (eval mode decodes without them anyway).

Not a test module: the model, synthetic "speech" that a tiny model learns in seconds (each token a
fixed 80-dim frame pattern held for 2..4 noisy frames, a silence frame between tokens), a trainer that
saves a plain state_dict as the tutorial would (torch.save(model.state_dict(), path)), and the tutorial's
own eager decoding (its forward over the whole prefix each step) through tests/decoding_oracle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

import decoding_oracle as oracle
from helpers import one_thread

# ---------------------------------------------------------------- the tutorial's code (re-indented only)


def get_len_mask(b: int, max_len: int, feat_lens: torch.Tensor, device: torch.device) -> torch.Tensor:
    attn_mask = torch.ones((b, max_len, max_len), device=device)
    for i in range(b):
        attn_mask[i, :, :feat_lens[i]] = 0
    return attn_mask.to(torch.bool)


def get_subsequent_mask(b: int, max_len: int, device: torch.device) -> torch.Tensor:
    return torch.triu(torch.ones((b, max_len, max_len), device=device), diagonal=1).to(torch.bool)


def get_enc_dec_mask(
        b: int, max_feat_len: int, feat_lens: torch.Tensor, max_label_len: int, device: torch.device) -> torch.Tensor:
    attn_mask = torch.zeros((b, max_label_len, max_feat_len), device=device)  # (b, seq_q, seq_k)
    for i in range(b):
        attn_mask[i, :, feat_lens[i]:] = 1
    return attn_mask.to(torch.bool)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_k, d_v, d_model, num_heads, p=0.):
        super(MultiHeadAttention, self).__init__()
        self.d_model = d_model
        self.d_k = d_k
        self.d_v = d_v
        self.num_heads = num_heads
        self.dropout = nn.Dropout(p)
        self.W_Q = nn.Linear(d_model, d_k * num_heads)
        self.W_K = nn.Linear(d_model, d_k * num_heads)
        self.W_V = nn.Linear(d_model, d_v * num_heads)
        self.W_out = nn.Linear(d_v * num_heads, d_model)
        nn.init.normal_(self.W_Q.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.W_K.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.W_V.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_v)))
        nn.init.normal_(self.W_out.weight, mean=0, std=np.sqrt(2.0 / (d_model + d_v)))

    def forward(self, Q, K, V, attn_mask, **kwargs):
        N = Q.size(0)
        q_len, k_len = Q.size(1), K.size(1)
        d_k, d_v = self.d_k, self.d_v
        num_heads = self.num_heads
        Q = self.W_Q(Q).view(N, -1, num_heads, d_k).transpose(1, 2)
        K = self.W_K(K).view(N, -1, num_heads, d_k).transpose(1, 2)
        V = self.W_V(V).view(N, -1, num_heads, d_v).transpose(1, 2)
        if attn_mask is not None:
            assert attn_mask.size() == (N, q_len, k_len)
            attn_mask = attn_mask.unsqueeze(1).repeat(1, num_heads, 1, 1)
            attn_mask = attn_mask.bool()
        scores = torch.matmul(Q, K.transpose(-1, -2)) / np.sqrt(d_k)
        if attn_mask is not None:
            scores.masked_fill_(attn_mask, -1e4)
        attns = torch.softmax(scores, dim=-1)
        attns = self.dropout(attns)
        output = torch.matmul(attns, V)
        output = output.transpose(1, 2).contiguous().reshape(N, -1, d_v * num_heads)
        output = self.W_out(output)
        return output


class PoswiseFFN(nn.Module):
    def __init__(self, d_model, d_ff, p=0.):
        super(PoswiseFFN, self).__init__()
        self.d_model = d_model
        self.d_ff = d_ff
        self.conv1 = nn.Conv1d(d_model, d_ff, 1, 1, 0)
        self.conv2 = nn.Conv1d(d_ff, d_model, 1, 1, 0)
        self.relu = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(p=p)

    def forward(self, X):
        out = self.conv1(X.transpose(1, 2))
        out = self.relu(out)
        out = self.conv2(out).transpose(1, 2)
        out = self.dropout(out)
        return out


def pos_sinusoid_embedding(seq_len, d_model):
    embeddings = torch.zeros((seq_len, d_model))
    for i in range(d_model):
        f = torch.sin if i % 2 == 0 else torch.cos
        embeddings[:, i] = f(torch.arange(0, seq_len) / np.power(1e4, 2 * (i // 2) / d_model))
    return embeddings.float()


class EncoderLayer(nn.Module):
    def __init__(self, dim, n, dff, dropout_posffn, dropout_attn):
        assert dim % n == 0
        hdim = dim // n
        super(EncoderLayer, self).__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.multi_head_attn = MultiHeadAttention(hdim, hdim, dim, n, dropout_attn)
        self.poswise_ffn = PoswiseFFN(dim, dff, p=dropout_posffn)

    def forward(self, enc_in, attn_mask):
        residual = enc_in
        context = self.multi_head_attn(enc_in, enc_in, enc_in, attn_mask)
        out = self.norm1(residual + context)
        residual = out
        out = self.poswise_ffn(out)
        out = self.norm2(residual + out)
        return out


class DecoderLayer(nn.Module):
    def __init__(self, dim, n, dff, dropout_posffn, dropout_attn):
        super(DecoderLayer, self).__init__()
        assert dim % n == 0
        hdim = dim // n
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)
        self.poswise_ffn = PoswiseFFN(dim, dff, p=dropout_posffn)
        self.dec_attn = MultiHeadAttention(hdim, hdim, dim, n, dropout_attn)
        self.enc_dec_attn = MultiHeadAttention(hdim, hdim, dim, n, dropout_attn)

    def forward(self, dec_in, enc_out, dec_mask, dec_enc_mask, cache=None, freqs_cis=None):
        residual = dec_in
        context = self.dec_attn(dec_in, dec_in, dec_in, dec_mask)
        dec_out = self.norm1(residual + context)
        residual = dec_out
        context = self.enc_dec_attn(dec_out, enc_out, enc_out, dec_enc_mask)
        dec_out = self.norm2(residual + context)
        residual = dec_out
        out = self.poswise_ffn(dec_out)
        dec_out = self.norm3(residual + out)
        return dec_out


class Encoder(nn.Module):
    def __init__(self, dropout_emb, dropout_posffn, dropout_attn, num_layers, enc_dim, num_heads, dff, tgt_len):
        super(Encoder, self).__init__()
        self.tgt_len = tgt_len
        self.pos_emb = nn.Embedding.from_pretrained(pos_sinusoid_embedding(tgt_len, enc_dim), freeze=True)
        self.emb_dropout = nn.Dropout(dropout_emb)
        self.layers = nn.ModuleList(
            [EncoderLayer(enc_dim, num_heads, dff, dropout_posffn, dropout_attn) for _ in range(num_layers)])

    def forward(self, X, X_lens, mask=None):
        batch_size, seq_len, d_model = X.shape
        out = X + self.pos_emb(torch.arange(seq_len, device=X.device))
        out = self.emb_dropout(out)
        for layer in self.layers:
            out = layer(out, mask)
        return out


class Decoder(nn.Module):
    def __init__(self, dropout_emb, dropout_posffn, dropout_attn, num_layers, dec_dim, num_heads, dff, tgt_len,
                 tgt_vocab_size):
        super(Decoder, self).__init__()
        self.tgt_emb = nn.Embedding(tgt_vocab_size, dec_dim)
        self.dropout_emb = nn.Dropout(p=dropout_emb)
        self.pos_emb = nn.Embedding.from_pretrained(pos_sinusoid_embedding(tgt_len, dec_dim), freeze=True)
        self.layers = nn.ModuleList(
            [DecoderLayer(dec_dim, num_heads, dff, dropout_posffn, dropout_attn) for _ in range(num_layers)])

    def forward(self, labels, enc_out, dec_mask, dec_enc_mask, cache=None):
        tgt_emb = self.tgt_emb(labels)
        pos_emb = self.pos_emb(torch.arange(labels.size(1), device=labels.device))
        dec_out = self.dropout_emb(tgt_emb + pos_emb)
        for layer in self.layers:
            dec_out = layer(dec_out, enc_out, dec_mask, dec_enc_mask)
        return dec_out


class Transformer(nn.Module):
    def __init__(self, frontend: nn.Module, encoder: nn.Module, decoder: nn.Module, dec_out_dim: int,
                 vocab: int) -> None:
        super().__init__()
        self.frontend = frontend
        self.encoder = encoder
        self.decoder = decoder
        self.linear = nn.Linear(dec_out_dim, vocab)

    def forward(self, X: torch.Tensor, X_lens: torch.Tensor, labels: torch.Tensor):
        X_lens, labels = X_lens.long(), labels.long()
        b = X.size(0)
        device = X.device
        out = self.frontend(X)
        max_feat_len = out.size(1)
        max_label_len = labels.size(1)
        enc_mask = get_len_mask(b, max_feat_len, X_lens, device)
        enc_out = self.encoder(out, X_lens, enc_mask)
        dec_mask = get_subsequent_mask(b, max_label_len, device)
        dec_enc_mask = get_enc_dec_mask(b, max_feat_len, X_lens, max_label_len, device)
        dec_out = self.decoder(labels, enc_out, dec_mask, dec_enc_mask)
        logits = self.linear(dec_out)
        return logits


# ---------------------------------------------------------------- the model at test size, as testTransformer builds it

PAD, BOS, EOS = 0, 1, 2  # the decoder's special ids: our choice (the tutorial has no tokenizer)
VOCAB = 12  # PAD, BOS, EOS and nine "words" 3..11
FBANK_DIM, HIDDEN, HEADS, LAYERS, DFF, TGT_LEN = 80, 32, 4, 2, 64, 64
MAX_WORDS = 5


def seed_001(seed: int = 0, tgt_len: int = TGT_LEN) -> Transformer:
    """`tgt_len`: the position tables' rows, the most frames (100 a second of Kaldi fbank) and tokens."""
    torch.manual_seed(seed)
    feature_extractor = nn.Linear(FBANK_DIM, HIDDEN)
    encoder = Encoder(dropout_emb=0., dropout_posffn=0., dropout_attn=0., num_layers=LAYERS, enc_dim=HIDDEN,
                      num_heads=HEADS, dff=DFF, tgt_len=tgt_len)
    decoder = Decoder(dropout_emb=0., dropout_posffn=0., dropout_attn=0., num_layers=LAYERS, dec_dim=HIDDEN,
                      num_heads=HEADS, dff=DFF, tgt_len=tgt_len, tgt_vocab_size=VOCAB)
    return Transformer(feature_extractor, encoder, decoder, HIDDEN, VOCAB)


# ---------------------------------------------------------------- synthetic speech

# Each word's frame pattern, and the silence between words: fixed, whatever the draw.
PATTERNS = torch.randn((VOCAB, FBANK_DIM), generator=torch.Generator().manual_seed(1))
SILENCE = torch.zeros(FBANK_DIM)


def utterance(gen: torch.Generator) -> tuple[torch.Tensor, list[int]]:
    """(frames, FBANK_DIM) float32 frames and the words they say: 1..MAX_WORDS words, each its pattern held
    2..4 frames with noise, a silence frame between words."""
    words = torch.randint(3, VOCAB, (int(torch.randint(1, MAX_WORDS + 1, (1,), generator=gen)),), generator=gen)
    frames = []
    for n, word in enumerate(words.tolist()):
        if n:
            frames.append(SILENCE[None])
        hold = int(torch.randint(2, 5, (1,), generator=gen))
        frames.append(PATTERNS[word] + 0.3 * torch.randn((hold, FBANK_DIM), generator=gen))
    return torch.cat(frames), words.tolist()


def held_out(n: int = 6, seed: int = 4321) -> list[tuple[np.ndarray, list[int]]]:
    """Utterances the training never drew (another generator): (frames as numpy, words)."""
    gen = torch.Generator().manual_seed(seed)
    return [(x.numpy(), words) for x, words in (utterance(gen) for _ in range(n))]


def batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """X (size, frames, FBANK_DIM) zero-padded, X_lens, decoder inputs BOS + words, targets words + EOS (PAD-padded)."""
    items = [utterance(gen) for _ in range(size)]
    lens = torch.tensor([len(x) for x, _ in items])
    X = torch.zeros((size, int(lens.max()), FBANK_DIM))
    width = max(len(w) for _, w in items) + 1
    inputs, targets = torch.full((size, width), PAD), torch.full((size, width), PAD)
    for i, (x, words) in enumerate(items):
        X[i, : len(x)] = x
        inputs[i, : len(words) + 1] = torch.tensor([BOS] + words)
        targets[i, : len(words) + 1] = torch.tensor(words + [EOS])
    return X, lens, inputs, targets


def train_001(model: Transformer, steps: int = 250, seed: int = 0) -> Transformer:
    """Adam on cross-entropy (PAD ignored), batches of 32: enough for held-out utterances to decode right."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    with one_thread():
        for _ in range(steps):
            X, lens, inputs, targets = batch(gen, 32)
            logits = model(X, lens, inputs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def save_state_dict(model: Transformer, path: Path) -> Path:
    torch.save(model.state_dict(), path)  # as the tutorial's readers save it: the bare state_dict
    return path


# ---------------------------------------------------------------- the tutorial's own eager decoding


def _next_logp(model: Transformer, frames: np.ndarray):
    X = torch.from_numpy(frames)[None]
    lens = torch.tensor([len(frames)])

    @torch.no_grad()
    def next_logp(prefixes: list[list[int]]) -> torch.Tensor:
        n = len(prefixes)  # the tutorial's forward over every prefix, the whole prefix each step
        logits = model(X.expand(n, -1, -1), lens.expand(n), torch.tensor(prefixes))[:, -1]
        return torch.log_softmax(logits.double(), dim=-1)

    return next_logp


def tutorial_greedy(model: Transformer, frames: np.ndarray, steps: int) -> list[int]:
    with one_thread():
        return oracle.greedy(_next_logp(model.eval(), frames), steps, BOS, EOS)


def tutorial_beam(model: Transformer, frames: np.ndarray, steps: int, k: int) -> list[int]:
    with one_thread():
        return oracle.beam(_next_logp(model.eval(), frames), steps, k, BOS, EOS)
