"""Audio in: a recording (WAV, FLAC, MP3, OGG; a path or bytes) -> mono float32 samples at the model's rate.

Decoding is libsndfile's (the `soundfile` package, which bundles it in its wheels), resampling is libsoxr's
(`soxr`). Both work block by block, so memory follows the output (16 kHz mono float32: 230 MB an hour), not
the file (48 kHz stereo: 1.4 GB an hour as float32). Every way a recording can be unusable is an InputError
with one line that names the file and what to do; libsndfile's own messages are often empty ("Error opening
...: "), so the kind of file is told from its first bytes (`sniff`).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence, Union

import numpy as np
import soundfile
import soxr

from ..errors import AudioTooLong, InputError

AudioSource = Union[str, os.PathLike, bytes, bytearray, memoryview]

FORMATS = "WAV, FLAC, MP3 or OGG"
DEFAULT_MAX_SECONDS = 3600.0  # an hour: a long-form recording, not a mistaken path to a day of audio
BLOCK_FRAMES = 1 << 18        # frames decoded (and resampled) at a time: ~5 s at 48 kHz
HEAD_BYTES = 4096             # what `sniff` looks at
QUALITY = "HQ"                # soxr's default, and librosa's ("soxr_hq")


def load_audio(source: AudioSource, sampling_rate: int = 16000, *, max_seconds: float | None = DEFAULT_MAX_SECONDS,
               name: str | None = None) -> np.ndarray:
    """The recording as (samples,) float32 in [-1, 1]: channels averaged, resampled to `sampling_rate`.

    `source` is a path or the file's bytes (`name` labels bytes in errors). Longer than `max_seconds`
    (None: no limit) is an InputError, raised before decoding when the header tells the length."""
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int) or sampling_rate <= 0:
        raise InputError(f"sampling_rate must be a positive integer (Hz), got {sampling_rate!r}")
    label = name or ("the audio bytes" if isinstance(source, (bytes, bytearray, memoryview)) else str(source))
    with open_audio(source, label) as opened:
        # MP3 headers may only estimate the length: the limit is checked again on what is decoded
        check_length(opened.frames / opened.samplerate, max_seconds, label)
        return decode(opened, sampling_rate, max_seconds, label)


@contextlib.contextmanager
def open_audio(source: AudioSource, label: str) -> Iterator[soundfile.SoundFile]:
    """An open libsndfile reader, or the one-line InputError that says why there is none.

    Paths are opened as nameless file objects, like bytes: libsndfile then tells the format from the
    content alone (given a name, soundfile takes a `.raw` suffix for headerless audio and asks for its rate)."""
    with binary_file(source, label) as handle:
        head = handle.read(HEAD_BYTES)
        if not head:
            raise InputError(f"{label} is empty (0 bytes); pass a {FORMATS} recording")
        handle.seek(0)
        try:
            reader = soundfile.SoundFile(handle)
        except (soundfile.SoundFileError, RuntimeError) as exc:
            raise unreadable(head, label, exc) from None
        with reader:
            yield reader


def check_file(path: Path, label: str) -> None:
    """InputError unless `path` is a file (what can be told before reading it)."""
    if not path.exists():
        raise InputError(f"{label}: no such file; check the path")
    if path.is_dir():
        raise InputError(f"{label} is a folder; pass an audio file ({FORMATS})")


def check_files(paths: Sequence[str | os.PathLike]) -> None:
    """Every recording of a batch checked before the first is decoded: a missing one fails the command before
    any transcript is written (transcribe --output-dir)."""
    for path in paths:
        check_file(Path(path), str(path))


def binary_file(source: AudioSource, label: str) -> BinaryIO:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source))
    path = Path(source)
    check_file(path, label)
    try:
        # through its descriptor: a file object named by its descriptor gives soundfile no suffix to go by
        return open(os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0)), "rb")
    except OSError as exc:
        raise InputError(f"{label} cannot be read ({exc.strerror or type(exc).__name__}); check its permissions") \
            from None


def unreadable(head: bytes, label: str, exc: BaseException) -> InputError:
    """Why libsndfile could not open a file: damaged, a format it does not decode, text, or not audio at all."""
    kind, supported = sniff(head)
    detail = libsndfile_detail(exc)
    if supported:
        return InputError(f"{label} is a damaged {kind} file ({detail}); re-encode or re-export it")
    if kind:
        return InputError(f"{label} is {kind}, which is not supported; convert it to {FORMATS} "
                          f"(e.g. ffmpeg -i IN OUT.wav)")
    if looks_like_text(head):
        return InputError(f"{label} is text, not audio; pass a {FORMATS} recording")
    return InputError(f"{label} is not audio in a known format; pass a {FORMATS} recording")


def libsndfile_detail(exc: BaseException) -> str:
    """libsndfile's reason without its 'Error opening <_io.BytesIO object at 0x...>: ' prefix."""
    text = getattr(exc, "error_string", None) or str(exc)
    text = text.rpartition(": ")[2] if text.startswith("Error") else text
    return " ".join(text.split()).rstrip(".") or "libsndfile could not open it"


def sniff(head: bytes) -> tuple[str | None, bool]:
    """(what the first bytes say the file is, whether libsndfile decodes it); (None, False) when unknown."""
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return "WAV", True
    if head[:4] == b"fLaC":
        return "FLAC", True
    if head[:4] == b"OggS":
        return "OGG", True
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "AIFF", True
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06):
        return "MP3", True  # an ID3 tag, or an MPEG audio frame sync with a layer (ADTS AAC has layer bits 00)
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "AAC audio", False
    if head[4:8] == b"ftyp":
        return "MP4/M4A", False
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "Matroska/WebM", False
    if head[:4] == b"\x30\x26\xb2\x75":
        return "WMA/ASF", False
    if head[:5] == b"#!AMR":
        return "AMR audio", False
    return None, False


def looks_like_text(head: bytes) -> bool:
    """UTF-8 (a character cut at the end of `head` allowed) without NUL bytes: binary formats are full of them."""
    if b"\x00" in head:
        return False
    for cut in range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


def check_length(seconds: float, max_seconds: float | None, label: str) -> None:
    if max_seconds is not None and seconds > max_seconds:
        raise AudioTooLong(f"{label} is {seconds:.1f} s long, over the limit of {max_seconds:g} s (max_seconds); "
                         f"split the recording or raise max_seconds")


def decode(opened: soundfile.SoundFile, sampling_rate: int, max_seconds: float | None, label: str) -> np.ndarray:
    """Decode block by block: mix each block to mono, feed it to one soxr stream, check length and values."""
    stream = None if opened.samplerate == sampling_rate else \
        soxr.ResampleStream(opened.samplerate, sampling_rate, 1, dtype="float32", quality=QUALITY)
    pieces, frames = [], 0
    try:
        for block in opened.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):  # (frames, channels)
            frames += len(block)
            check_length(frames / opened.samplerate, max_seconds, label)
            mono = to_mono(block)
            if not np.isfinite(mono).all():
                raise InputError(f"{label} holds NaN or infinite samples; re-export the recording")
            pieces.append(stream.resample_chunk(mono) if stream else mono)
    except (soundfile.SoundFileError, RuntimeError) as exc:
        raise InputError(f"{label} is a damaged {opened.format} file: decoding failed ({libsndfile_detail(exc)}); "
                         f"re-encode or re-export it") from None
    if frames == 0:
        raise InputError(f"{label} holds no audio samples; pass a recording that is not empty")
    if stream:
        pieces.append(stream.resample_chunk(np.zeros(0, np.float32), last=True))  # the filter's tail
    return np.concatenate(pieces).astype(np.float32, copy=False)


def to_mono(block: np.ndarray) -> np.ndarray:
    """(frames, channels) -> (frames,): the channels' mean, as ffmpeg's `-ac 1` downmix that Whisper uses."""
    return block[:, 0] if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """(frames,) or (frames, channels) float32 at `from_rate` -> the same at `to_rate` (soxr, HQ)."""
    samples = np.asarray(samples, dtype=np.float32)
    return samples if from_rate == to_rate else soxr.resample(samples, from_rate, to_rate, quality=QUALITY)
