"""Torch-free pieces of greedy decoding shared by the eager runner and the ONNX runtime."""

from __future__ import annotations

from typing import Sequence

from .errors import InputError


def pad_batch(sources: Sequence[Sequence[int]], pad_id: int) -> list[list[int]]:
    """Right-pad id lists to one length."""
    if not sources:
        raise InputError("no sources given; pass at least one sequence of token ids")
    width = max(len(s) for s in sources)
    if width == 0:
        raise InputError("every source is empty; pass at least one token id")
    return [list(s) + [pad_id] * (width - len(s)) for s in sources]


def resolve_max_new_tokens(max_new_tokens: int | None, prefix_len: int, max_len: int) -> int:
    """Default to filling the position table; refuse a request that cannot fit."""
    room = max_len - prefix_len + 1  # the last generated token is never fed back
    if max_new_tokens is None:
        return room
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if max_new_tokens > room:
        raise InputError(f"max_new_tokens ({max_new_tokens}) does not fit the model's max_len "
                         f"({max_len}); use at most {room}")
    return max_new_tokens


def trim(row: list[int], eos_id: int) -> list[int]:
    """Cut a generated row at its first EOS (exclusive)."""
    return row[: row.index(eos_id)] if eos_id in row else row
