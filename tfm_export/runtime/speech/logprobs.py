"""A transcription's per-token log-probabilities, as OpenAI's include[]=logprobs (runtime.speech.whisper's
`logprobs=True`), the text of ids with the timestamps left out, and the text so far that `on_text` is given
while streaming (with the log-probabilities so far, when asked for). Torch-free."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .longform import Segment


def text_reader(model: Any, begin: int) -> Callable[[Sequence[int]], str]:
    """ids -> their text, the timestamps left out (ids joined by spaces for an export without a tokenizer)."""
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def text_of(ids: Sequence[int]) -> str:
        kept = [t for t in ids if t < begin]
        return tokenizer.decode(kept) if tokenizer is not None else " ".join(map(str, kept))

    return text_of


def token_logprobs(model: Any, segments: Sequence[Segment], begin: int) -> list[dict[str, Any]]:
    """Each text token of the segments with its log-probability in the try that stayed, as OpenAI's
    include[]=logprobs: {token (its text), logprob, bytes (that text's UTF-8 bytes)}. A window's segments are
    its ids in order (runtime.speech.longform.split_segments), so a segment's tokens are found by position;
    a prefix's forced ids have logprob 0."""
    text_of = text_reader(model, begin)
    out: list[dict[str, Any]] = []
    window, cursor = None, 0
    for segment in segments:
        if segment.window is not window:
            window, cursor = segment.window, 0
        logprobs = window.logprobs if window is not None else ()
        for n, token in enumerate(segment.tokens):
            if token < begin and cursor + n < len(logprobs):
                text = text_of([token])
                out.append({"token": text, "logprob": logprobs[cursor + n], "bytes": list(text.encode("utf-8"))})
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
