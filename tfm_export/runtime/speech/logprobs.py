"""A transcription's per-token log-probabilities, as OpenAI's include[]=logprobs (runtime.speech.whisper's
`logprobs=True`), and the text of ids with the timestamps left out. Torch-free."""

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
