"""What a decode starts from and how long it may run: the source checks of every runner. Torch-free.

The encoder's input is declared in the manifest (Manifest.encoder_input): token ids (export.specs.TOKEN_IDS),
which `source_batch` pads and checks, or floats (`float_source`): Whisper's fixed feature windows
(`feature_batch`) or variable-length frames (`frame_batch`, padded with NaN). One check for the ONNX and
eager runners.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Sequence

import numpy as np

from ..errors import InputError, first_line

# What a padded frame holds: the encoder masks these positions out (model.frontend.frame_mask).
FRAME_PAD = np.nan

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def pad_batch(sources: Sequence[Sequence[int]], pad_id: int) -> list[list[int]]:
    """Right-pad id lists to one length; anything but lists of int64 ids is an InputError."""
    if len(sources) == 0:
        raise InputError("no sources given; pass at least one sequence of token ids")
    rows = [_ids(source, n) for n, source in enumerate(sources, 1)]
    width = max(len(r) for r in rows)
    if width == 0:
        raise InputError("every source is empty; pass at least one token id")
    return [r + [pad_id] * (width - len(r)) for r in rows]


def _ids(source: Sequence[int], n: int) -> list[int]:
    """One source as Python ints (numpy cannot hold ids beyond int64: OverflowError otherwise)."""
    try:
        ids = [operator.index(i) for i in source]
    except TypeError:
        raise InputError(f"source {n} is not a list of integer token ids") from None
    if any(not INT64_MIN <= i <= INT64_MAX for i in ids):  # no str(id): huge ints cannot be printed
        raise InputError(f"source {n} has a token id out of range (beyond 64-bit integers)")
    return ids


def source_batch(sources: Sequence[Sequence[int]], config: Any) -> np.ndarray:
    """Sources padded into one (batch, src_len) int64 array, checked against the model's vocabulary and
    max_len: the one source check of every runner (ONNX Runtime and eager)."""
    src = np.asarray(pad_batch(sources, config.src_pad_id), dtype=np.int64)  # (batch, src_len)
    bad = src[(src < 0) | (src >= config.src_vocab_size)]
    if bad.size:
        raise InputError(f"source id {int(bad[0])} is out of range for a vocabulary of "
                         f"{config.src_vocab_size} ids")
    if src.shape[1] > config.max_len:
        raise InputError(f"source length {src.shape[1]} exceeds the model's max_len ({config.max_len}); "
                         f"shorten or split the input")
    return src


def feature_batch(features: Any, declared: Any) -> np.ndarray:
    """Features as the encoder declares them: a float array (batch, n_mels, n_frames) (a list of
    (n_mels, n_frames) arrays is stacked), cast to the declared float type; anything else, or
    non-finite values, is one InputError naming the shape wanted."""
    want = f"a float array (batch, {', '.join(map(str, declared.shape[1:]))}) of {declared.name}"
    try:
        array = np.asarray(features)
    except (ValueError, TypeError):  # ragged lists
        raise InputError(f"the features are not one array; pass {want}") from None
    fixed = list(declared.shape[1:])
    if array.dtype.kind != "f" or array.ndim != len(declared.shape) or list(array.shape[1:]) != fixed \
            or array.shape[0] == 0:
        raise InputError(f"the features are {array.dtype} {tuple(array.shape)}; this export's encoder reads {want} "
                         f"(audio.features.log_mel_batch makes them)")
    if not np.isfinite(array).all():
        raise InputError(f"the features hold NaN or infinite values; pass {want}")
    return np.ascontiguousarray(array, dtype=declared.dtype)  # (batch, n_mels, n_frames)


def frame_batch(frames: Any, declared: Any, max_len: int) -> np.ndarray:
    """Variable-length frames as the encoder declares them (batch, src_len, n_feats): a list of (frames,
    n_feats) float arrays, or one (batch, frames, n_feats) array (every row whole), right-padded with NaN
    to the longest; anything else, non-finite values or more than `max_len` frames is one InputError."""
    n_feats = declared.shape[-1]
    want = f"float arrays (frames, {n_feats}) of {declared.name}, one per source"
    if isinstance(frames, np.ndarray) and frames.ndim != 3:
        raise InputError(f"the frames are one array of shape {frames.shape}; pass {want} (or one array "
                         f"(batch, frames, {n_feats}))")
    rows = list(frames) if isinstance(frames, (list, tuple, np.ndarray)) else None
    if not rows:
        raise InputError(f"no frames given; pass {want}")
    rows = [_frames(row, n, n_feats, want, max_len) for n, row in enumerate(rows, 1)]
    batch = np.full((len(rows), max(len(r) for r in rows), n_feats), FRAME_PAD, dtype=declared.dtype)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch  # (batch, src_len, n_feats)


def _frames(row: Any, n: int, n_feats: int, want: str, max_len: int) -> np.ndarray:
    try:
        array = np.asarray(row)
    except (ValueError, TypeError):  # ragged lists
        raise InputError(f"source {n} is not one array; pass {want}") from None
    if array.dtype.kind != "f" or array.ndim != 2 or array.shape[1] != n_feats or array.shape[0] == 0:
        raise InputError(f"source {n} is {array.dtype} {tuple(array.shape)}; this export's encoder reads {want}")
    if not np.isfinite(array).all():
        raise InputError(f"source {n} holds NaN or infinite values; pass {want}")
    if array.shape[0] > max_len:
        raise InputError(f"source {n} has {array.shape[0]} frames, more than the model's max_len ({max_len}); "
                         f"shorten or split the input")
    return array


def float_source(sources: Any, declared: Any, max_len: int) -> np.ndarray:
    """A float encoder input by its declaration (a TensorSpec): frames when its length is free (src_len),
    padded here; else whole feature windows of the fixed shape. Token ids (text encoded) are refused first:
    the usual mistake, whose shape alone would say little."""
    if _token_ids(sources):
        shape = ", ".join("frames" if axis == "src_len" else str(axis) for axis in declared.shape[1:])
        raise InputError(f"this export's encoder reads float features ({declared.name}: ({shape}) a source), not "
                         "token ids or text; pass those (a Whisper export transcribes audio: `tfm-export transcribe "
                         "FOLDER AUDIO`)")
    if "src_len" in declared.shape:
        return frame_batch(sources, declared, max_len)
    return feature_batch(sources, declared)


def _token_ids(sources: Any) -> bool:
    """Whether `sources` are rows of integers (token ids, or text encoded), not float features."""
    try:
        rows = list(sources)
        return bool(rows) and all(np.asarray(row).dtype.kind in "iu" for row in rows)
    except (TypeError, ValueError):  # not rows, or ragged ones
        return False


def read_feature_file(path: str | os.PathLike, declared: Any) -> list[np.ndarray]:
    """The sources in a .npy file for the float encoder input `declared` (Manifest.encoder_input): one source
    (an array of the declared shape less its batch axis, e.g. frames (frames, n_feats)), or several (with
    it). Not a .npy array, or not that shape: one InputError naming the file. The values are checked when
    decoded (`float_source`)."""
    if declared.dtype not in ("float32", "float16"):
        raise InputError(f"this export's encoder reads token ids ({declared.name}), not features; pass token ids "
                         f"or text instead of {path}")
    try:
        array = np.load(path, allow_pickle=False)  # never unpickle: a .npy is data
    except OSError as exc:
        raise InputError(f"cannot read {path}: {first_line(exc, 120)}") from None
    except (ValueError, EOFError):  # numpy's message speaks of pickles whatever the file holds
        raise InputError(f"{path} is not a .npy array file; save the features with numpy.save") from None
    if not isinstance(array, np.ndarray):  # a .npz archive
        raise InputError(f"{path} is a .npz archive; save each source's features as one .npy file (numpy.save)")
    per_source = declared.shape[1:]  # ("src_len", n_feats) or (n_mels, n_frames)
    fixed = [(i, d) for i, d in enumerate(per_source) if not isinstance(d, str)]
    wanted = f"({', '.join('frames' if isinstance(d, str) else str(d) for d in per_source)})"
    rows = [array] if array.ndim == len(per_source) else list(array) if array.ndim == len(per_source) + 1 else None
    if rows is None or array.dtype.kind != "f" or any(r.shape[i] != d for r in rows[:1] for i, d in fixed):
        raise InputError(f"{path} holds {array.dtype} {tuple(array.shape)}; this export's encoder reads "
                         f"{declared.name} as float {wanted} per source (or (sources, ...) for several)")
    return rows


# Random example sources when an export records no sample texts: how many sources (and, for an encoder of
# fixed windows, how many windows: each is a whole 30 s window), and their longest length.
EXAMPLE_SOURCES, EXAMPLE_WINDOWS, EXAMPLE_MAX_LEN = 8, 2, 12


def example_sources(manifest: Any, tokenizer: Any = None, seed: int = 0, count: int = EXAMPLE_SOURCES,
                    windows: int = EXAMPLE_WINDOWS) -> tuple[Any, str]:
    """The sources an export's checks decode, and where they come from ("sample" or "random"): its sample texts
    encoded when it has both samples and a `tokenizer`, else seeded random sources of what its encoder reads:
    `count` id rows of random lengths (ids drawn evenly from the vocabulary without the padding id: a pad inside
    a row is not a source), `windows` whole log-mel windows (an array (windows, n_mels, n_frames)) or `count`
    frame arrays (frames, n_feats) of random lengths. The runtime's checks (runtime.verify) and the export's
    validation (export.decoding_checks) both decode these."""
    if manifest.samples and tokenizer is not None:
        return [tokenizer.encode(text) for text in manifest.samples], "sample"
    cfg = manifest.config
    rng = np.random.default_rng(seed)
    kind = cfg.source_kind
    if "src_len" not in kind.axes:  # a few whole windows: (sources, n_mels, n_frames)
        return rng.standard_normal((windows, *kind.input_axes(cfg)[1:]), dtype=np.float32), "random"
    lengths = rng.integers(1, min(cfg.max_len, EXAMPLE_MAX_LEN) + 1, count)
    if not kind.ids:  # (frames, n_feats) each, of random lengths
        return [rng.standard_normal((n, *kind.input_axes(cfg)[2:]), dtype=np.float32) for n in lengths], "random"
    ids = [rng.integers(0, cfg.src_vocab_size - 1, n) for n in lengths]
    return [[int(t + (t >= cfg.src_pad_id)) for t in row] for row in ids], "random"


def resolve_max_new_tokens(max_new_tokens: int | None, prefix_len: int, max_len: int,
                           limit: str = "the model's max_len") -> int:
    """Default to filling the position table; refuse a request that cannot fit."""
    room = max_len - prefix_len + 1  # the last generated token is never fed back
    if max_new_tokens is None:
        return room
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if max_new_tokens > room:
        raise InputError(f"max_new_tokens ({max_new_tokens}) does not fit {limit} ({max_len}); use at most {room}")
    return max_new_tokens


def trim(row: list[int], eos_id: int) -> list[int]:
    """Cut a generated row at its first EOS (exclusive)."""
    return row[: row.index(eos_id)] if eos_id in row else row
