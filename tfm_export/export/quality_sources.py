"""The sources a reduced-precision variant is scored on when the user gives none (export.quality, #63).

Without `--eval-file`, a variant is still decoded on text (or speech) beside its own float32 graphs, so that the
manifest says whether it still translates: chrF of one against the other (WER for speech), not token agreement
on random ids. In order of preference:

- text: the checkpoint's sample texts; else a few built-in sentences of the source language (English when the
  tokenizer names none) that the tokenizer encodes without unknown tokens; else "tokenizer text": those
  sentences with only the words it encodes, or seeded strings of the characters it does encode (a digits-in
  model gets digit strings);
- speech: the same texts spoken by espeak-ng (when it is installed; else no default set, logged), WAV bytes that
  `transcribe` decodes as a user's recording.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import TfmExportError
from ..manifest import Manifest
from ..text.iso639 import two_letter
from .quality import EvalSet

log = logging.getLogger(__name__)

# Short everyday sentences, numbers among them (a digits model reads those), per ISO 639-1 code.
SENTENCES: dict[str, tuple[str, ...]] = {
    "en": ("The train leaves at seven.", "Please close the door when you leave.", "We bought 12 apples and 3 pears.",
           "My sister lives in a small town near the sea.", "The meeting starts at 9:30 tomorrow.",
           "It rained all day, so we stayed at home.", "Call me back when you have time.",
           "The museum is open from 10 to 18."),
    "de": ("Der Zug fährt um sieben ab.", "Bitte schließ die Tür, wenn du gehst.", "Wir haben 12 Äpfel gekauft.",
           "Meine Schwester wohnt in einer kleinen Stadt am Meer.", "Das Treffen beginnt morgen um 9:30 Uhr.",
           "Es hat den ganzen Tag geregnet.", "Ruf mich zurück, wenn du Zeit hast.",
           "Das Museum ist bis 18 Uhr offen."),
    "fr": ("Le train part à sept heures.", "Ferme la porte quand tu pars, s'il te plaît.",
           "Nous avons acheté 12 pommes.", "Ma sœur habite dans une petite ville près de la mer.",
           "La réunion commence demain à 9 h 30.", "Il a plu toute la journée.",
           "Rappelle-moi quand tu as le temps.", "Le musée est ouvert de 10 à 18 heures."),
    "es": ("El tren sale a las siete.", "Por favor, cierra la puerta al salir.", "Compramos 12 manzanas.",
           "Mi hermana vive en un pueblo cerca del mar.", "La reunión empieza mañana a las 9:30.",
           "Llovió todo el día.", "Llámame cuando tengas tiempo.", "El museo abre de 10 a 18."),
}
DEFAULT_LANGUAGE = "en"
# At least this share of the built-in sentences must encode cleanly, else the tokenizer's own text is used.
CLEAN_SHARE = 0.5
# Tokenizer text: how many strings, of how many characters at most (seeded: the same at every export).
MADE_TEXTS, MADE_MAX_CHARS, MADE_SEED = 8, 12, 63
# Speech: how many sentences are spoken (each is decoded twice, a window or two each).
SPOKEN = 3
# Each default source's output, at most (a model given text unlike its training may repeat until max_len).
MAX_NEW_TOKENS = 48


def default_eval_set(folder: Path, manifest: Manifest) -> EvalSet | None:
    """What a variant is scored on without --eval-file: default_speech_set for a speech model, else
    default_text_set with the export's tokenizer (None: the export takes token ids only)."""
    if manifest.speech is not None or manifest.filterbank is not None:
        return default_speech_set(manifest)
    if manifest.tokenizer is None:
        return None
    from ..text.tokenizer import tokenizer_from_dict

    return default_text_set(manifest, tokenizer_from_dict(manifest.tokenizer, folder))


def default_text_set(manifest: Manifest, tokenizer: Any) -> EvalSet | None:
    """Samples, built-in sentences or tokenizer text (the module docstring); None without a tokenizer."""
    if tokenizer is None:
        return None
    if manifest.samples:
        return EvalSet(tuple(manifest.samples), None, "samples")
    language = source_language(tokenizer)
    sentences = SENTENCES.get(language, SENTENCES[DEFAULT_LANGUAGE])
    language = language if language in SENTENCES else DEFAULT_LANGUAGE
    clean = [s for s in sentences if _clean(tokenizer, s, manifest.config.max_len)]
    if len(clean) >= CLEAN_SHARE * len(sentences):
        return EvalSet(tuple(clean), None, f"built-in sentences, {language}", max_new_tokens=MAX_NEW_TOKENS)
    made = tokenizer_text(tokenizer, manifest.config.max_len, sentences)
    return EvalSet(tuple(made), None, "tokenizer text", max_new_tokens=MAX_NEW_TOKENS) if made else None


def default_speech_set(manifest: Manifest) -> EvalSet | None:
    """The samples (else the built-in sentences of the model's language) spoken by espeak-ng, as WAV bytes;
    None when espeak-ng is not installed."""
    if shutil.which("espeak-ng") is None:
        log.warning("espeak-ng is not installed: the variant's word error rate against float32 is not measured "
                    "(pass --eval-file with recordings, or install espeak-ng)")
        return None
    language = two_letter((manifest.speech or {}).get("language")) or DEFAULT_LANGUAGE
    texts = manifest.samples or SENTENCES.get(language, SENTENCES[DEFAULT_LANGUAGE])
    voice = language if language in SENTENCES else DEFAULT_LANGUAGE
    origin = "samples" if manifest.samples else f"built-in sentences, {voice}"
    try:
        spoken = tuple(_speak(text, voice) for text in texts[:SPOKEN])
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("espeak-ng failed (%s): the variant's word error rate against float32 is not measured", exc)
        return None
    return EvalSet(spoken, None, f"{origin}, spoken by espeak-ng", max_new_tokens=MAX_NEW_TOKENS)


def source_language(tokenizer: Any) -> str:
    """The source language's ISO 639-1 code: the tokenizer's default source, its only source code, or English."""
    languages = getattr(tokenizer, "languages", None)
    codes = languages.codes("source") if languages is not None else []
    code = getattr(languages, "source_default", None) or (codes[0] if len(codes) == 1 else None)
    return two_letter(code) or DEFAULT_LANGUAGE


def tokenizer_text(tokenizer: Any, max_len: int, sentences: Sequence[str]) -> list[str]:
    """Text the tokenizer encodes without unknown tokens: `sentences` with only the words it knows (a tokenizer
    without capitals keeps the rest of each), else seeded strings of the characters it knows (of the built-in
    sentences and the digits: a digits-in model gets digit strings); empty when it knows none of them."""
    known = [" ".join(w for w in text.split() if _clean(tokenizer, w, max_len)) for text in sentences]
    texts = [text for text in known if text and _clean(tokenizer, text, max_len)]
    if len(texts) >= CLEAN_SHARE * len(sentences):
        return texts
    pool = sorted({ch for texts in SENTENCES.values() for text in texts for ch in text} | set("0123456789"))
    chars = [ch for ch in pool if not ch.isspace() and _clean(tokenizer, ch, max_len)]
    if not chars:
        return []
    spaced = _clean(tokenizer, f"{chars[0]} {chars[0]}", max_len)
    rng = np.random.default_rng(MADE_SEED)
    texts = []
    for _ in range(MADE_TEXTS):
        words = ["".join(rng.choice(chars, int(rng.integers(1, 6)))) for _ in range(int(rng.integers(1, 4)))]
        text = (" " if spaced else "").join(words)[:MADE_MAX_CHARS]
        if _clean(tokenizer, text, max_len):
            texts.append(text)
    return texts


def _clean(tokenizer: Any, text: str, max_len: int) -> bool:
    """Whether `text` encodes without an error or an unknown token, within max_len."""
    try:
        ids = tokenizer.encode(text)
    except (TfmExportError, ValueError, KeyError):
        return False
    unknown = unknown_id(tokenizer)
    return 0 < len(ids) <= max_len and (unknown is None or unknown not in ids)


def unknown_id(tokenizer: Any) -> int | None:
    """The tokenizer's unknown-token id (Marian's unk_id, a tokenizer.json's <unk>), None when it has none."""
    if isinstance(getattr(tokenizer, "unk_id", None), int):
        return tokenizer.unk_id
    inner = getattr(tokenizer, "tokenizer", None)  # text.hf: the tokenizers library's object
    found = [inner.token_to_id(token) for token in ("<unk>", "[UNK]")] if inner is not None else []
    return next((i for i in found if i is not None), None)


def _speak(text: str, voice: str) -> bytes:
    """espeak-ng's WAV of `text` (its own rate: `transcribe` resamples)."""
    return subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True, capture_output=True,
                          timeout=60).stdout
