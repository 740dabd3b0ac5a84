"""Torch-free greedy decoding shared by the eager runner and the ONNX runtime: one loop, one bookkeeping.

`greedy_loop` drives a `DecoderCache` (how a backend keeps its decoder state: the growing and the
static ORT caches in runtime.cache / runtime.static, the eager model in model.generate) and records
the chosen ids with `GreedyRows`.
"""

from __future__ import annotations

import operator
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol, Sequence

import numpy as np

from ..config import TransformerConfig
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


class GreedyRows:
    """The ids chosen so far by a batched greedy loop over numpy next_ids.

    With `stop_at_eos`, a row that has emitted EOS gets `pad_id` from then on and the loop can stop
    once every row has ended (`finished`).
    """

    def __init__(self, batch: int, steps: int, eos_id: int, pad_id: int, stop_at_eos: bool):
        self.out = np.empty((batch, steps), dtype=np.int64)  # (batch, steps)
        self.done = np.zeros(batch, dtype=bool)
        self.eos_id, self.pad_id, self.stop_at_eos = eos_id, pad_id, stop_at_eos
        self.taken = 0

    def add(self, next_ids: np.ndarray) -> np.ndarray:
        """Record one step's (batch,) ids; returns them as fed back (finished rows padded)."""
        if self.stop_at_eos:
            next_ids = np.where(self.done, self.pad_id, next_ids)
            self.done |= next_ids == self.eos_id
        self.out[:, self.taken] = next_ids
        self.taken += 1
        return next_ids

    @property
    def finished(self) -> bool:
        return self.stop_at_eos and bool(self.done.all())

    def rows(self) -> list[list[int]]:
        return self.out[:, : self.taken].tolist()


class DecodeTimings:
    """Wall-clock times of one generate call (benchmarks pass one in; normal calls do not)."""

    def __init__(self) -> None:
        self.encoder_s = 0.0
        self.steps_s: list[float] = []


class DecoderState(Protocol):
    """One generate call's decoder state, after its sources were encoded."""

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed (batch, 1) int64 ids; returns the step's next_ids (batch,) on the host."""
        ...


class DecoderCache(Protocol):
    """A decoder with its cache policy: `start` encodes a batch; `lock` guards shared buffers."""

    lock: AbstractContextManager[Any]

    def start(self, src: Any) -> DecoderState:
        """Encode padded source ids (batch, src_len) and return the state to step."""
        ...


def greedy_loop(cache: DecoderCache, src: Any, steps: int, config: TransformerConfig, stop_at_eos: bool,
                timings: DecodeTimings | None = None, first_token: int | None = None) -> list[list[int]]:
    """Greedy decoding of `src` (batch, src_len) for up to `steps` tokens; rows as generated (EOS kept).

    Rows start from config.bos_id; `first_token` replaces the first step's ids (forced_bos_token_id);
    `timings` gets the encoder's time and each step's.
    """
    batch = src.shape[0]
    with cache.lock:
        start = time.perf_counter()
        state = cache.start(src)
        if timings is not None:
            timings.encoder_s = time.perf_counter() - start
        tokens = np.full((batch, 1), config.bos_id, dtype=np.int64)  # (batch, tgt_len=1)
        rows = GreedyRows(batch, steps, config.eos_id, config.tgt_pad_id, stop_at_eos)
        for step in range(steps):
            start = time.perf_counter() if timings is not None else 0.0
            chosen = state.step(tokens)  # (batch,)
            if step == 0 and first_token is not None:
                chosen = np.full_like(chosen, first_token)
            next_ids = rows.add(chosen)
            if timings is not None:
                timings.steps_s.append(time.perf_counter() - start)
            if rows.finished:
                break
            tokens = next_ids.reshape(batch, 1).astype(np.int64)  # (batch, tgt_len=1)
        return rows.rows()
