"""Recipe: train the bundled model — numbers written in digits -> German words.

    .venv/bin/pip install num2words   # training-time only; the shipped model needs nothing
    .venv/bin/python models/num2words-de/train.py

Deterministic (fixed seed, two threads); about 25 minutes on a 2-core CPU. Writes model.pt, heldout.tsv, short.tsv and metrics.json here.

Numbers are drawn by digit count (weights DIGIT_WEIGHTS), not uniformly: 90 % of 0..99999 has
five digits, and a model trained on the uniform mix never learned the short numbers ("12" came out
as "zwein"). Every number below 100 is trained on (there is nothing to generalise to there); the
held-out numbers are drawn from 100..99999 and never appear in training.
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

from tfm_export.model.checkpoint import save_checkpoint
from tfm_export.config import TransformerConfig
from tfm_export.model.generate import greedy_decode
from tfm_export.model.transformer import Transformer
from tfm_export.text.tokenizer import PAD, CharTokenizer

HERE = Path(__file__).resolve().parent
SEED, MAX_NUMBER, HELDOUT, SHIPPED_HELDOUT, ALWAYS_TRAINED = 1234, 99_999, 2000, 200, 100
STEPS, BATCH, LR, WARMUP = int(sys.argv[1]) if len(sys.argv) > 1 else 4000, 128, 1e-3, 300
DIGIT_WEIGHTS = {1: 0.1, 2: 0.1, 3: 0.15, 4: 0.25, 5: 0.4}  # long numbers are the hard ones: most weight


Pair = tuple[str, str]


def make_data() -> tuple[list[Pair], list[Pair]]:
    """All pairs come from one seeded shuffle; held-out numbers never appear in training."""
    rng = random.Random(SEED)
    numbers = rng.sample(range(MAX_NUMBER + 1), MAX_NUMBER + 1)
    heldout = [n for n in numbers if n >= ALWAYS_TRAINED][:HELDOUT]
    train = sorted(set(numbers) - set(heldout))
    pair = lambda n: (str(n), num2words(n, lang="de"))  # noqa: E731
    return [pair(n) for n in train], [pair(n) for n in heldout]


def by_length(pairs: list[Pair]) -> dict[int, list[Pair]]:
    """Pairs grouped by the number of digits of the source."""
    groups: dict[int, list[Pair]] = {}
    for p in pairs:
        groups.setdefault(len(p[0]), []).append(p)
    return groups


def sample_batch(rng: random.Random, groups: dict[int, list[Pair]]) -> list[Pair]:
    """BATCH pairs, each of a digit count drawn by DIGIT_WEIGHTS (see the module docstring)."""
    lengths = rng.choices(list(DIGIT_WEIGHTS), weights=list(DIGIT_WEIGHTS.values()), k=BATCH)
    return [rng.choice(groups[n]) for n in lengths]


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
    rng, start, groups = random.Random(SEED), time.time(), by_length(train)
    for step in range(STEPS):
        src, tgt_in, tgt_out = batch_tensors(tok, sample_batch(rng, groups))
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
    per_length = {str(n): round(evaluate(model, tok, group), 4) for n, group in sorted(by_length(heldout).items())}
    small = [(str(n), num2words(n, lang="de")) for n in range(1000)]
    below_1000 = evaluate(model, tok, small)
    print(f"held-out by digit count {per_length}; all of 0..999 {below_1000:.4f}", flush=True)
    model.eval()
    samples = ["7", "12", *(s for s, _ in heldout[:6])]  # two trained short numbers, six held-out
    save_checkpoint(model, HERE / "model.pt", tokenizer=tok.to_dict(), samples=samples)
    (HERE / "heldout.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in heldout[:SHIPPED_HELDOUT]))
    (HERE / "short.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in small))  # 0..999, for the tests
    params = sum(p.numel() for p in model.parameters())
    (HERE / "metrics.json").write_text(json.dumps(
        {"heldout_exact_match": accuracy, "heldout_size": len(heldout), "train_pairs": len(train),
         "heldout_exact_match_by_digits": per_length, "exact_match_0_to_999": below_1000,
         "steps": STEPS, "batch": BATCH, "parameters": params, "train_minutes": round(minutes, 1)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
