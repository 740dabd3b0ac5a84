"""SentencePiece pieces mapped through vocab.json: Marian's tokenisation, and M2M100's. Torch-free.

Needs the optional `sentencepiece` package (pip install 'tfm-export[sentencepiece]'). The dict
form names files that live next to it (the export folder, or the Hugging Face model folder):

    {"type": "marian", "source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json",
     "target_vocab": null, "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>",
     "unk_id": 1, "eos_id": 0, "pad_id": 58100}

It follows transformers' MarianTokenizer: a leading language code (`>>fra<<`) is one token, the
rest goes through source.spm, each piece becomes its vocab.json id (unknown pieces become
`<unk>`), and `</s>` ends the source. Decoding drops special ids, joins the target pieces with
target.spm and turns stray word markers into spaces. `target_vocab` is set for models saved with
`separate_vocabs` (then target ids are looked up in that file).

M2M100 folders (published without a tokenizer.json) work the same way with one SentencePiece model
for both sides (type "m2m100"): `added` holds the language tokens (`__de__`) with their ids after
vocab.json's, split out of the text and skipped when decoding as transformers' added special tokens
are, and `source_prefix` ["{lang}"] puts the source language's token first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from ..files import read_json_object
from ..errors import ConfigError, ManifestError
from .languages import Languages, TokenShape

WORD_MARKER = "\u2581"  # SentencePiece's "start of word"
SPECIAL_DEFAULTS = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}
# Keys of the dict form that name files, with the Hugging Face folder's usual names.
FILE_DEFAULTS = {"source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json",
                 "target_vocab": None}
# Multi-target models name the target language with a >>fra<< token at the start of the source
# (transformers' MarianTokenizer splits it off the same way: encode below).
LANGUAGE_TOKENS = TokenShape("marian", re.compile(r"^>>[A-Za-z_]{2,12}<<$"), wrapper=2, target_on_source=True)


def _spm(path: Path) -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise ConfigError("Marian tokenisation needs sentencepiece: pip install 'tfm-export[sentencepiece]'") from None
    if not path.exists():
        raise ManifestError(f"{path} is missing; it belongs to the Marian tokenizer")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as exc:
        raise ManifestError(f"{path} is not a SentencePiece model ({exc}); re-download it") from None


def _vocab(path: Path) -> dict[str, int]:
    data = read_json_object(path, ManifestError, "it belongs to the Marian tokenizer", "re-download it")
    if not all(isinstance(i, int) for i in data.values()):
        raise ManifestError(f"{path} must map pieces to integer ids")
    return data


def _token_text(value: Any) -> str:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    return value["content"] if isinstance(value, dict) else str(value)


class MarianTokenizer:
    """Source text -> pieces (source.spm) -> ids (vocab.json) + eos; target ids -> pieces -> text."""

    kind = "marian"
    kinds = ("marian", "m2m100")  # the manifest types this class reads; an instance's `kind` is one of them

    def __init__(self, folder: Path, files: dict[str, str | None] | None = None,
                 specials: dict[str, str] | None = None, languages: Languages | None = None,
                 added: dict[str, int] | None = None, source_prefix: Sequence[str] = (), kind: str = "marian"):
        self.folder, self.languages, self.kind = Path(folder), languages or Languages(), kind
        self.added, self.prefix = dict(added or {}), list(source_prefix)
        self.names = {**FILE_DEFAULTS, **(files or {})}
        self.specials = {**SPECIAL_DEFAULTS, **(specials or {})}
        self.encoder = _vocab(self.folder / self.names["vocab"])
        target = _vocab(self.folder / self.names["target_vocab"]) if self.names["target_vocab"] else self.encoder
        self.decoder = {i: piece for piece, i in {**target, **self.added}.items()}
        missing = [t for t in self.specials.values() if t not in self.encoder]
        if missing:
            raise ManifestError(f"{self.names['vocab']} has no {', '.join(missing)}; it is not a Marian vocabulary")
        self.unk_id, self.eos_id, self.pad_id = (self.encoder[self.specials[k]] for k in SPECIAL_DEFAULTS)
        self.special_ids = {self.unk_id, self.eos_id, self.pad_id, *self.added.values(),
                            *(self.encoder[t] for t in ("<s>",) if t in self.encoder and self.added)}
        # transformers splits these strings out of the text before SentencePiece sees it.
        ordered = sorted({*self.specials.values(), *self.added}, key=len, reverse=True)
        self._special_split = re.compile("(" + "|".join(re.escape(t) for t in ordered) + ")")
        self.source = _spm(self.folder / self.names["source_spm"])
        self.target = _spm(self.folder / self.names["target_spm"])

    @classmethod
    def from_folder(cls, folder: Path, codes: TokenShape = LANGUAGE_TOKENS) -> "MarianTokenizer":
        """The tokenizer of a Hugging Face Marian folder (tokenizer_config.json is optional); `codes`:
        the shape of its language tokens."""
        folder = Path(folder)
        settings: dict[str, Any] = {}
        config_path = folder / "tokenizer_config.json"
        if config_path.exists():
            try:
                settings = json.loads(config_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{config_path} is not valid JSON ({exc})") from None
        files = {"target_vocab": "target_vocab.json"} if settings.get("separate_vocabs") else {}
        specials = {k: _token_text(settings[k]) for k in SPECIAL_DEFAULTS if settings.get(k) is not None}
        tokenizer = cls(folder, files, specials)
        # Multi-target models read the target from a >>fra<< token on the source; a single pair is
        # named by tokenizer_config.json's source_lang / target_lang when the folder has them.
        languages = Languages.from_tokens(tokenizer.encoder, codes)
        pair = settings.get("source_lang"), settings.get("target_lang")
        if not languages.target and all(isinstance(code, str) for code in pair):
            languages = Languages(pair=(str(pair[0]), str(pair[1])))
        tokenizer.languages = languages
        return tokenizer

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text -> ids, ending with eos (as transformers' MarianTokenizer). `target_lang` puts its
        >>code<< token first (multi-target models); a single pair checks the codes it is given."""
        marker = self.languages.source_token(source_lang)
        token = self.languages.target_token(target_lang) if self.languages.target_on_source else None
        if token:
            text = f"{token} {text}"
        specials = {*self.specials.values(), *self.added}
        ids: list[int] = [self.added[marker] for t in self.prefix if t == "{lang}" and marker]
        for chunk in self._special_split.split(text):
            if chunk in specials:
                ids.append(self.added.get(chunk, self.encoder.get(chunk)))
            elif chunk:
                ids.extend(self.encoder.get(p, self.unk_id) for p in self._pieces(chunk))
        return ids + [self.eos_id]

    def _pieces(self, text: str) -> list[str]:
        # A leading ">>lang<<" picks the target language of multilingual models: one token.
        code = []
        if self.kind == "marian" and text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        return code + self.source.encode(text, out_type=str)

    def forced_bos(self, target_lang: str | None) -> int | None:
        """M2M100: the target language's token id, forced first; Marian: None (the language is on the source)."""
        token = None if self.languages.target_on_source else self.languages.target_token(target_lang)
        return self.added[token] if token else None

    def decode(self, ids: Sequence[int]) -> str:
        """Target ids -> text; special ids are skipped, and so are ids past the vocabulary (Marian);
        M2M100 writes those as its unknown token, as transformers does (its model's vocabulary is
        padded past the tokenizer's with "madeup words")."""
        if self.kind == "marian":
            pieces = [self.decoder[i] for i in ids if i not in self.special_ids and i in self.decoder]
            # As transformers: stray word markers (pieces unknown to target.spm) become spaces.
            return self.target.decode_pieces(pieces).replace(WORD_MARKER, " ").strip()
        text, pieces = "", []
        for i in (i for i in ids if i not in self.special_ids):
            if i in self.decoder:
                pieces.append(self.decoder[i])
            else:
                text, pieces = text + self.target.decode_pieces(pieces) + self.specials["unk_token"], []
        return (text + self.target.decode_pieces(pieces)).strip()

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (see the module docstring); ids are informative, the files rule."""
        return {"type": self.kind, **self.names, **self.specials,
                "unk_id": self.unk_id, "eos_id": self.eos_id, "pad_id": self.pad_id,
                "languages": self.languages.to_dict(), **({"added": self.added, "source_prefix": self.prefix}
                                                          if self.added else {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path | None = None) -> "MarianTokenizer":
        """Rebuild from `to_dict`'s form; `folder` holds the files it names."""
        if folder is None:
            raise ManifestError("the Marian tokenizer needs the folder that holds its files")
        missing = [k for k, default in FILE_DEFAULTS.items() if default is not None and k not in data]
        if missing:
            raise ManifestError(f"marian tokenizer is missing {', '.join(missing)}; re-export the model")
        files = {k: data.get(k) for k in FILE_DEFAULTS}
        specials = {k: data[k] for k in SPECIAL_DEFAULTS if data.get(k)}
        return cls(Path(folder), files, specials, Languages.from_dict(data.get("languages")), data.get("added"),
                   data.get("source_prefix", ()), data.get("type", "marian"))

    def files(self) -> list[Path]:
        """The files an export folder needs (copied next to manifest.json)."""
        return [self.folder / name for name in dict.fromkeys(self.names.values()) if name]
