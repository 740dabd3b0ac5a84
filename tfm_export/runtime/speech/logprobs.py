"""A transcription's per-token log-probabilities, as OpenAI's include[]=logprobs (runtime.speech.whisper's
`logprobs=True`), the text of ids with the timestamps left out, and the text so far that `on_text` is given
while streaming (with the log-probabilities so far, when asked for). Torch-free.

A token's `bytes` are its own, as OpenAI's (tiktoken's): for a byte-level BPE vocabulary (GPT-2's, Whisper's:
tokenizer.json's decoder ByteLevel) the token's string read back through the byte-level alphabet (GPT-2's
bytes_to_unicode), so that a token that is part of a multi-byte character gives its raw bytes (its `token`
text reads as U+FFFD) and the bytes of all tokens together decode to the text; for another vocabulary the
UTF-8 of the token's text."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from .longform import Segment


def text_reader(model: Any, begin: int) -> Callable[[Sequence[int]], str]:
    """ids -> their text, the timestamps left out (ids joined by spaces for an export without a tokenizer)."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def text_of(ids: Sequence[int]) -> str:
        kept = [t for t in ids if t < begin]
        return tokenizer.decode(kept) if tokenizer is not None else " ".join(map(str, kept))

    return text_of


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: a byte-level token's character -> the byte it stands for."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), ord("\xff") + 1)}
    alphabet, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            alphabet[chr(byte)] = byte
        else:  # the others are moved past 255, in order
            alphabet[chr(256 + extra)] = byte
            extra += 1
    return alphabet


BYTE_OF = _byte_alphabet()


def _byte_level(tokenizer: Any) -> bool:
    """Whether a tokenizers.Tokenizer decodes byte-level tokens (its decoder ByteLevel, alone or in a Sequence)."""
    try:
        decoder = json.loads(tokenizer.decoder.__getstate__())
    except Exception:  # no decoder, or one the library cannot write out
        return False
    kinds = [decoder] + list(decoder.get("decoders", []))
    return any(kind.get("type") == "ByteLevel" for kind in kinds)


def bytes_reader(model: Any) -> Callable[[int, str], list[int]]:
    """(token id, its text) -> OpenAI's `bytes` of the token (the module docstring); a token whose text is
    empty (a special token, skipped by decode) has none."""
    wrapped = model.tokenizer if model.manifest.tokenizer else None
    vocabulary = getattr(wrapped, "tokenizer", None)  # text.hf.HFTokenizer's tokenizers.Tokenizer
    if vocabulary is None or not _byte_level(vocabulary):
        return lambda token, text: list(text.encode("utf-8"))

    def read(token: int, text: str) -> list[int]:
        piece = vocabulary.id_to_token(int(token)) if text else ""
        if piece is None or any(c not in BYTE_OF for c in piece):  # an added token outside the alphabet
            return list(text.encode("utf-8"))
        return [BYTE_OF[c] for c in piece]

    return read


def token_logprobs(model: Any, segments: Sequence[Segment], begin: int) -> list[dict[str, Any]]:
    """Each text token of the segments with its log-probability in the try that stayed, as OpenAI's
    include[]=logprobs: {token (its text), logprob, bytes (the token's own: bytes_reader)}. A window's segments
    are its ids in order (runtime.speech.longform.split_segments), so a segment's tokens are found by position;
    a prefix's forced ids have logprob 0."""
    text_of, bytes_of = text_reader(model, begin), bytes_reader(model)
    out: list[dict[str, Any]] = []
    window, cursor = None, 0
    for segment in segments:
        if segment.window is not window:
            window, cursor = segment.window, 0
        logprobs = window.logprobs if window is not None else ()
        for n, token in enumerate(segment.tokens):
            if token < begin and cursor + n < len(logprobs):
                text = text_of([token])
                out.append({"token": text, "logprob": logprobs[cursor + n], "bytes": bytes_of(token, text)})
        cursor += len(segment.tokens)
    return out


class TextSoFar(str):
    """`on_text`'s argument with `logprobs=True`: the text so far, a str, whose `logprobs` are its tokens' entries
    (token_logprobs' of the segments so far): the start of the answer's `logprobs`, so a stream can send each
    piece of text with its tokens' (OpenAI's transcript.text.delta `logprobs`). Without logprobs `on_text` is
    given a plain str."""

    logprobs: list[dict[str, Any]]

    def __new__(cls, text: str, logprobs: Sequence[dict[str, Any]]) -> "TextSoFar":
        made = super().__new__(cls, text)
        made.logprobs = list(logprobs)
        return made


def logprobs_so_far(text: str) -> list[dict[str, Any]] | None:
    """A streamed text's log-probabilities (TextSoFar's), None for a plain str."""
    return getattr(text, "logprobs", None)


def streamed_text(model: Any, segments: Sequence[Segment], begin: int, logprobs: bool) -> str:
    """What `on_text` is given after a window: the segments' text so far, with their logprobs when asked for."""
    text = text_reader(model, begin)([t for s in segments for t in s.tokens])
    return TextSoFar(text, token_logprobs(model, segments, begin)) if logprobs else text
