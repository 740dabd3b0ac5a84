"""The workload every serving scenario shares: 200 (source ids, max_new_tokens) pairs of random in-vocabulary
ids, the same for `load`'s requests, `engine`'s jobs and `ct2-batch`'s static batches."""

from __future__ import annotations

from pathlib import Path
import random

from tfm_export.manifest import load_manifest


def sources(folder: Path, count: int, seed: int, longest: int | None = None) -> list[list[int]]:
    """Varied sources: random in-vocabulary ids of 4..longest/2 tokens (longest: max_len; the same for every mode)."""
    config = load_manifest(folder, verify_hashes=False).config
    rng = random.Random(seed)
    specials = {config.src_pad_id, config.bos_id, config.eos_id}
    top = config.src_vocab_size
    while top - 1 in specials:  # Marian: the pad id (the decoder start) is the last id
        top -= 1
    low = max((s for s in specials if s < top), default=-1) + 1
    half = (longest or config.max_len) // 2
    return [[rng.randrange(low, top) for _ in range(rng.randrange(4, half))]
            for _ in range(count)]


def workload(folder: Path, new_tokens: str, seed: int, longest: int | None = None) -> list[tuple[list[int], int]]:
    """200 (source ids, max_new_tokens) pairs that requests cycle through; `new_tokens`: N or LOW:HIGH."""
    low, _, high = new_tokens.partition(":")
    lengths = random.Random(seed + 1)
    return [(ids, lengths.randint(int(low), int(high or low))) for ids in sources(folder, 200, seed, longest)]

