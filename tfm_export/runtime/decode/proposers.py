"""Who drafts the ids a speculative step checks (runtime.decode.speculative): prompt lookup and a draft model.
Torch-free.

A proposer sees one row's `history` (its decoder input so far: BOS, then every accepted id, the last of them
not yet fed to the model) and returns up to `k` ids that it guesses come next. Whatever it returns, the output
is the model's own greedy output: the speculative step keeps only the ids the model would have picked.

- `PromptLookup`: transformers' PromptLookupCandidateGenerator (`prompt_lookup_num_tokens`,
  `max_matching_ngram_size` 2): the longest n-gram (n <= 2) that ends the history, found first in the source
  (when source ids are target ids: a shared embedding) and then earlier in the history; the ids that followed
  it are the draft, cut before an EOS.
- `DraftModel`: a smaller export of the same vocabulary (transformers' assistant_model), decoding greedily on
  its own growing cache (runtime.states.growing, `feed` and `truncate`), rolled back to the ids the model kept.
  With a `sampler` (speculative sampling, runtime.decode.speculative_sampling) it samples its ids instead,
  under the model's processors and warpers, and reports the distributions q it drew them from.

`probabilities`: the last draft's q (k, vocab), or None where the draft is deterministic (one-hot q).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np

from ...config import TransformerConfig
from ...errors import InputError
from .loop import DecoderCache

MAX_NGRAM = 2  # transformers' max_matching_ngram_size default


class Proposer(Protocol):
    lock: AbstractContextManager[Any]  # what the decode holds besides the model's cache lock
    probabilities: np.ndarray | None  # the last draft's q (k, vocab); None: deterministic (one-hot)

    def start(self, src: np.ndarray) -> None:
        """A new decode of `src` (1, src_len) begins."""
        ...

    def propose(self, history: list[int], k: int) -> list[int]:
        """Up to `k` ids that may follow `history`."""
        ...

    def close(self) -> None:
        ...


def _first_match(haystack: list[int], tail: list[int], k: int, eos_id: int) -> list[int] | None:
    """The ids after the first occurrence of `tail` in `haystack` that leaves some (at most k, cut at EOS)."""
    n = len(tail)
    for start in range(len(haystack) - n + 1):
        if haystack[start:start + n] == tail and start + n < len(haystack):
            found = haystack[start + n:start + n + k]
            return found[:found.index(eos_id)] if eos_id in found else found
    return None


class PromptLookup:
    """Drafts from n-grams of the source and of the output so far (see the module docstring)."""

    lock = nullcontext()
    probabilities = None  # n-gram drafts are certain: q is one-hot

    def __init__(self, config: TransformerConfig, max_ngram: int = MAX_NGRAM):
        self.config, self.max_ngram, self.source = config, max_ngram, []

    def start(self, src: np.ndarray) -> None:
        cfg = self.config
        row = [int(i) for i in np.asarray(src)[0]] if cfg.share_embeddings and cfg.source_kind.ids else []
        while row and row[-1] == cfg.src_pad_id:  # the batch's padding
            row.pop()
        self.source = row

    def propose(self, history: list[int], k: int) -> list[int]:
        for n in range(min(self.max_ngram, len(history) - 1), 0, -1):
            tail = history[-n:]
            for haystack in (self.source, history):
                found = _first_match(haystack, tail, k, self.config.eos_id)
                if found is not None:
                    return found
        return []

    def close(self) -> None:
        pass


class DraftModel:
    """Drafts by greedy decoding (or sampling) with a draft export of the same vocabulary (`check_draft` tells)."""

    def __init__(self, cache: DecoderCache, max_len: int, sampler: Any = None):
        """`cache`: the draft's growing cache; `max_len`: the draft's positions; `sampler`: a
        runtime.decode.speculative_sampling.Sampler to sample with (None: greedy)."""
        self.cache, self.max_len, self.lock, self.sampler = cache, max_len, cache.lock, sampler
        self.probabilities: np.ndarray | None = None
        self.state: Any = None
        self.src: np.ndarray | None = None
        self.fed: list[int] = []  # the ids in the draft's cache

    def start(self, src: np.ndarray) -> None:
        """The draft encodes `src` at its first proposal: a decode whose speculation is switched off
        (runtime.decode.draft_length) never runs the draft, nor pays for its encoder."""
        self.src, self.state, self.fed = src, None, []

    def propose(self, history: list[int], k: int) -> list[int]:
        kept = 0  # the draft's cache keeps what the history still agrees with, and at least one id is fed
        while kept < min(len(self.fed), len(history) - 1) and self.fed[kept] == history[kept]:
            kept += 1
        k, self.probabilities = min(k, self.max_len - len(history)), None
        if k <= 0:
            return []
        if self.state is None:
            self.state = self.cache.start(self.src)
        self.state.truncate(kept)
        self.state.feed(np.array([history[kept:]], dtype=np.int64))  # (1, new ids)
        q: list[np.ndarray] = []
        draft = [self._next(history, q)]
        while len(draft) < k and draft[-1] != self.cache.config.eos_id:
            self.state.step(np.array(draft[-1:], dtype=np.int64))
            draft.append(self._next(history + draft, q))
        self.probabilities = np.stack(q) if q else None
        self.fed = history + draft[:-1]
        return draft

    def _next(self, ids: list[int], q: list[np.ndarray]) -> int:
        """The draft's id after decoder input `ids` (the last one fed): its argmax, or a sample whose
        distribution joins `q`."""
        if self.sampler is None:
            return int(self.state.next_ids()[0])
        token, row = self.sampler.draft(self.state.logits(), ids)
        q.append(row)
        return token

    def close(self) -> None:
        self.state = self.src = None


def check_draft(config: TransformerConfig, tokenizer: dict | None, draft_config: TransformerConfig,
                draft_tokenizer: dict | None) -> None:
    """InputError unless a draft export speaks the model's vocabulary: the same source and target ids, the
    same special ids and, when both carry one, the same tokenizer."""
    fields = ("src_vocab_size", "tgt_vocab_size", "bos_id", "eos_id", "tgt_pad_id", "src_pad_id", "source")
    differ = [f"{name} {getattr(draft_config, name)} != {getattr(config, name)}" for name in fields
              if getattr(draft_config, name) != getattr(config, name)]
    if not differ and tokenizer and draft_tokenizer and tokenizer != draft_tokenizer:
        differ.append("another tokenizer")
    if differ:
        raise InputError(f"the assistant does not share this model's vocabulary ({', '.join(differ)}): a draft "
                         f"model must use the same tokenizer and ids")
