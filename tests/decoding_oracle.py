"""Eager greedy and beam search written once for the tests, over any `next_logp(prefixes)`: the (n, vocab)
float64 log-probabilities of the token after each prefix (BOS first). The users' own models (seed_models,
seed_speech) plug their own forward passes in, so that an export's tokens are compared with decoding that
shares no code with tfm_export."""

from __future__ import annotations

from typing import Callable

import torch

NextLogp = Callable[[list[list[int]]], torch.Tensor]


def greedy(next_logp: NextLogp, steps: int, bos: int, eos: int) -> list[int]:
    ids: list[int] = []
    for _ in range(steps):
        token = int(next_logp([[bos] + ids])[0].argmax())
        if token == eos:
            break
        ids.append(token)
    return ids


def beam(next_logp: NextLogp, steps: int, k: int, bos: int, eos: int) -> list[int]:
    """Beam search with transformers' rules (length_penalty 1, early_stopping False): each step the 2k
    best continuations; those ending (EOS, or the last step) among the first k are scored by their
    length, the best k others run on; done when k have ended and no running beam can beat the worst."""
    beams: list[tuple[list[int], float]] = [([], 0.0)]
    ended: list[tuple[float, list[int]]] = []
    for step in range(steps):
        logp = next_logp([[bos] + ids for ids, _ in beams])
        candidates = sorted(((score + float(logp[b, t]), b, t) for b, (_, score) in enumerate(beams)
                             for t in range(logp.shape[1])), key=lambda c: -c[0])[: 2 * k]
        running = []
        for rank, (score, b, t) in enumerate(candidates):
            ids = beams[b][0] + [t]
            if t == eos or step == steps - 1:
                if rank < k:
                    ended.append((score / len(ids), ids))
            elif len(running) < k:
                running.append((ids, score))
        ended = sorted(ended, key=lambda e: -e[0])[:k]
        beams = running
        if not beams or (len(ended) == k and beams[0][1] / (step + 1) <= ended[-1][0]):
            break
    best = ended[0][1]
    return best[:-1] if best[-1] == eos else best
