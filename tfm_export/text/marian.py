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

Exports also carry the SentencePiece models as data for the Node and browser runtimes
(`write_runtime_files`, text.spm_json), under "sentencepiece":

    "sentencepiece": {"source": {"file": "source.tokenizer.json", "add_dummy_prefix": true,
                                 "remove_extra_whitespaces": true},
                      "target": {"controls": [], "unk": "<unk>", "unk_surface": " \u2047 "}}

Absent from exports made before it, and from exports of models the conversion does not reproduce
(those take token ids in Node); this runtime never reads it (it runs the .spm files).

M2M100 folders (published without a tokenizer.json) work the same way with one SentencePiece model
for both sides (type "m2m100"): `added` holds the language tokens (`__de__`) with their ids after
vocab.json's, split out of the text and skipped when decoding as transformers' added special tokens
are, and `source_prefix` ["{lang}"] puts the source language's token first.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Sequence

from ..files import read_json_object
from ..errors import ConfigError, ManifestError
from .languages import Languages, TokenShape
from .spm_json import DecodeRules, EncodeRules, UnsupportedModel, decode_rules, write_tokenizer_json

log = logging.getLogger(__name__)

WORD_MARKER = "\u2581"  # SentencePiece's "start of word"
SPECIAL_DEFAULTS = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}
# Keys of the dict form that name files, with the Hugging Face folder's usual names.
FILE_DEFAULTS = {"source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json",
                 "target_vocab": None}
# Multi-target models name the target language with a >>fra<< token at the start of the source
# (transformers' MarianTokenizer splits it off the same way: encode below).
LANGUAGE_TOKENS = TokenShape("marian", re.compile(r"^>>[A-Za-z_]{2,12}<<$"), wrapper=2, target_on_source=True)
SOURCE_JSON = "source.tokenizer.json"  # source.spm as the JavaScript runtimes read it (text.spm_json)


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
                 added: dict[str, int] | None = None, source_prefix: Sequence[str] = (), kind: str = "marian",
                 runtime_rules: tuple[EncodeRules, DecodeRules] | None = None):
        self.folder, self.languages, self.kind = Path(folder), languages or Languages(), kind
        self.runtime_rules = runtime_rules  # the "sentencepiece" section (module docstring), when written
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

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids without EOS (target.spm's pieces: a target prefix, a translation to score)."""
        return [self.encoder.get(p, self.unk_id) for p in self.target.encode(text, out_type=str)] if text else []

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
                                                          if self.added else {}),
                **({"sentencepiece": _rules_dict(self.runtime_rules)} if self.runtime_rules else {})}

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
                   data.get("source_prefix", ()), data.get("type", "marian"), _read_rules(data.get("sentencepiece")))

    def files(self) -> list[Path]:
        """The files an export folder needs (copied next to manifest.json)."""
        return [self.folder / name for name in dict.fromkeys(self.names.values()) if name]

    def write_runtime_files(self, folder: Path) -> tuple[dict[str, Any], list[str]]:
        """Write what the Node and browser runtimes need to encode and decode text into the export
        `folder` (source.tokenizer.json; text.spm_json); this tokenizer's dict form with them, and their
        names. A model the conversion cannot reproduce exactly gets none (Node then takes token ids)."""
        if self.kind != "marian":  # M2M100's language tokens and unknown-id rule are not in the JS runtime
            return self.to_dict(), []
        try:
            # The JavaScript runtime splits the special tokens out first, so the unknown piece, which
            # tokenizer.json readers match in text and sentencepiece never does, must be one of them.
            unk = self.source.id_to_piece(self.source.unk_id())
            if unk != self.specials["unk_token"]:
                raise UnsupportedModel(f"{self.names['source_spm']}'s unknown piece {unk!r} is not the unk_token")
            target = decode_rules(self.folder / self.names["target_spm"])
            source = write_tokenizer_json(self.folder / self.names["source_spm"], Path(folder) / SOURCE_JSON)
        except (UnsupportedModel, ImportError) as exc:
            log.warning("Node and the browser will take token ids only for this export, not text: %s", exc)
            return self.to_dict(), []
        self.runtime_rules = (source, target)
        return self.to_dict(), [source.file]


def _rules_dict(rules: tuple[EncodeRules, DecodeRules]) -> dict[str, Any]:
    return {"source": rules[0].to_dict(), "target": rules[1].to_dict()}


def _read_rules(data: Any) -> tuple[EncodeRules, DecodeRules] | None:
    """The "sentencepiece" section (None: an export made before it, or ids only in Node)."""
    if data is None:
        return None
    try:
        return EncodeRules.from_dict(data["source"]), DecodeRules.from_dict(data["target"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"the marian tokenizer's sentencepiece section is malformed ({exc!r}); "
                            f"re-export the model") from None
