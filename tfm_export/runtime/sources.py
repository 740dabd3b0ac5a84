"""What a decode starts from and how long it may run: the source checks of every runner. Torch-free.

Token ids are the encoder input of every model today (export.specs.TOKEN_IDS, read back as
Manifest.encoder_input); `source_batch` pads and checks them once for the ONNX and eager runners.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from ..errors import InputError

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def pad_batch(sources: Sequence[Sequence[int]], pad_id: int) -> list[list[int]]:
    """Right-pad id lists to one length; anything but lists of int64 ids is an InputError."""
    if len(sources) == 0:
        raise InputError("no sources given; pass at least one sequence of token ids")
    rows = [_ids(source, n) for n, source in enumerate(sources, 1)]
    width = max(len(r) for r in rows)
    if width == 0:
        raise InputError("every source is empty; pass at least one token id")
    return [r + [pad_id] * (width - len(r)) for r in rows]


def _ids(source: Sequence[int], n: int) -> list[int]:
    """One source as Python ints (numpy cannot hold ids beyond int64: OverflowError otherwise)."""
    try:
        ids = [operator.index(i) for i in source]
    except TypeError:
        raise InputError(f"source {n} is not a list of integer token ids") from None
    if any(not INT64_MIN <= i <= INT64_MAX for i in ids):  # no str(id): huge ints cannot be printed
        raise InputError(f"source {n} has a token id out of range (beyond 64-bit integers)")
    return ids


def source_batch(sources: Sequence[Sequence[int]], config: Any) -> np.ndarray:
    """Sources padded into one (batch, src_len) int64 array, checked against the model's vocabulary and
    max_len: the one source check of every runner (ONNX Runtime and eager)."""
    src = np.asarray(pad_batch(sources, config.src_pad_id), dtype=np.int64)  # (batch, src_len)
    bad = src[(src < 0) | (src >= config.src_vocab_size)]
    if bad.size:
        raise InputError(f"source id {int(bad[0])} is out of range for a vocabulary of "
                         f"{config.src_vocab_size} ids")
    if src.shape[1] > config.max_len:
        raise InputError(f"source length {src.shape[1]} exceeds the model's max_len ({config.max_len}); "
                         f"shorten or split the input")
    return src


def resolve_max_new_tokens(max_new_tokens: int | None, prefix_len: int, max_len: int,
                           limit: str = "the model's max_len") -> int:
    """Default to filling the position table; refuse a request that cannot fit."""
    room = max_len - prefix_len + 1  # the last generated token is never fed back
    if max_new_tokens is None:
        return room
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if max_new_tokens > room:
        raise InputError(f"max_new_tokens ({max_new_tokens}) does not fit {limit} ({max_len}); use at most {room}")
    return max_new_tokens


def trim(row: list[int], eos_id: int) -> list[int]:
    """Cut a generated row at its first EOS (exclusive)."""
    return row[: row.index(eos_id)] if eos_id in row else row
