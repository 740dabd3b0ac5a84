"""Which language a text is in, among the codes an export reads: LibreTranslate's /detect and source "auto".
Torch-free. The identifier is py3langid's (the model ships in its wheel: nothing is downloaded; see
pyproject.toml for the choice), restricted to the candidates' languages, so the answer is always a code the
export takes (eng_Latn, en_XX or en, whichever it uses), as LibreTranslate answers among its installed
languages.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Sequence

from .iso639 import two_letter

log = logging.getLogger(__name__)

TOP = 3  # candidates answered, as LibreTranslate's detector answers at most three


@functools.lru_cache(maxsize=16)
def identifier(languages: tuple[str, ...] | None) -> Any:
    """py3langid's identifier with probabilities, restricted to `languages` (its codes; None: all of them).
    One per language set: restricting mutates an identifier, so requests never share one across sets."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    found = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if languages:
        found.set_languages(list(languages))
    return found


def known() -> set[str]:
    """The languages py3langid identifies (two-letter codes)."""
    return set(identifier(None).labels)


def candidates_of(codes: Sequence[str]) -> dict[str, str]:
    """An export's codes that the identifier knows, by their two-letter code (the first code of each)."""
    languages = known()
    out: dict[str, str] = {}
    for code in codes:
        short = two_letter(code)
        if short in languages:
            out.setdefault(short, code)
    return out


def detect(text: str, codes: Sequence[str] = (), default: str = "en", top: int = TOP) -> list[dict[str, Any]]:
    """LibreTranslate's detections, best first: [{"language": a code of `codes`, "confidence": 0-100}] (any
    language py3langid knows when `codes` is empty). A text with nothing to go on (no letter: empty, digits; or no
    candidate known to the identifier) answers [{"language": default, "confidence": 0}], as LibreTranslate."""
    pool = candidates_of(codes) if codes else {code: code for code in known()}
    if not pool or not any(char.isalpha() for char in text):  # digits and punctuation say nothing
        return [{"confidence": 0.0, "language": default}]
    if len(pool) == 1:  # the one language the export reads
        return [{"confidence": 100.0, "language": next(iter(pool.values()))}]
    ranked = identifier(tuple(sorted(pool)) if codes else None).rank(text)
    if len({round(p, 6) for _, p in ranked}) == 1:  # no feature of any language: a uniform guess
        return [{"confidence": 0.0, "language": default}]
    return [{"confidence": float(round(p * 100, 1)), "language": pool[code]} for code, p in ranked[:top]]


def detect_many(texts: Sequence[str], codes: Sequence[str] = (), default: str = "en") -> dict[str, Any]:
    """One detection for several texts (LibreTranslate's batch source "auto"): the language with the most
    confidence weighted by each text's length."""
    scores: dict[str, float] = {}
    total = sum(len(t) for t in texts) or 1
    for text in texts:
        for found in detect(text, codes, default):
            scores[found["language"]] = scores.get(found["language"], 0.0) + found["confidence"] * len(text) / total
    best = max(scores, key=scores.get)
    return {"confidence": float(round(scores[best], 1)), "language": best}
