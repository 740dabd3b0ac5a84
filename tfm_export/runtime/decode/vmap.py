"""CTranslate2's vocabulary map (`use_vmap`): the target tokens a batch of sources can plausibly need. Torch-free.

A map holds, per source token, the target tokens that translations of sentences with it use most, and a fixed
set of frequent target tokens (CTranslate2's lines with an empty source). A batch's shortlist is the union of
its source tokens' candidates, the fixed set and the model's own tokens (EOS, the decoder start, a forced first
token): the output head then scores only those (runtime.states.shortlist), which CTranslate2 reports as +31 %
on CPU for large vocabularies. Tokens out of the shortlist can never be chosen, so a map too narrow changes
translations: `from_pairs` builds one from parallel data (ids) by co-occurrence, keeping for each source token
its `per_token` target tokens that its presence makes most likely (P(target token in the translation | source
token in the sentence) - P(target token in a translation), when above 0), and the `frequent` most common target
tokens (what every sentence needs: they would otherwise rank low everywhere).

Files: JSON `{"fixed": [ids], "map": {"source id": [target ids]}}` (`save`/`load`), or CTranslate2's text
format (`load_ct2`: one line per source token, `source<TAB>target target ...`; an empty source for the fixed
set) with the tokenizer's piece-to-id lookups.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from ...errors import InputError


@dataclass(frozen=True)
class VocabularyMap:
    """Source id -> candidate target ids, and the target ids every shortlist has (see the module docstring)."""

    fixed: tuple[int, ...] = ()
    candidates: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def shortlist(self, sources: Iterable[Sequence[int]], always: Iterable[int] = ()) -> np.ndarray:
        """(S,) int64 sorted: the fixed set, each source token's candidates, and `always` (the model's own)."""
        ids = set(self.fixed) | {int(i) for i in always}
        for row in sources:
            for token in row:
                ids.update(self.candidates.get(int(token), ()))
        return np.array(sorted(ids), dtype=np.int64)

    @classmethod
    def from_pairs(cls, sources: Iterable[Sequence[int]], targets: Iterable[Sequence[int]], per_token: int = 40,
                   frequent: int = 100) -> "VocabularyMap":
        """A map from parallel data (source ids, target ids) by co-occurrence within a pair (module docstring)."""
        together: dict[int, Counter] = {}
        seen, in_pairs, total, pairs = Counter(), Counter(), Counter(), 0
        for src, tgt in zip(sources, targets):
            words = set(int(t) for t in tgt)
            pairs += 1
            in_pairs.update(words)
            total.update(int(t) for t in tgt)
            for token in set(int(s) for s in src):
                seen[token] += 1
                together.setdefault(token, Counter()).update(words)
        candidates = {}
        for token, counts in together.items():
            # P(t in the translation | token in the source) above P(t in a translation): what the token brings
            lift = {t: c / seen[token] - in_pairs[t] / pairs for t, c in counts.items()}
            best = sorted(lift, key=lambda t: (-lift[t], t))[:per_token]
            candidates[token] = tuple(sorted(t for t in best if lift[t] > 0))
        return cls(tuple(sorted(t for t, _ in total.most_common(frequent))), candidates)

    def save(self, path: str | Path) -> None:
        data = {"fixed": list(self.fixed), "map": {str(s): list(t) for s, t in sorted(self.candidates.items())}}
        Path(path).write_text(json.dumps(data), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "VocabularyMap":
        """A map saved by `save` (InputError naming the file when it is not one)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(tuple(int(i) for i in data.get("fixed", ())),
                       {int(s): tuple(int(i) for i in t) for s, t in data.get("map", {}).items()})
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise InputError(f"{path} is not a vocabulary map ({{\"fixed\": [...], \"map\": {{...}}}}): {exc}") from None

    @classmethod
    def load_ct2(cls, path: str | Path, source_id: Callable[[str], int | None],
                 target_id: Callable[[str], int | None]) -> "VocabularyMap":
        """CTranslate2's vmap text file, its tokens looked up with `source_id`/`target_id` (unknown ones dropped).
        Lines whose source is several tokens (CTranslate2's phrases) count for each of their tokens."""
        fixed: set[int] = set()
        candidates: dict[int, set[int]] = {}
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"cannot read the vocabulary map {path}: {exc.strerror}") from None
        for line in lines:
            source, _, target = line.partition("\t")
            ids = {i for i in map(target_id, target.split()) if i is not None}
            keys = [i for i in map(source_id, source.split()) if i is not None]
            if not source.strip():
                fixed |= ids
            for key in keys:
                candidates.setdefault(key, set()).update(ids)
        return cls(tuple(sorted(fixed)), {k: tuple(sorted(v)) for k, v in candidates.items()})
