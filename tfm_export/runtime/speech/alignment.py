"""Word timestamps from Whisper's cross-attention, as transformers computes them. Torch-free.

A window's alignment heads (export.specs.alignment_spec: the cross-attention weights of config.alignment_heads,
softmaxed over all source positions) are read while each generated token is the decoder's input. As transformers'
`_extract_token_timestamps` (return_token_timestamps; the ASR pipeline's return_timestamps="word"): the rows of the
prompt are dropped, the source positions cropped to the audio's (num_frames // 2), each head normalised over the
tokens (mean 0, std 1), median-filtered along time (width 7, reflected edges), the heads averaged, and dynamic time
warping finds the monotonic path through -matrix; a token's time is where its row starts on the path (0.02 s a
position), the last token's (EOS) the one before it. A word starts at its first token's time and ends where the
next token starts (`words`, the tokenizer's `_combine_tokens_into_words`: split on spaces, or on whole characters for
languages written without them, punctuation merged into its word).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

TIME_PRECISION = 0.02  # seconds per encoder position
MEDIAN_FILTER_WIDTH = 7  # Whisper's config.median_filter_width (every published model's)
PREPEND = "\"'“¡¿([{-"  # punctuation that joins the next word (openai-whisper's and transformers' defaults)
APPEND = "\"'.。,，!！?？:：”)]}、"  # punctuation that joins the previous word
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# languages written without spaces: their words are whole characters
NO_SPACES = {"zh", "ja", "th", "lo", "my", "yue"}


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median of each `width` values along the last axis, edges reflected (transformers' _median_filter)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def dtw(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through `matrix` (tokens, time) from its first to its last cell: (token index,
    time index) per step. transformers' _dynamic_time_warping: float32 costs, ties to a time step, vectorised
    over the anti-diagonals (each cell needs the two before it)."""
    rows, cols = matrix.shape
    cost = np.full((rows + 1, cols + 1), np.inf, dtype=np.float32)
    trace = np.full((rows + 1, cols + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    for d in range(2, rows + cols + 1):
        i = np.arange(max(1, d - cols), min(rows, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        step = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        best = np.choose(step, [c0, c1, c2])
        cost[i, j] = matrix[i - 1, j - 1] + best.astype(np.float64)
        trace[i, j] = step
    trace[0, :], trace[:, 0] = 2, 1
    i, j, path = rows, cols, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        i, j = (i - 1, j - 1) if move == 0 else (i - 1, j) if move == 1 else (i, j - 1)
    text, time = np.array(path[::-1]).T
    return text, time


def token_times(weights: np.ndarray, num_frames: int | None, width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """weights (heads, rows, src_len): one row per generated token but the last, read while it was the input
    -> a time per generated token (seconds from the window's start; the last repeats the one before)."""
    if weights.shape[1] == 0:
        return np.zeros(1, dtype=np.float64)
    if num_frames is not None:
        weights = weights[..., : num_frames // 2]
    std = weights.std(axis=-2, keepdims=True)
    matrix = median_filter((weights - weights.mean(axis=-2, keepdims=True)) / std, width).mean(axis=0)
    text, time = dtw(-matrix.astype(np.float64))
    jumps = np.diff(text, prepend=-1).astype(bool)
    times = time[jumps] * TIME_PRECISION
    return np.append(times, times[-1])


def _split_on_characters(decode: Callable[[list[int]], str], tokens: Sequence[int]
                         ) -> tuple[list[str], list[list[int]]]:
    """Tokens grouped into whole characters: a group ends once its text has no incomplete UTF-8 (U+FFFD) that
    the whole sequence's text does not have there."""
    full, words, groups, current, offset = decode(list(tokens)), [], [], [], 0
    for token in tokens:
        current.append(token)
        text = decode(current)
        if "\ufffd" not in text or full[offset + text.index("\ufffd")] == "\ufffd":
            words.append(text)
            groups.append(current)
            current, offset = [], offset + len(text)
    return words, groups


def _split_on_spaces(decode: Callable[[list[int]], str], tokens: Sequence[int], special_from: int
                     ) -> tuple[list[str], list[list[int]]]:
    words: list[str] = []
    groups: list[list[int]] = []
    for text, group in zip(*_split_on_characters(decode, tokens)):
        starts = group[0] >= special_from or text.startswith(" ") or text.strip() in PUNCTUATION or not words
        if starts:
            words.append(text)
            groups.append(list(group))
        else:
            words[-1] += text
            groups[-1].extend(group)
    return words, groups


def _merge_punctuation(words: list[str], groups: list[list[int]]) -> None:
    """Opening punctuation joins the word after it, closing punctuation the word before (in place)."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        if words[i].startswith(" ") and words[i].strip() in PREPEND:
            words[j], groups[j] = words[i] + words[j], groups[i] + groups[j]
            words[i], groups[i] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        if not words[i].endswith(" ") and words[j] in APPEND:
            words[i], groups[i] = words[i] + words[j], groups[i] + groups[j]
            words[j], groups[j] = "", []
        else:
            i = j
        j += 1


def words(decode: Callable[[list[int]], str], tokens: Sequence[int], times: Sequence[float], special_from: int,
          language: str | None = None) -> list[dict[str, Any]]:
    """[{"word", "start", "end"}] of `tokens` (text tokens, their times; `times` has one more entry: where the
    token after the last starts). Token indices are grouped as transformers' _combine_tokens_into_words does."""
    if language in NO_SPACES:
        texts, groups = _split_on_characters(decode, list(tokens))
    else:
        texts, groups = _split_on_spaces(decode, list(tokens), special_from)
    ends = np.cumsum([len(group) for group in groups])  # a group's tokens are consecutive: their indices
    spans = [list(range(end - len(group), end)) for group, end in zip(groups, ends)]
    _merge_punctuation(texts, spans)
    return [{"word": text, "start": round(float(times[span[0]]), 2), "end": round(float(times[span[-1] + 1]), 2)}
            for text, span in zip(texts, spans) if text]
