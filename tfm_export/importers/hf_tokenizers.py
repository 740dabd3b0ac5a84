"""Which tokenizer a Hugging Face folder gets in the export, and how it marks languages.

Marian folders keep their SentencePiece files (text.marian); every other family is read from its
tokenizer.json with the `tokenizers` library (text.hf), wrapped in the family's source template:
transformers' tokenizer classes add these tokens in code, so the template is chosen here by the
folder's model_type and tokenizer_class (TEMPLATES). Language codes are the tokenizer's added tokens
of the family's shape (text.languages). A folder without tokenizer files exports ids only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..config import TransformerConfig
from ..errors import ConfigError
from ..text.hf import HFTokenizer
from ..text.languages import Languages
from .hf_folder import read_optional_json

log = logging.getLogger(__name__)

# template -> (source prefix, source suffix, language token shape)
TEMPLATES = {
    "bart": (["<s>"], ["</s>"], None),
    "mbart50": (["{lang}"], ["</s>"], "mbart"),  # MBart50Tokenizer: [src_lang] X </s>
    "mbart": ([], ["</s>", "{lang}"], "mbart"),  # MBartTokenizer (mbart-large-cc25): X </s> [src_lang]
    "nllb": (["{lang}"], ["</s>"], "nllb"),
    "nllb-legacy": ([], ["</s>", "{lang}"], "nllb"),  # NllbTokenizer(legacy_behaviour=True)
    "m2m100": (["{lang}"], ["</s>"], "m2m100"),
    "pegasus": ([], ["</s>"], None),
    "t5": ([], ["</s>"], None),
}
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
M2M100_SPM = "sentencepiece.bpe.model"  # with vocab.json: M2M100 folders have no tokenizer.json


def template_of(model_type: str, settings: dict[str, Any]) -> str:
    """The TEMPLATES key of a folder: its model_type, refined by tokenizer_config.json's tokenizer_class."""
    kind = str(settings.get("tokenizer_class") or "")
    if model_type == "mbart":
        return "mbart50" if kind.startswith("MBart50") else "mbart"
    if model_type == "m2m_100":
        if kind.startswith("Nllb"):
            return "nllb-legacy" if settings.get("legacy_behaviour") else "nllb"
        return "m2m100"
    return {"mt5": "t5"}.get(model_type, model_type)


def folder_tokenizer(path: Path, model_type: str, config: TransformerConfig) -> dict[str, Any] | None:
    """The tokenizer's dict form (text.tokenizer) for the folder `path`, or None (ids only)."""
    settings = read_optional_json(path / "tokenizer_config.json")
    if model_type == "marian":
        return _marian(path, config, settings)
    if model_type == "m2m_100" and not (path / "tokenizer.json").exists() and (path / M2M100_SPM).exists():
        return _m2m100(path, config, settings)
    if not (path / "tokenizer.json").exists():
        log.warning("%s has no tokenizer.json: the export will take token ids only (save the tokenizer with "
                    "transformers' save_pretrained to write one)", path)
        return None
    prefix, suffix, shape = TEMPLATES[template_of(model_type, settings)]
    tokenizer = HFTokenizer(path, "tokenizer.json", prefix, suffix, bool(settings.get("clean_up_tokenization_spaces")))
    if shape:
        added = [t.content for t in tokenizer.tokenizer.get_added_tokens_decoder().values()]
        languages = Languages.from_tokens(added, shape, settings.get("src_lang"))
        if not languages.source:
            raise ConfigError(f"{path}/tokenizer.json has no language tokens ({shape} codes); re-save the tokenizer")
        tokenizer = HFTokenizer(path, "tokenizer.json", prefix, suffix, tokenizer.clean_up, languages)
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


def _m2m100(path: Path, config: TransformerConfig, settings: dict[str, Any]) -> dict[str, Any]:
    """M2M100Tokenizer's files: one SentencePiece model, vocab.json, and the language tokens added after
    it (added_tokens.json, or tokenizer_config.json's added_tokens_decoder)."""
    from ..text.marian import MarianTokenizer

    added = read_optional_json(path / "added_tokens.json") or {
        token["content"]: int(i) for i, token in (settings.get("added_tokens_decoder") or {}).items()}
    languages = Languages.from_tokens(added, "m2m100", settings.get("src_lang"))
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


def _marian(path: Path, config: TransformerConfig, settings: dict[str, Any]) -> dict[str, Any] | None:
    if not all((path / name).exists() for name in MARIAN_FILES):
        log.warning("%s has no %s: the export will take token ids only", path, ", ".join(MARIAN_FILES))
        return None
    from ..text.marian import MarianTokenizer

    tokenizer = MarianTokenizer.from_folder(path)
    if (tokenizer.eos_id, tokenizer.pad_id) != (config.eos_id, config.src_pad_id):
        raise ConfigError(f"vocab.json gives eos {tokenizer.eos_id} and pad {tokenizer.pad_id}, config.json "
                          f"{config.eos_id} and {config.src_pad_id}; the folder mixes two models")
    return tokenizer.to_dict()
