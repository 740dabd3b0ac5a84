"""Recipe: train the bundled model — numbers written in digits -> German words.

    .venv/bin/pip install num2words   # training-time only; the shipped model needs nothing
    .venv/bin/python models/num2words-de/train.py

Deterministic (fixed seed, two threads); about 20 minutes on a 2-core CPU. Writes model.pt, heldout.tsv and metrics.json here.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from num2words import num2words

from tfm_export.checkpoint import save_checkpoint
from tfm_export.config import TransformerConfig
from tfm_export.generate import greedy_decode
from tfm_export.model import Transformer
from tfm_export.tokenizer import PAD, CharTokenizer

HERE = Path(__file__).resolve().parent
SEED, MAX_NUMBER, HELDOUT, SHIPPED_HELDOUT = 1234, 99_999, 2000, 200
STEPS, BATCH, LR, WARMUP = int(sys.argv[1]) if len(sys.argv) > 1 else 3500, 128, 1e-3, 300


def make_data() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """All pairs come from one seeded shuffle; held-out numbers never appear in training."""
    rng = random.Random(SEED)
    numbers = rng.sample(range(MAX_NUMBER + 1), MAX_NUMBER + 1)
    pairs = [(str(n), num2words(n, lang="de")) for n in numbers]
    return pairs[HELDOUT:], pairs[:HELDOUT]


def batch_tensors(tok: CharTokenizer, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    src = [tok.encode(s) for s, _ in pairs]
    tgt = [[1, *tok.encode_target(t), 2] for _, t in pairs]
    pad = lambda rows: torch.tensor([r + [PAD] * (max(map(len, rows)) - len(r)) for r in rows])  # noqa: E731
    tgt_t = pad(tgt)
    return pad(src), tgt_t[:, :-1], tgt_t[:, 1:]


def evaluate(model: Transformer, tok: CharTokenizer, pairs: list[tuple[str, str]]) -> float:
    model.eval()
    right = 0
    for i in range(0, len(pairs), 250):
        chunk = pairs[i:i + 250]
        src, _, _ = batch_tensors(tok, chunk)
        outs = greedy_decode(model, src)
        right += sum(tok.decode(o) == t for o, (_, t) in zip(outs, chunk))
    model.train()
    return right / len(pairs)


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    train, heldout = make_data()
    tok = CharTokenizer.build([s for s, _ in train + heldout], [t for _, t in train + heldout])
    config = TransformerConfig(
        src_vocab_size=len(tok.src_vocab), tgt_vocab_size=len(tok.tgt_vocab), d_model=128, n_heads=4,
        n_encoder_layers=3, n_decoder_layers=3, d_ff=512, dropout=0.0, norm_first=True, final_norm=True,
        positions="sinusoidal", max_len=64)
    model = Transformer(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / WARMUP, 0.5 * (1 + math.cos(math.pi * min(s / STEPS, 1.0)))))
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.05)
    rng, start = random.Random(SEED), time.time()
    for step in range(STEPS):
        src, tgt_in, tgt_out = batch_tensors(tok, rng.sample(train, BATCH))
        loss = loss_fn(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 500 == 0 or step == STEPS - 1:
            print(f"step {step} loss {loss.item():.4f} {time.time() - start:.0f}s", flush=True)
        if step and step % 1000 == 0:
            print(f"  held-out (500) exact match {evaluate(model, tok, heldout[:500]):.3f}", flush=True)
    accuracy = evaluate(model, tok, heldout)
    minutes = (time.time() - start) / 60
    print(f"held-out exact match {accuracy:.4f} on {len(heldout)} numbers, {minutes:.1f} min", flush=True)
    model.eval()
    samples = [s for s, _ in heldout[:8]]
    save_checkpoint(model, HERE / "model.pt", tokenizer=tok.to_dict(), samples=samples)
    (HERE / "heldout.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in heldout[:SHIPPED_HELDOUT]))
    params = sum(p.numel() for p in model.parameters())
    (HERE / "metrics.json").write_text(json.dumps(
        {"heldout_exact_match": accuracy, "heldout_size": len(heldout), "train_pairs": len(train),
         "steps": STEPS, "batch": BATCH, "parameters": params, "train_minutes": round(minutes, 1)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
