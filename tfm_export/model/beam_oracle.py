"""A plain eager beam search: the slow oracle that runtime.decode.beam (and an export's default decoding) is
checked against.

One source at a time, no KV cache (the whole target prefix goes through the decoder every step),
Python lists for beams and hypotheses, and the rules of transformers' beam search (runtime.decode.beam's
docstring) written one by one. The logits processors (min_new_tokens, forced BOS/EOS, repetition
penalty, n-gram bans, bans) are runtime.decode.processors' `process`, tested on their own against
transformers'; everything after them (candidates, finished slots, stopping) is written here again.

`given(source, prefix)` may supply the logits of a prefix (another runner's, recorded as it
decoded): the oracle then decides on those, so that two searches that agree see bit-identical
inputs, and `report` records how far they are from the eager model's logits of the same prefixes
(the graphs' error) and whether a prefix was missing (the searches went apart).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from ..runtime.options.generation import GenerationConfig, Hypothesis
from ..runtime.decode.processors import log_softmax, process
from .transformer import Transformer

NEG = -1e9  # transformers' offset for excluded candidates and empty slots
Given = Callable[[int, tuple[int, ...]], np.ndarray | None]  # (source, prefix) -> logits (vocab,), or None


@torch.no_grad()
def beam_search_oracle(model: Transformer, source: Tensor, steps: int, config: GenerationConfig,
                       given: Given | None = None, report: dict[str, Any] | None = None) -> list[list[Hypothesis]]:
    """Beam search of each row of a padded (batch, src_len) id tensor, for up to `steps` tokens."""
    report = report if report is not None else {}
    report.update(max_abs=0.0, max_ref=0.0, missing=0)
    return [_one_source(model, source[i:i + 1], steps, config, _logits_of(i, given, report))
            for i in range(source.shape[0])]


def _logits_of(source: int, given: Given | None, report: dict[str, Any]) -> Callable[[Tensor, np.ndarray], np.ndarray]:
    """The logits each beam decides on: the given ones where there are (their distance to eager's noted)."""
    def pick(tgt: Tensor, eager: np.ndarray) -> np.ndarray:
        if given is None:
            return eager
        rows = [given(source, tuple(prefix)) for prefix in tgt.tolist()]
        if any(row is None for row in rows):
            report["missing"] += 1
            return eager
        chosen = np.stack(rows).astype(np.float64)
        report["max_abs"] = max(report["max_abs"], float(np.abs(chosen - eager).max()))
        report["max_ref"] = max(report["max_ref"], float(np.abs(eager).max()))
        return chosen

    return pick


def _logits(model: Transformer, memory: Tensor, src_mask: Tensor, tgt: Tensor) -> np.ndarray:
    """(K, vocab) float64 logits of the next token after each beam's prefix `tgt` (K, 1 + step)."""
    k = tgt.shape[0]
    cross = model.cross_kv(memory.expand(k, -1, -1))  # (K, src_len, d_model) per layer
    logits, _ = model.decode(tgt, src_mask.expand(k, -1), cross, model.empty_cache(k), last_only=True)
    return logits.double().numpy()


def _candidates(logp: Tensor, beams: list[tuple[list[int], float]], k: int) -> list[tuple[float, int, int, int]]:
    """The 2K best (score, flat index, beam, token) over every beam's tokens, best first; ties: lower flat index.

    A beam's 2K best are enough (the source's 2K best are among them); ids tied with its 2K-th are kept."""
    vocab, candidates = logp.shape[1], []
    for b, (_, score) in enumerate(beams):
        row = logp[b] + score
        kth = torch.topk(row, min(2 * k, vocab)).values[-1]
        for t in torch.nonzero(row >= kth).flatten().tolist():
            candidates.append((float(row[t]), b * vocab + t, b, t))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    return candidates[: 2 * k]


def _one_source(model: Transformer, src: Tensor, steps: int, config: GenerationConfig,
                pick: Callable[[Tensor, np.ndarray], np.ndarray]) -> list[Hypothesis]:
    cfg, k, lp = model.config, config.num_beams, config.length_penalty
    memory, src_mask = model.encode(src)  # (1, src_len, d_model), (1, src_len)
    beams = [([], 0.0 if i == 0 else NEG) for i in range(k)]  # (ids, running score); beam 0 alone is live
    slots: list[tuple[float, list[int], bool]] = [(NEG, [], False)] * k  # (score, ids, finished)
    still_open = True
    for step in range(steps):
        tgt = torch.tensor([[cfg.bos_id] + ids for ids, _ in beams])  # (K, 1 + step)
        logits = pick(tgt, _logits(model, memory, src_mask, tgt))
        scores = process(log_softmax(logits), tgt.numpy(), step, steps - 1, config, cfg.eos_id, cfg.suppress_ids)
        candidates = _candidates(torch.from_numpy(scores), beams, k)
        full = all(done for _, _, done in slots) and config.early_stopping is True
        new_slots = list(slots)
        running = []
        for rank, (score, _, b, t) in enumerate(candidates):
            ids = beams[b][0] + [t]
            ends = t == cfg.eos_id or step == steps - 1
            if ends and rank < k:
                normalised = score / (step + 1) ** lp
                penalty = NEG * full + NEG * (not still_open)
                new_slots.append((normalised + penalty, ids, True))
            running.append((score + NEG * ends, rank, ids))
        running.sort(key=lambda r: (-r[0], r[1]))
        beams = [(ids, score) for score, _, ids in running[:k]]
        order = sorted(range(len(new_slots)), key=lambda i: (-new_slots[i][0], i))
        slots = [new_slots[i] for i in order[:k]]
        length = steps if config.early_stopping == "never" and lp > 0 else step + 1
        best = beams[0][1] / length ** lp
        worst = min(s for s, _, _ in slots)
        still_open = still_open and any(best > (worst if done else NEG) for _, _, done in slots)
        all_ended = all(c[3] == cfg.eos_id or step == steps - 1 for c in candidates)
        if not still_open or all_ended or (config.early_stopping is True and all(d for _, _, d in slots)):
            break
    return [Hypothesis(ids[:-1] if ids and ids[-1] == cfg.eos_id else ids, score)
            for score, ids, _ in slots[: config.num_return_sequences]]
