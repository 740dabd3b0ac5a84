"""The parts of a Whisper prompt a caller writes, as token ids: an initial prompt (transformers' get_prompt_ids),
faster-whisper's hotwords (after <|startofprev|> in every window) and prefix (the first window's first words,
forced), each given as text (tokenized as " " + the text) or as ids checked against the vocabulary. Torch-free.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...errors import InputError
from .prompt import WhisperSettings, prompt_prefix

__all__ = ["blank", "hotword_ids", "prefix_ids", "prompt_ids", "text_ids"]


def text_ids(model: Any, settings: WhisperSettings, text: str | Sequence[int], name: str) -> list[int]:
    """Text as its tokens of " " + the text (transformers' get_prompt_ids, faster-whisper's hotwords and prefix),
    or token ids checked against the vocabulary."""
    if isinstance(text, str):
        ids = model.tokenizer.encode_target(" " + text.strip()) if hasattr(model.tokenizer, "encode_target") \
            else model.tokenizer.encode(" " + text.strip())
        return [t for t in ids if t != settings.eos_token_id]
    ids = [int(t) for t in text]
    vocab = model.config.tgt_vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise InputError(f"{{{name}}} id {bad[0]} is out of range for the model's vocabulary of {vocab} ids",
                         options={name: None})
    return ids


def blank(text: Any) -> bool:
    """No prompt, hotwords or prefix: None, blank text or no ids."""
    return text is None or (isinstance(text, str) and not text.strip()) or (not isinstance(text, str) and not text)


def prompt_ids(model: Any, settings: WhisperSettings, prompt: str | Sequence[int] | None) -> list[int] | None:
    """An initial prompt as transformers' get_prompt_ids: <|startofprev|>, " " + the text's tokens."""
    return None if blank(prompt) else prompt_prefix(settings, text_ids(model, settings, prompt, "prompt"))


def hotword_ids(model: Any, settings: WhisperSettings, hotwords: str | Sequence[int] | None) -> list[int]:
    """faster-whisper's hotwords: the tokens of " " + the text, at most max_target_positions // 2 - 1."""
    if blank(hotwords):
        return []
    ids = text_ids(model, settings, hotwords, "hotwords")
    prompt_prefix(settings, ids)  # a model without <|startofprev|> takes none: one InputError
    return ids[: model.config.max_len // 2 - 1]


def prefix_ids(model: Any, settings: WhisperSettings, prefix: str | Sequence[int] | None, stamped: bool
               ) -> list[int]:
    """faster-whisper's prefix as the first window's forced first ids: <|0.00|> first with timestamps."""
    if blank(prefix):
        return []
    ids = text_ids(model, settings, prefix, "prefix")[: model.config.max_len // 2 - 1]
    return [settings.timestamp_begin, *ids] if stamped else ids
