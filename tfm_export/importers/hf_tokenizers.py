"""Which tokenizer a Hugging Face folder gets in the export, and how it marks languages.

Each family's `TokenizerRule` (importers.families) says how: Marian folders keep their SentencePiece
files (text.marian, `sentencepiece`), as do M2M100 folders published without a tokenizer.json; every
other folder is read from its tokenizer.json with the `tokenizers` library (text.hf), wrapped in the
family's source `Template`: transformers' tokenizer classes add these tokens in code, so the rule picks
the template by tokenizer_config.json's tokenizer_class. Language codes are the tokenizer's added
tokens of the template's shape (text.languages). A folder without tokenizer files exports ids only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..config import TransformerConfig
from ..errors import ConfigError
from ..text.hf import HFTokenizer
from ..text.languages import Languages, TokenShape
from .hf_folder import read_optional_json

log = logging.getLogger(__name__)

MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
M2M100_SPM = "sentencepiece.bpe.model"  # with vocab.json: M2M100 folders have no tokenizer.json


@dataclass(frozen=True)
class Template:
    """The tokens a transformers tokenizer class puts around the source ("{lang}": the source
    language's token), and the shape of its language tokens (None: it has none)."""

    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ("</s>",)
    languages: TokenShape | None = None
    legacy: Template | None = None  # with tokenizer_config.json's legacy_behaviour (NllbTokenizer)
    # the class strips trailing whitespace in its normaliser, whatever tokenizer.json says (text.hf)
    strip_right: bool = False


# (folder, config, tokenizer_config.json, language shape) -> the tokenizer's dict form, or None
Reader = Callable[[Path, TransformerConfig, dict[str, Any], Optional[TokenShape]], Optional[dict[str, Any]]]


@dataclass(frozen=True)
class SentencePiece:
    """A family's SentencePiece files, read without tokenizer.json."""

    read: Reader
    files: tuple[str, ...]  # the reader needs them all
    always: bool = False  # read even when there is a tokenizer.json (Marian: its own tokenizer reads them)
    languages: TokenShape | None = None


@dataclass(frozen=True)
class TokenizerRule:
    """How a family's tokenizer files become the export's tokenizer."""

    # tokenizer_class prefix -> template, the first that matches; "" matches every class
    templates: Mapping[str, Template] = field(default_factory=lambda: {"": Template()})
    sentencepiece: SentencePiece | None = None

    def template(self, settings: dict[str, Any]) -> Template:
        """The template of tokenizer_config.json's tokenizer_class (the first key it starts with)."""
        kind = str(settings.get("tokenizer_class") or "")
        template = next(t for prefix, t in self.templates.items() if kind.startswith(prefix))
        return template.legacy if template.legacy and settings.get("legacy_behaviour") else template


def folder_tokenizer(path: Path, rule: TokenizerRule, config: TransformerConfig) -> dict[str, Any] | None:
    """The tokenizer's dict form (text.tokenizer) for the folder `path`, or None (ids only)."""
    settings = read_optional_json(path / "tokenizer_config.json")
    has_json, spm = (path / "tokenizer.json").exists(), rule.sentencepiece
    if spm is not None and (spm.always or not has_json):
        if all((path / name).exists() for name in spm.files):
            return spm.read(path, config, settings, spm.languages)
        if spm.always:
            log.warning("%s has no %s: the export will take token ids only", path, ", ".join(spm.files))
            return None
    if not has_json:
        log.warning("%s has no tokenizer.json: the export will take token ids only (save the tokenizer with "
                    "transformers' save_pretrained to write one)", path)
        return None
    template = rule.template(settings)
    prefix, suffix, shape = list(template.prefix), list(template.suffix), template.languages
    clean_up = bool(settings.get("clean_up_tokenization_spaces"))
    tokenizer = HFTokenizer(path, "tokenizer.json", prefix, suffix, clean_up, strip_right=template.strip_right)
    if shape:
        added = [t.content for t in tokenizer.tokenizer.get_added_tokens_decoder().values()]
        languages = Languages.from_tokens(added, shape, settings.get("src_lang"))
        if not languages.source:
            raise ConfigError(f"{path}/tokenizer.json has no language tokens ({shape.name} codes); "
                              f"re-save the tokenizer")
        tokenizer = HFTokenizer(path, "tokenizer.json", prefix, suffix, clean_up, languages, template.strip_right)
    _check_ids(tokenizer, settings, config, "tokenizer.json")
    return tokenizer.to_dict()


def _check_ids(tokenizer: Any, settings: dict[str, Any], config: TransformerConfig, file: str) -> None:
    """The tokenizer's eos and pad must be the model's: a folder that mixes two models is refused."""
    for name, ours in (("eos_token", config.eos_id), ("pad_token", config.src_pad_id)):
        token = settings.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.tokenizer.token_to_id(token) not in (None, ours):
            raise ConfigError(f"{file} gives {name} {token!r} id {tokenizer.tokenizer.token_to_id(token)}, "
                              f"config.json {ours}; the folder mixes two models")


def read_m2m100(path: Path, config: TransformerConfig, settings: dict[str, Any], shape: TokenShape | None
                ) -> dict[str, Any]:
    """M2M100Tokenizer's files: one SentencePiece model (M2M100_SPM), vocab.json, and the language tokens
    added after it (added_tokens.json, or tokenizer_config.json's added_tokens_decoder)."""
    from ..text.marian import MarianTokenizer

    added = read_optional_json(path / "added_tokens.json") or {
        token["content"]: int(i) for i, token in (settings.get("added_tokens_decoder") or {}).items()}
    languages = Languages.from_tokens(added, shape, settings.get("src_lang")) if shape else Languages()
    if not languages.source:
        raise ConfigError(f"{path} has no M2M100 language tokens (__en__, ...) in added_tokens.json or "
                          f"tokenizer_config.json; re-save the tokenizer")
    tokens = {t: i for t, i in added.items() if t in languages.source.values()}
    files = {"source_spm": M2M100_SPM, "target_spm": M2M100_SPM, "vocab": "vocab.json"}
    tokenizer = MarianTokenizer(path, files, None, languages, tokens, ["{lang}"], "m2m100")
    if (tokenizer.eos_id, tokenizer.pad_id) != (config.eos_id, config.src_pad_id):
        raise ConfigError(f"vocab.json gives eos {tokenizer.eos_id} and pad {tokenizer.pad_id}, config.json "
                          f"{config.eos_id} and {config.src_pad_id}; the folder mixes two models")
    return tokenizer.to_dict()


def read_marian(path: Path, config: TransformerConfig, settings: dict[str, Any], shape: TokenShape | None
                ) -> dict[str, Any]:
    """A Marian folder's source.spm, target.spm and vocab.json (text.marian; `shape`: its >>fra<< codes)."""
    from ..text.marian import LANGUAGE_TOKENS, MarianTokenizer

    tokenizer = MarianTokenizer.from_folder(path, shape or LANGUAGE_TOKENS)
    if (tokenizer.eos_id, tokenizer.pad_id) != (config.eos_id, config.src_pad_id):
        raise ConfigError(f"vocab.json gives eos {tokenizer.eos_id} and pad {tokenizer.pad_id}, config.json "
                          f"{config.eos_id} and {config.src_pad_id}; the folder mixes two models")
    return tokenizer.to_dict()
