"""Beam search bookkeeping with transformers' semantics (its `_beam_search`), in numpy. Torch-free.

Per source b, `num_beams` K running beams; each step, for decoder row (b, k):
1. scores = log_softmax(logits) (float64), then runtime.decode.processors (the generic ones, then the
   caller's `processors` list), plus the beam's running score;
2. the 2K best (beam, token) candidates of source b over all K * vocab, best first; equal scores
   go to the lower flat index k * vocab + token (`top_k`, the one tie rule; ports must keep it);
3. a candidate "finishes" when its token is EOS or the step is the last one (max_new_tokens);
4. the next running beams are the K best candidates after subtracting 1e9 from finished ones
   (so finished candidates run on only when fewer than K others exist), in candidate order;
5. candidates among the first K that finish enter the source's K finished slots with score
   sum(log p) / (generated length, EOS included) ** length_penalty, unless the source is closed
   (below) or, with early_stopping True, its slots are all finished; slots keep the K best
   (existing slots first on equal scores), as transformers does with the same -1e9 offsets;
6. the source closes when all its slots are finished and its best running score divided by
   length ** length_penalty cannot beat the worst slot (length: the tokens generated so far, or
   max_new_tokens when early_stopping is "never" and length_penalty > 0);
7. the search ends when every source is closed, or (early_stopping True) every slot is finished, or
   every candidate of the step finished.
The result per source is its slots, best first. Cache rows follow their beams: `advance` returns
for each next decoder row the row it continues (`beam_idx`), which the caller gathers on the device.

Two ways in, one selection (`_select`, steps 2-7): `advance_logits` takes the logits (rows, vocab) to
the host (any processor; the eager runner); `advance_top` takes each row's 2K best log-probabilities
and ids, picked on the device by runtime.states.head under `head_key` (processors.bias_key; ONNX Runtime, when
no processor needs the whole row), so that only (rows, 2K) ids and scores cross. `advance` picks
between them for a step of runtime.decode.loop. Both give the same
candidates: a source's 2K best are among each of its rows' 2K best, and adding a row's running score
keeps the row's order. (Only a float64 rounding of `logp + running score` that makes two distinct values equal
at the 2K-th place could pick another id; `advance_logits` ranks after the addition, as transformers does.)

Scores are float64 throughout (transformers uses float32: only exact near-ties can differ, the tests
show equal tokens and scores within 1e-4). A port (runtimes/) computing log_softmax with a plain
sequential sum may differ from numpy's pairwise sum in the last bits, likewise only on near-ties.
Banned ids (the model's suppress_ids) are banned after log_softmax, as transformers does; with
renormalize_logits the scores are log-softmaxed again after every processor (runtime.decode.processors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..options.generation import GenerationConfig, Hypothesis
from .processors import BiasKey, Processors, bias_key, log_softmax, needs_rows, process, process_top

OFFSET = 1e9  # transformers' "very large negative value" for excluded candidates and empty slots


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """(rows, n) -> (rows, k) indices of the k largest per row, best first; ties: the lower index first."""
    rows = np.arange(scores.shape[0])[:, None]
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # the k best in some order
    kth = scores[rows, part].min(axis=1)
    tied = np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k)
    for r in tied:  # the k-th value is shared beyond the k chosen: take the tied ones by index
        above = np.flatnonzero(scores[r] > kth[r])
        part[r] = np.concatenate([above, np.flatnonzero(scores[r] == kth[r])[: k - len(above)]])
    values = scores[rows, part]
    return np.take_along_axis(part, np.lexsort((part, -values), axis=1), axis=1)


def _stable_best(values: np.ndarray, k: int) -> np.ndarray:
    """(rows, n) -> (rows, k): positions of the k largest, equal values in position order."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]


def _take(array: np.ndarray, index: np.ndarray) -> np.ndarray:
    """array (batch, n, ...) gathered along axis 1 by index (batch, m)."""
    return np.take_along_axis(array, index.reshape(index.shape + (1,) * (array.ndim - 2)), axis=1)


class BeamSearch:
    """The state of one batched beam search; `advance` takes each step (see the module docstring)."""

    def __init__(self, batch: int, steps: int, config: GenerationConfig, bos_id: int, eos_id: int, pad_id: int,
                 banned: tuple[int, ...] = (), vocab: int | None = None, *, processors: Processors = (),
                 prompt: np.ndarray | None = None):
        """`vocab`: the target vocabulary's size (for `advance` from the device's candidates). `processors`:
        runtime.decode.processors.LogitsProcessor run after the generic ones (on the host path); `prompt`:
        (rows, length) each row's decoder input before its first generated id, the head of the processors'
        history (default: BOS; a wrapper that forces a prompt, runtime.speech.search, sets it)."""
        k = config.num_beams
        self.batch, self.k, self.steps, self.config, self.vocab = batch, k, steps, config, vocab
        self.bos_id, self.eos_id, self.banned = bos_id, eos_id, banned  # banned: the model's suppress_ids
        self.rows = batch * k  # decoder rows: source b's beams are rows b*K .. b*K + K-1
        self.processors = tuple(processors)
        self.prompt = np.full((self.rows, 1), bos_id, dtype=np.int64) if prompt is None else prompt
        self.run_ids = np.full((batch, k, steps), pad_id, dtype=np.int64)  # (batch, beams, steps)
        self.run_scores = np.zeros((batch, k))  # only beam 0 starts live: the K beams are the same row
        self.run_scores[:, 1:] = -OFFSET
        self.slot_ids = np.full((batch, k, steps), pad_id, dtype=np.int64)
        self.slot_len = np.zeros((batch, k), dtype=np.int64)
        self.slot_scores = np.full((batch, k), -OFFSET)
        self.slot_done = np.zeros((batch, k), dtype=bool)
        self.open = np.ones(batch, dtype=bool)  # the source can still improve (transformers' heuristic)
        self.finished = False
        self.step = 0
        self.whole_rows = needs_rows(config, self.processors)  # repetition penalty, n-grams, processors: the host

    def history(self) -> np.ndarray:
        """(rows, prompt + step) each decoder row's input so far, its prompt (BOS) first (for the processors).
        A beam's prompt is its source's: beams of one source share it, so reordering them leaves it as it is."""
        ids = self.run_ids[:, :, : self.step].reshape(self.rows, self.step)
        return np.concatenate([self.prompt, ids], axis=1)

    @property
    def width(self) -> int:
        """Candidates per decoder row: 2K (a source's 2K best can all come from one beam)."""
        return 2 * self.k

    def head_key(self) -> BiasKey | None:
        """The step's ban as processors.bias_key for the device-side head (None: a processor needs the whole
        row, so `advance` takes the logits); in-flight groups with equal keys share one head run."""
        if self.whole_rows:
            return None
        return bias_key(self.step, self.steps - 1, self.config, self.eos_id, self.banned)

    def advance(self, view: Any) -> tuple[np.ndarray, np.ndarray]:
        """One step of a runtime.decode.loop.StepView: from the rows' best candidates picked on the device
        when the state can and no processor needs whole rows, else from the logits on the host."""
        key = self.head_key()
        if key is not None and view.device_top:
            logp, ids = view.top(key, self.width, self.config.renormalize_logits)
            return self.advance_top(logp, ids, self.vocab)
        return self.advance_logits(view.logits())

    def advance_logits(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step from (rows, vocab) logits -> (next ids (rows,), beam_idx (rows,): the row each continues)."""
        scores = process(log_softmax(logits), self.history(), self.step, self.steps - 1, self.config, self.eos_id,
                         self.banned, self.processors)
        scores += self.run_scores.reshape(-1, 1)  # (rows, vocab)
        # The 2K best of a source are among the 2K best of each of its beams: select per row first.
        per_row = top_k(scores, self.width)  # (rows, 2K) token ids
        return self._select(np.take_along_axis(scores, per_row, axis=1), per_row, scores.shape[1])

    def advance_top(self, logp: np.ndarray, ids: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """`advance` from each row's 2K best log-probabilities (rows, 2K) float64 and their ids, best
        first, under `head_key` (runtime.states.head): the same candidates without the whole rows."""
        logp = process_top(logp, ids, self.step, self.steps - 1, self.config, self.eos_id)
        return self._select(logp + self.run_scores.reshape(-1, 1), ids, vocab)

    def _select(self, values: np.ndarray, per_row: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2-7 from each row's 2K best running scores `values` (rows, 2K) and their token ids."""
        b, k, step = self.batch, self.k, self.step
        flat = (per_row + (np.arange(self.rows) % k)[:, None] * vocab).reshape(b, k * 2 * k)
        values = values.reshape(b, k * 2 * k)
        chosen = _ordered(values, flat, 2 * k)  # (batch, 2K) positions in values
        cand = np.take_along_axis(flat, chosen, axis=1)  # (batch, 2K) flat ids, best first
        cand_scores = np.take_along_axis(values, chosen, axis=1)
        cand_beam, cand_tok = cand // vocab, cand % vocab
        hits = (cand_tok == self.eos_id) | (step == self.steps - 1)
        cand_ids = _take(self.run_ids, cand_beam)  # (batch, 2K, steps)
        cand_ids[:, :, step] = cand_tok
        self._finish(cand_ids, cand_scores, hits)
        adjusted = cand_scores - OFFSET * hits
        nxt = _stable_best(adjusted, k)  # (batch, K)
        self.run_ids = _take(cand_ids, nxt)
        self.run_scores = np.take_along_axis(adjusted, nxt, axis=1)
        beam_idx = (np.arange(b)[:, None] * k + np.take_along_axis(cand_beam, nxt, axis=1)).reshape(-1)
        self.step += 1
        self._close(hits)
        return self.run_ids[:, :, step].reshape(-1), beam_idx

    def _finish(self, cand_ids: np.ndarray, cand_scores: np.ndarray, hits: np.ndarray) -> None:
        """Step 5: merge the finishing candidates into the slots."""
        k, cfg, length = self.k, self.config, self.step + 1
        just = hits & (np.arange(2 * k) < k)[None, :]  # only the first K candidates may finish
        full = self.slot_done.all(axis=1) & (cfg.early_stopping is True)
        scores = cand_scores / float(length) ** cfg.length_penalty
        scores = scores - OFFSET * full[:, None] - OFFSET * ~self.open[:, None] - OFFSET * ~just
        merged = np.concatenate([self.slot_scores, scores], axis=1)  # (batch, 3K)
        best = _stable_best(merged, k)
        self.slot_scores = np.take_along_axis(merged, best, axis=1)
        self.slot_ids = _take(np.concatenate([self.slot_ids, cand_ids], axis=1), best)
        lengths = np.concatenate([self.slot_len, np.full(cand_scores.shape, length)], axis=1)
        self.slot_len = np.take_along_axis(lengths, best, axis=1)
        self.slot_done = np.take_along_axis(np.concatenate([self.slot_done, just], axis=1), best, axis=1)

    def _close(self, hits: np.ndarray) -> None:
        """Steps 6 and 7, after the step (`self.step` is now the number of generated tokens)."""
        cfg = self.config
        never = cfg.early_stopping == "never"
        length = self.steps if never and cfg.length_penalty > 0 else self.step
        best = self.run_scores[:, :1] / float(length) ** cfg.length_penalty  # (batch, 1)
        worst = np.where(self.slot_done, self.slot_scores.min(axis=1, keepdims=True), -OFFSET)
        self.open &= (best > worst).any(axis=1)
        all_full = bool(self.slot_done.all()) and cfg.early_stopping is True
        self.finished = not self.open.any() or all_full or bool(hits.all()) or self.step == self.steps

    def results(self) -> list[list[Hypothesis]]:
        """Each source's best `num_return_sequences` slots, best first; ids without BOS and EOS."""
        out = []
        for b in range(self.batch):
            hyps = []
            for s in range(self.config.num_return_sequences):
                ids = self.slot_ids[b, s, : self.slot_len[b, s]].tolist()
                hyps.append(Hypothesis(ids[:-1] if ids and ids[-1] == self.eos_id else ids,
                                       float(self.slot_scores[b, s])))
            out.append(hyps)
        return out


def _ordered(values: np.ndarray, flat: np.ndarray, k: int) -> np.ndarray:
    """(batch, n) candidate scores with their flat ids -> positions of the k best; ties: lower flat id."""
    order = np.lexsort((flat, -values), axis=1)
    return order[:, :k]
