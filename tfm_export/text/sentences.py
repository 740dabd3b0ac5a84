"""Documents as sentences and back: a text split into the sentences a translation model reads one at a time,
each sentence's translation put back between the original whitespace. Torch-free, pure (no model here:
the token count is a function the caller passes).

Why: a sentence-level model (NLLB, Marian, M2M100) given several sentences at once often translates the
first and drops the rest, and a text over the model's max_len cannot be encoded at all. Sentences come
from sentencex (rule-based, ~300 languages through fallbacks; see pyproject.toml for the choice), which
keeps every character: its pieces concatenate to the text. A sentence still over the limit is cut at the
limit (in tokens), at a word boundary when one fits, with a logged warning: a long line without
punctuation (a table row, a list written as one line) is translated in pieces rather than refused.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .iso639 import two_letter

log = logging.getLogger(__name__)

# sentencex's rules for a language it has none for fall back to these (English's abbreviations).
DEFAULT_LANGUAGE = "en"
EDGES = re.compile(r"(\s*)(.*?)(\s*)", re.S)  # leading whitespace, the text, trailing whitespace
WORD_ENDS = re.compile(r"\S+\s*")  # where a cut may go: after a word and its following whitespace


@dataclass(frozen=True)
class Piece:
    """One sentence (or a cut of one) with the whitespace around it, kept as it was."""

    before: str  # whitespace before the text: copied to the output
    text: str  # what is translated; "" for whitespace alone (nothing to translate)
    after: str  # whitespace after the text: copied to the output


def piece(segment: str) -> Piece:
    before, text, after = EDGES.fullmatch(segment).groups()
    return Piece(before, text, after) if text else Piece(segment, "", "")


def split(text: str, language: str | None = None) -> list[Piece]:
    """`text` as sentences (`language`: any code an export uses, eng_Latn or en; its rules when sentencex
    has them, else English's). "".join of each piece's before + text + after is `text`, always."""
    import sentencex

    code = two_letter(language) or DEFAULT_LANGUAGE
    # Cut at the sentences' ends (character offsets): sentencex's own pieces can leave out a paragraph break
    # (1.0.32: "a.\n\nb." as "a." and "b."), its offsets still say where each sentence ends.
    ends = sorted({b["end_index"] for b in sentencex.get_sentence_boundaries(code, text)} - {0} | {len(text)})
    pieces = [piece(text[start:end]) for start, end in zip([0, *ends], ends) if end > start]
    return pieces or [Piece(text, "", "")]


def split_at_limit(text: str, count: Callable[[str], int], limit: int) -> list[Piece]:
    """`text` in pieces of at most `limit` tokens each (`count`: a text's tokens as the model reads it,
    special tokens included): cut after the last word that fits, or inside a word longer than the limit."""
    pieces, rest = [], text
    while rest and count(rest) > limit:
        cut = _longest_prefix(rest, count, limit)
        pieces.append(piece(rest[:cut]))
        rest = rest[cut:]
    return pieces + ([piece(rest)] if rest else [])


def _longest_prefix(text: str, count: Callable[[str], int], limit: int) -> int:
    """The longest prefix of `text` (ending after a word's whitespace, else at a character) that fits."""
    ends = [m.end() for m in WORD_ENDS.finditer(text)]
    fits = _last_fitting(ends, lambda end: count(text[:end].rstrip()) <= limit)
    if fits is not None:
        return fits
    characters = list(range(1, len(text) + 1))
    return _last_fitting(characters, lambda end: count(text[:end]) <= limit) or 1  # never stall: a character


def _last_fitting(cuts: list[int], fits: Callable[[int], bool]) -> int | None:
    """The last of increasing `cuts` that fits (fitting is monotonic: a longer prefix has no fewer tokens)."""
    low, high, best = 0, len(cuts) - 1, None
    while low <= high:
        middle = (low + high) // 2
        if fits(cuts[middle]):
            best, low = cuts[middle], middle + 1
        else:
            high = middle - 1
    return best


def plan(text: str, language: str | None, count: Callable[[str], int], limit: int,
         sentences: bool = True) -> list[Piece]:
    """The pieces to translate for one text: its sentences (or, `sentences=False`, the text whole), each
    over `limit` tokens cut at the limit (logged)."""
    pieces = split(text, language) if sentences else [piece(text)]
    planned = []
    for one in pieces:
        tokens = count(one.text) if one.text else 0
        if tokens <= limit:
            planned.append(one)
            continue
        cuts = split_at_limit(one.text, count, limit)
        log.warning("a sentence of %d tokens is longer than the model's limit of %d: translated in %d pieces cut "
                    "at the limit", tokens, limit, len(cuts))
        first = cuts[0]  # the sentence's own whitespace goes around its first and last cut
        cuts[0] = Piece(one.before + first.before, first.text, first.after)
        cuts[-1] = Piece(cuts[-1].before, cuts[-1].text, cuts[-1].after + one.after)
        planned += cuts
    return planned


def texts_of(pieces: Sequence[Piece]) -> list[str]:
    """The texts to translate, in order (whitespace-only pieces have none)."""
    return [one.text for one in pieces if one.text]


def join(pieces: Sequence[Piece], translations: Sequence[str]) -> str:
    """The document again: each piece's translation (one per piece with text, in order) between its
    original whitespace."""
    it = iter(translations)
    out = [one.before + (next(it) if one.text else "") + one.after for one in pieces]
    if next(it, None) is not None:
        raise ValueError("more translations than sentences")
    return "".join(out)


def by_length(sources: Sequence[Sequence[int]], size: int, decode: Callable[[list[Sequence[int]]], list[Any]]
              ) -> list[Any]:
    """`decode` over the sources `size` at a time in order of length, its rows back in the sources' order.

    Why: a batch pads every source to its longest, and a greedy batch runs until its longest row ends; sentences
    of similar length together waste neither (CTranslate2's translate_iterable sorts each read-ahead the same way).
    Each row is decoded as it would be alone, so the order changes the time, not the translations."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    rows: list[Any] = [None] * len(sources)
    for start in range(0, len(order), size):
        batch = order[start:start + size]
        for i, row in zip(batch, decode([sources[i] for i in batch])):
            rows[i] = row
    return rows
