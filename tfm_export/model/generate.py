"""Reference greedy decoding in eager PyTorch (batched, KV cache, per-row EOS)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.decoding import resolve_max_new_tokens, trim
from ..errors import InputError
from .transformer import Transformer


def check_ids(ids: Tensor, vocab_size: int, what: str) -> None:
    """Raise InputError when any id falls outside [0, vocab_size)."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)][0].item()
        raise InputError(f"{what} id {bad} is out of range for a vocabulary of {vocab_size} ids")


@torch.no_grad()
def greedy_decode(model: Transformer, src_ids: Tensor, max_new_tokens: int | None = None,
                  stop_at_eos: bool = True) -> list[list[int]]:
    """Greedy decoding of a padded (batch, src_len) id tensor; returns each row's ids without BOS/EOS.

    Rows stop at EOS (`stop_at_eos`); the batch stops when every row has. With
    `stop_at_eos=False` every row gets exactly `max_new_tokens` ids (benchmarks).
    """
    cfg = model.config
    check_ids(src_ids, cfg.src_vocab_size, "source")
    if src_ids.shape[1] > cfg.max_len:
        raise InputError(f"source length {src_ids.shape[1]} exceeds the model's max_len ({cfg.max_len}); "
                         f"shorten or split the input")
    steps = resolve_max_new_tokens(max_new_tokens, 1, cfg.max_len)
    batch = src_ids.shape[0]
    memory, src_mask = model.encode(src_ids)
    cross = model.cross_kv(memory)
    past = model.empty_cache(batch, src_ids.device, memory.dtype)
    tokens = torch.full((batch, 1), cfg.bos_id, dtype=torch.long, device=src_ids.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    out = torch.empty(batch, 0, dtype=torch.long, device=src_ids.device)
    for _ in range(steps):
        logits, past = model.decode(tokens, src_mask, cross, past, last_only=True)
        next_ids = logits[:, -1].argmax(-1)  # (batch,)
        if stop_at_eos:
            next_ids = next_ids.masked_fill(done, cfg.tgt_pad_id)
            done = done | (next_ids == cfg.eos_id)
        out = torch.cat([out, next_ids[:, None]], dim=1)  # (batch, steps so far)
        if stop_at_eos and bool(done.all()):
            break
        tokens = next_ids[:, None]  # (batch, 1)
    return [trim(row, cfg.eos_id) if stop_at_eos else row for row in out.tolist()]


@torch.no_grad()
def greedy_decode_full(model: Transformer, src_ids: Tensor, max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding by full recomputation (no cache): the slow oracle for tests."""
    cfg = model.config
    tgt = torch.full((src_ids.shape[0], 1), cfg.bos_id, dtype=torch.long, device=src_ids.device)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool, device=src_ids.device)
    for _ in range(max_new_tokens):
        next_ids = model(src_ids, tgt)[:, -1].argmax(-1).masked_fill(done, cfg.tgt_pad_id)
        done = done | (next_ids == cfg.eos_id)
        tgt = torch.cat([tgt, next_ids[:, None]], dim=1)  # (batch, tgt_len + 1)
        if bool(done.all()):
            break
    return [trim(row, cfg.eos_id) for row in tgt[:, 1:].tolist()]
