"""The PyTorch model: KV-cache decoding equals the teacher-forced forward; padding is ignored."""

import itertools

import pytest
import torch
from torch import Tensor

from tfm_export.config import PRESETS
from tfm_export.model.generate import greedy_decode
from tfm_export.runtime.sources import trim
from tfm_export.model.transformer import Transformer

VARIANTS = list(itertools.product([False, True], ["sinusoidal", "learned", "sinusoidal_concat"]))


def make_model(norm_first: bool, positions: str, seed: int = 0, **changes) -> Transformer:
    torch.manual_seed(seed)
    cfg = PRESETS["tiny"].replace(norm_first=norm_first, positions=positions, final_norm=norm_first, **changes)
    return Transformer(cfg).eval()


def padded_source(batch: int = 3, length: int = 9, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 64, (batch, length), generator=gen)
    src[1, 6:] = 0
    src[2, 2:] = 0
    return src


@pytest.mark.parametrize("norm_first, positions", VARIANTS)
@torch.no_grad()
def test_incremental_decoding_equals_teacher_forcing(norm_first, positions):
    model = make_model(norm_first, positions)
    src = padded_source()
    tgt = torch.randint(3, 64, (3, 8), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = model.config.bos_id
    full = model(src, tgt)
    memory, mask = model.encode(src)
    cross, past = model.cross_kv(memory), model.empty_cache(3)
    steps = []
    # Mixed chunk sizes: single tokens and a forced prefix of 3 tokens.
    for start, stop in [(0, 3), (3, 4), (4, 5), (5, 8)]:
        logits, past = model.decode(tgt[:, start:stop], mask, cross, past)
        steps.append(logits)
    incremental = torch.cat(steps, dim=1)
    assert past[0][0].shape == (3, model.config.n_heads, 8, model.config.head_dim)
    assert torch.allclose(full, incremental, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first, positions", VARIANTS)
@torch.no_grad()
def test_pad_positions_never_change_real_outputs(norm_first, positions):
    model = make_model(norm_first, positions)
    src = padded_source()
    tgt = torch.full((3, 5), 5)
    tgt[:, 0] = model.config.bos_id
    reference = model(src, tgt)
    # More padding behind the real tokens...
    longer = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    assert torch.allclose(reference, model(longer, tgt), atol=1e-5, rtol=0)
    # ...and different vectors at the pad positions change nothing either.
    model.src_embed.tokens.weight[model.config.src_pad_id].normal_()
    assert torch.allclose(reference, model(src, tgt), atol=1e-5, rtol=0)
    # A control: changing a real token does change the output.
    changed = src.clone()
    changed[0, 0] = (int(changed[0, 0]) + 1) % 64 or 1
    assert not torch.allclose(reference, model(changed, tgt), atol=1e-5)


@torch.no_grad()
def test_greedy_with_cache_equals_full_recomputation():
    model = make_model(False, "sinusoidal", seed=3)
    src = padded_source()
    assert greedy_decode(model, src, 12) == greedy_decode_full(model, src, 12)


@torch.no_grad()
def test_greedy_stops_per_row_at_eos():
    model = make_model(True, "learned", seed=4)
    src = padded_source()
    free = greedy_decode(model, src, 10, stop_at_eos=False)
    # Make the token row 0 emits at step 2 the EOS id: row 0 must stop there, others run on.
    eos = free[0][2]
    stopping = make_model(True, "learned", seed=4, eos_id=eos)
    rows = greedy_decode(stopping, src, 10)
    assert rows[0] == free[0][:2]
    for got, ref in zip(rows, free):
        assert got == (ref[: ref.index(eos)] if eos in ref else ref)


def test_suppressed_ids_are_never_generated():
    model = make_model(False, "sinusoidal", seed=5)
    free = greedy_decode(model, padded_source(), 8, stop_at_eos=False)
    banned = free[0][0]
    suppressed = make_model(False, "sinusoidal", seed=5, suppress_ids=(banned,))
    rows = greedy_decode(suppressed, padded_source(), 8, stop_at_eos=False)
    assert all(banned not in row for row in rows)


def test_shared_and_tied_embeddings_share_storage():
    model = make_model(False, "sinusoidal", share_embeddings=True, tie_output=True)
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.lm_head.weight is model.tgt_embed.tokens.weight


# The slow oracle of the cached decoding above (test-only, so it lives here, not in the package).
@torch.no_grad()
def greedy_decode_full(model: Transformer, src: Tensor, max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding by full recomputation (no cache): the slow oracle for tests."""
    cfg = model.config
    tgt = torch.full((src.shape[0], 1), cfg.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_new_tokens):
        next_ids = model.pick(model(src, tgt)[:, -1]).masked_fill(done, cfg.tgt_pad_id)
        done = done | (next_ids == cfg.eos_id)
        tgt = torch.cat([tgt, next_ids[:, None]], dim=1)  # (batch, tgt_len + 1)
        if bool(done.all()):
            break
    return [trim(row, cfg.eos_id) for row in tgt[:, 1:].tolist()]
