"""Text <-> token ids, stored in checkpoints and manifests. Torch-free (the runtime uses it).

The dict form of the character tokenizer (what `manifest.json` carries under "tokenizer", and what
Node and browser apps read):

    {"type": "chars", "src_vocab": ["<pad>", "<bos>", "<eos>", "0", ...],
     "tgt_vocab": ["<pad>", "<bos>", "<eos>", "a", ...], "specials": 3, "append_eos": true}

Ids are positions in the vocab lists; the first `specials` entries are pad, bos and eos (ids 0, 1,
2), never produced by `encode` from text and skipped by `decode`. Sources end with eos when
`append_eos` is true.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from ..errors import InputError, ManifestError, load_object
from .languages import Languages

SPECIALS = ("<pad>", "<bos>", "<eos>")
PAD, BOS, EOS = 0, 1, 2


class Tokenizer(Protocol):
    """What every tokenizer type provides."""

    kind: str
    languages: Languages  # the codes encode and forced_bos take (none for a single-language model)

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]: ...
    def forced_bos(self, target_lang: str | None) -> int | None: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...
    def files(self) -> list[Path]: ...
    # Writes into an export folder the files that runtimes without this tokenizer's Python libraries read
    # (Node, the browser); the dict form that names them, and their names.
    def write_runtime_files(self, folder: Path) -> tuple[dict[str, Any], list[str]]: ...


class CharTokenizer:
    """One token per character, with separate source and target vocabularies."""

    kind = "chars"
    languages = Languages()

    def __init__(self, src_vocab: Sequence[str], tgt_vocab: Sequence[str], append_eos: bool = True):
        for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
            if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
                raise ManifestError(f"tokenizer {name} must start with {', '.join(SPECIALS)}")
            # A repeated entry would make encoding ambiguous and decoding disagree with training.
            repeated = sorted({ch for ch in vocab if list(vocab).count(ch) > 1})
            if repeated:
                raise ManifestError(f"tokenizer {name} repeats {repeated}; re-export the model")
        self.src_vocab, self.tgt_vocab = list(src_vocab), list(tgt_vocab)
        self.append_eos = append_eos
        self._src_ids = {ch: i for i, ch in enumerate(self.src_vocab) if i >= len(SPECIALS)}
        self._tgt_ids = {ch: i for i, ch in enumerate(self.tgt_vocab) if i >= len(SPECIALS)}

    @classmethod
    def build(cls, sources: Iterable[str], targets: Iterable[str]) -> "CharTokenizer":
        """Vocabularies from training texts (sorted, so rebuilding gives the same ids)."""
        src = sorted({ch for text in sources for ch in text})
        tgt = sorted({ch for text in targets for ch in text})
        return cls([*SPECIALS, *src], [*SPECIALS, *tgt])

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text -> ids (+ eos); unknown characters are an InputError naming them."""
        self.languages.source_token(source_lang), self.languages.target_token(target_lang)  # no codes
        unknown = sorted({ch for ch in text if ch not in self._src_ids})
        if unknown:
            allowed = "".join(self.src_vocab[len(SPECIALS):])
            shown = text if len(text) <= 60 else text[:57] + "..."  # keep the message one short line
            raise InputError(f"cannot encode {''.join(unknown)!r} in {shown!r}: the model knows only "
                             f"the characters {allowed!r}")
        ids = [self._src_ids[ch] for ch in text]
        return ids + [EOS] if self.append_eos else ids

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids (training only); unknown characters are an InputError."""
        missing = sorted({ch for ch in text if ch not in self._tgt_ids})
        if missing:
            raise InputError(f"target characters {''.join(missing)!r} are not in the vocabulary")
        return [self._tgt_ids[ch] for ch in text]

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None

    def decode(self, ids: Sequence[int]) -> str:
        """Target ids -> text, skipping special and out-of-range ids."""
        n = len(self.tgt_vocab)
        return "".join(self.tgt_vocab[i] for i in ids if len(SPECIALS) <= i < n)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form stored in checkpoints and manifests (see the module docstring)."""
        return {"type": self.kind, "src_vocab": self.src_vocab, "tgt_vocab": self.tgt_vocab,
                "specials": len(SPECIALS), "append_eos": self.append_eos}

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path | None = None) -> "CharTokenizer":
        """Rebuild from `to_dict`'s form; `folder` is unused (no extra files)."""
        try:
            return cls(data["src_vocab"], data["tgt_vocab"], bool(data.get("append_eos", True)))
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"chars tokenizer is missing {exc}; re-export the model") from None

    def files(self) -> list[Path]:
        """Extra files an export folder needs: none, the vocabularies live in the dict."""
        return []

    def write_runtime_files(self, folder: Path) -> tuple[dict[str, Any], list[str]]:
        """None needed: the JavaScript runtimes read the vocabularies from the dict."""
        return self.to_dict(), []


# Lazily imported so optional dependencies (sentencepiece) load only when used.
TOKENIZER_TYPES = {
    "chars": "tfm_export.text.tokenizer:CharTokenizer",
    "marian": "tfm_export.text.marian:MarianTokenizer",
    "hf": "tfm_export.text.hf:HFTokenizer",
    "m2m100": "tfm_export.text.marian:MarianTokenizer",  # M2M100's SentencePiece + vocab.json
}


def tokenizer_from_dict(data: dict[str, Any], folder: Path | None = None) -> Tokenizer:
    """Rebuild a tokenizer from its dict form; `folder` holds its extra files, if any."""
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in TOKENIZER_TYPES:
        raise ManifestError(f"unknown tokenizer type {kind!r}; this version knows {', '.join(TOKENIZER_TYPES)}")
    cls = load_object(TOKENIZER_TYPES[kind], ManifestError, f"{kind} tokenizer")
    return cls.from_dict(data, folder)
