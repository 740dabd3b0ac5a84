"""Seeded sampling that any language can reproduce token for token. Torch-free.

The random numbers come from SplitMix64 written out here (not numpy's generators), so a port to
JavaScript (BigInt) or C draws the same numbers:

    state = (state + 0x9E3779B97F4A7C15) mod 2**64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2**64
    next() = z ^ (z >> 31)
    uniform() = (next() >> 11) / 2**53          (in [0, 1), 53 random bits)

Row r of a call (decoder row: source i's j-th sample is row i * num_return_sequences + j) draws from
its own SplitMix64 whose seed is the (r + 1)-th `next()` of SplitMix64(seed): a row's tokens do not
depend on the other rows of its batch.

One token per row and step (transformers' warpers, in their order, on float64 scores):
1. temperature: scores / temperature;
2. top_k: keep scores >= the k-th largest (ties at the k-th are all kept);
3. top_p: sort ascending (stable: equal scores by token id), cumulative softmax; drop the tokens
   whose cumulative probability is <= 1 - top_p, always keeping the most likely one;
4. probabilities p = exp(s - max) (unnormalised); u = uniform(); the token is the first id (in id
   order) whose running sum of p exceeds u * sum(p) (the last id with p > 0 when rounding leaves none).
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1


class SplitMix64:
    """The generator above, on Python ints (exact 64-bit arithmetic, no numpy overflow rules)."""

    def __init__(self, seed: int):
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return (self.next() >> 11) / float(1 << 53)


def row_generators(seed: int, rows: int) -> list[SplitMix64]:
    """One generator per decoder row, seeded from SplitMix64(seed)'s outputs (see the module docstring)."""
    master = SplitMix64(seed)
    return [SplitMix64(master.next()) for _ in range(rows)]


def warp(scores: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Steps 1-3 on one row's (vocab,) float64 scores; removed tokens become -inf (a new array)."""
    scores = scores / temperature
    if 0 < top_k < scores.shape[0]:
        kth = np.partition(scores, -top_k)[-top_k]
        scores = np.where(scores < kth, -np.inf, scores)
    if top_p < 1.0:
        order = np.argsort(scores, kind="stable")  # ascending; ties by token id
        ranked = scores[order]
        probs = np.exp(ranked - ranked[-1])
        cumulative = np.cumsum(probs / probs.sum())
        drop = cumulative <= 1.0 - top_p
        drop[-1] = False  # the most likely token always stays
        scores = scores.copy()
        scores[order[drop]] = -np.inf
    return scores


def sample(scores: np.ndarray, generator: SplitMix64) -> int:
    """Step 4: one token id from one row's warped (vocab,) scores."""
    return draw(np.exp(scores - scores.max()), generator)


def draw(probs: np.ndarray, generator: SplitMix64) -> int:
    """Step 4 on (vocab,) non-negative weights `probs` (unnormalised): one id (speculative sampling draws from
    a draft's q and a residual with it, runtime.decode.speculative_sampling)."""
    running = np.cumsum(probs)
    target = generator.uniform() * running[-1]
    hit = int(np.searchsorted(running, target, side="right"))  # first index with running > target
    return hit if hit < len(probs) else int(np.flatnonzero(probs > 0)[-1])
