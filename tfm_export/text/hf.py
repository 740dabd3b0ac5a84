"""Hugging Face tokenizers from a folder's `tokenizer.json`, through the `tokenizers` library. Torch-free.

The dict form (the manifest's "tokenizer"; the file lives next to it):

    {"type": "hf", "file": "tokenizer.json", "source_prefix": ["{lang}"], "source_suffix": ["</s>"],
     "clean_up_spaces": false, "languages": {...text.languages...}}

Encoding runs tokenizer.json's normaliser, pre-tokeniser and model without its post-processor, then
wraps the ids in the family's template: `source_prefix` + ids + `source_suffix`, token strings where
"{lang}" is the source language's token (mBART-50, M2M100 and NLLB put it first; BART adds <s>;
T5 and Pegasus add only </s>). The template is the family's (importers), not the saved
post-processor's, because the saved one holds whichever source language the folder was saved with.
Decoding skips special tokens, as transformers' decode(skip_special_tokens=True), and cleans up
spaces before punctuation when the folder's tokenizer_config.json asks for it.

"strip_right": true adds a step to tokenizer.json's normaliser that strips trailing whitespace, after the
charsmap, as the family's transformers class builds its normaliser in code (MBart and MBart50 since
transformers 5.25, like SentencePiece itself): a source with a trailing space then ends without a "▁".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError, ManifestError
from .languages import Languages

LANG = "{lang}"  # the source language's token in a template


STRIP_RIGHT = {"type": "Strip", "strip_left": False, "strip_right": True}  # tokenizers' JSON of Strip(right)


def with_right_strip(data: dict[str, Any]) -> dict[str, Any]:
    """tokenizer.json's data with STRIP_RIGHT after its charsmap ("Precompiled"), else first: where
    transformers' MBart classes put it. The Node runtime's text/tokenizer.mjs does the same."""
    normalizer = data.get("normalizer") or {"type": "Sequence"}
    steps = list(normalizer.get("normalizers") or []) if normalizer.get("type") == "Sequence" else [normalizer]
    at = 1 if steps and steps[0].get("type") == "Precompiled" else 0
    return {**data, "normalizer": {"type": "Sequence", "normalizers": [*steps[:at], STRIP_RIGHT, *steps[at:]]}}


def _load(path: Path, strip_right: bool = False) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError("tokenizer.json needs the tokenizers package: pip install tokenizers") from None
    if not path.exists():
        raise ManifestError(f"{path} is missing; it belongs to the tokenizer")
    try:
        if not strip_right:
            return Tokenizer.from_file(str(path))
        return Tokenizer.from_str(json.dumps(with_right_strip(json.loads(path.read_text(encoding="utf-8")))))
    except Exception as exc:  # the Rust side raises its own exception type
        raise ManifestError(f"{path} is not a tokenizer.json ({str(exc).splitlines()[0]}); re-download it") from None


def clean_up_spaces(text: str) -> str:
    """transformers' clean_up_tokenization: no space before punctuation and English contractions."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


class HFTokenizer:
    """tokenizer.json with a family's source template and languages (see the module docstring)."""

    kind = "hf"

    def __init__(self, folder: Path, file: str = "tokenizer.json", source_prefix: Sequence[str] = (),
                 source_suffix: Sequence[str] = ("</s>",), clean_up: bool = False,
                 languages: Languages | None = None, strip_right: bool = False):
        self.folder, self.file = Path(folder), file
        self.tokenizer = _load(self.folder / file, strip_right)
        self.prefix, self.suffix, self.clean_up = list(source_prefix), list(source_suffix), clean_up
        self.strip_right = strip_right
        self.languages = languages or Languages()
        named = {t for t in (*self.prefix, *self.suffix) if t != LANG}
        for token in named | set(self.languages.source.values()) | set(self.languages.target.values()):
            self.token_id(token)  # every token of the template and the languages is in the vocabulary

    def token_id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ManifestError(f"{self.file} has no token {token!r}; the folder mixes two models")
        return found

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text -> ids in the family's template; `source_lang` picks the {lang} token, and
        `target_lang` the first token of a target-on-source model (else see `forced_bos`)."""
        marker = self.languages.source_token(source_lang)
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        prefix = [self.token_id(marker if t == LANG else t) for t in self.prefix if t != LANG or marker]
        suffix = [self.token_id(marker if t == LANG else t) for t in self.suffix if t != LANG or marker]
        return prefix + ids + suffix

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids without special tokens (a target prefix, a translation to score)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def forced_bos(self, target_lang: str | None) -> int | None:
        """The id forced as the first generated token for `target_lang` (None: none is forced)."""
        token = self.languages.target_token(target_lang)
        return self.token_id(token) if token else None

    def decode(self, ids: Sequence[int]) -> str:
        """Target ids -> text, special tokens skipped."""
        text = self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
        return clean_up_spaces(text) if self.clean_up else text

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "file": self.file, "source_prefix": self.prefix, "source_suffix": self.suffix,
                "clean_up_spaces": self.clean_up, "strip_right": self.strip_right,
                "languages": self.languages.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path | None = None) -> "HFTokenizer":
        if folder is None:
            raise ManifestError("the hf tokenizer needs the folder that holds its tokenizer.json")
        return cls(Path(folder), data.get("file", "tokenizer.json"), data.get("source_prefix", []),
                   data.get("source_suffix", ["</s>"]), bool(data.get("clean_up_spaces")),
                   Languages.from_dict(data.get("languages")), bool(data.get("strip_right")))

    def files(self) -> list[Path]:
        return [self.folder / self.file]

    def write_runtime_files(self, folder: Path) -> tuple[dict[str, Any], list[str]]:
        """None needed: the JavaScript runtimes read tokenizer.json itself."""
        return self.to_dict(), []
