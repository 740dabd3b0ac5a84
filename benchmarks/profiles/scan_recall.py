r"""How often the scanned head (export.head_scan) misses the token float32 would pick, on a vocabulary of NLLB's
size: a random head (K x V) rounded as MatMulNBits rounds it (asymmetric blocks of 128 along K, at 2 and 4 bits)
and hidden states whose winning token has a chosen probability over a Gaussian bulk of logits with a chosen
spread (the trained fixtures' vocabularies, under 600 tokens, are too small to show this). Per setting: the
share of states whose float32 argmax is not among the scan's CANDIDATES best (then the head picks another token),
and the error of the log-normaliser (beam search's log-softmax) when the rest keep the scan's values.

    .venv/bin/python -m benchmarks scan-recall [--vocab 256206] [--k 1024] [--states 200]
"""
from __future__ import annotations

import argparse
import numpy as np


def rounded(w: np.ndarray, bits: int, block: int = 128) -> np.ndarray:
    """`w` (K, V) after MatMulNBits' asymmetric round to nearest (ORT's qbits_block_quant, min/max per block)."""
    k, v = w.shape
    levels = 2 ** bits - 1
    blocks = w.reshape(k // block, block, v)
    low, high = np.minimum(blocks.min(1, keepdims=True), 0), np.maximum(blocks.max(1, keepdims=True), 0)
    scale = (high - low) / levels
    zero = np.clip(np.rint(-low / scale), 0, levels)
    return ((np.clip(np.rint(blocks / scale) + zero, 0, levels) - zero) * scale).reshape(k, v)


def log_sum_exp(a: np.ndarray) -> float:
    top = float(a.max())
    return top + float(np.log(np.exp(a.astype(np.float64) - top).sum()))


def scan_recall_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=256206, help="vocabulary (default: NLLB's 256,206)")
    parser.add_argument("--k", type=int, default=1024, help="hidden size (default: NLLB-600M's 1024)")
    parser.add_argument("--states", type=int, default=200, help="hidden states per setting (default: 200)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((args.k, args.vocab)) * 0.02).astype(np.float32)
    scans = {bits: rounded(w, bits) for bits in (2, 4)}
    print("| logit spread s | p(winner) | bits | candidates | missed | log-normaliser error, median / worst |")
    print("|---:|---:|---:|---:|---:|---|")
    for spread in (2.0, 3.0, 4.0, 5.0):
        for p_win in (0.3, 0.6, 0.9):
            states = []
            for _ in range(args.states):
                x = rng.standard_normal(args.k).astype(np.float32)
                x *= spread / (0.02 * np.linalg.norm(x))
                bulk = x @ w
                winner = int(rng.integers(args.vocab))
                bulk[winner] = -np.inf
                target = log_sum_exp(bulk) + np.log(p_win / (1 - p_win))  # the winner's logit for p_win
                column = w[:, winner]
                x = x + (target - float(x @ column)) * column / float(column @ column)
                states.append(x)
            xs = np.stack(states)
            exact = xs @ w
            for bits, scan_w in scans.items():
                scan = xs @ scan_w
                for candidates in (32, 256):
                    top = np.argpartition(-scan, candidates, axis=1)[:, :candidates]
                    missed = np.mean([exact[i].argmax() not in top[i] for i in range(len(xs))])
                    mixed = scan.copy()
                    np.put_along_axis(mixed, top, np.take_along_axis(exact, top, 1), 1)
                    errors = [abs(log_sum_exp(mixed[i]) - log_sum_exp(exact[i])) for i in range(len(xs))]
                    print(f"| {spread:g} | {p_win:g} | {bits} | {candidates} | {100 * missed:.1f} % | "
                          f"{np.median(errors):.3f} / {max(errors):.3f} |", flush=True)
