"""Samples -> Whisper's log-mel features, in numpy (no PyTorch), equal to transformers' WhisperFeatureExtractor.

The recipe (OpenAI's `whisper.audio.log_mel_spectrogram`): pad or trim the samples to one 30 s window, STFT
with a periodic Hann window and reflect padding (center=True), power spectrum, drop the last frame, Slaney
mel filters, log10 of max(mel, 1e-10), clamp at (the window's max - 8), then (x + 4) / 4. Internally float64
(numpy's FFT computes in float64 anyway), float32 out. Shapes: (n_mels, frames); a batch (batch, n_mels, frames).

Long recordings (long-form transcription): `log_mel_spectrogram` over the whole recording (one max, as
transformers does with padding="longest"), then `feature_window` cuts 30 s windows at any frame
(`feature_windows`: one after another).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ConfigError, InputError
from ..files import read_json_object

LOG_FLOOR = 1e-10      # mel power floor before log10 (-100 dB)
DYNAMIC_RANGE = 8.0    # log10 units kept below the loudest value (80 dB)
BLOCK_FRAMES = 4096    # STFT frames per FFT call: memory stays at (n_mels, frames), not (n_fft, frames)


@dataclass(frozen=True)
class FeatureConfig:
    """A Whisper preprocessor_config.json, typed. `to_dict` writes it back (with transformers' key names)."""

    n_mels: int = 80              # mel bins ("feature_size"): 80 for Whisper up to large-v2, 128 for large-v3
    sampling_rate: int = 16000    # Hz the model was trained on; recordings are resampled to it
    hop_length: int = 160         # samples between frames: 10 ms at 16 kHz
    n_fft: int = 400              # FFT and Hann window length: 25 ms at 16 kHz
    chunk_length: int = 30        # seconds in one encoder window
    n_samples: int | None = None      # chunk_length * sampling_rate: one window's samples (None: derived so)
    nb_max_frames: int | None = None  # n_samples // hop_length: one window's frames, the encoder's input (ditto)
    padding_value: float = 0.0    # the sample value short recordings are padded with (silence)

    def __post_init__(self):
        for field in ("n_mels", "sampling_rate", "hop_length", "n_fft", "chunk_length"):
            check_positive(field, getattr(self, field))
        # transformers derives the two window sizes itself; a file whose sizes disagree was edited by hand
        derived = {"n_samples": self.chunk_length * self.sampling_rate,
                   "nb_max_frames": self.chunk_length * self.sampling_rate // self.hop_length}
        for field, value in derived.items():
            if getattr(self, field) is None:
                object.__setattr__(self, field, value)  # frozen: set once, here
            check_positive(field, getattr(self, field))
            if getattr(self, field) != value:
                raise ConfigError(f"feature config: {field} is {getattr(self, field)} but chunk_length, "
                                  f"sampling_rate and hop_length give {value}; fix preprocessor_config.json")
        if not isinstance(self.padding_value, (int, float)) or not np.isfinite(self.padding_value):
            raise ConfigError(f"feature config: padding_value must be a number, got {self.padding_value!r}")

    @property
    def shape(self) -> tuple[int, int]:
        """(n_mels, frames) of one window's features: the encoder's input per batch row."""
        return self.n_mels, self.nb_max_frames

    @classmethod
    def from_preprocessor_config(cls, data: dict[str, Any]) -> "FeatureConfig":
        """From preprocessor_config.json's object (other keys, such as processor_class, are not features')."""
        kind = data.get("feature_extractor_type", "WhisperFeatureExtractor")
        if kind != "WhisperFeatureExtractor":
            raise ConfigError(f"feature config: {kind!r} is not WhisperFeatureExtractor; only Whisper's log-mel "
                              f"features are supported")
        if data.get("dither", 0.0) not in (0, 0.0, None):
            # transformers adds random noise then; Whisper's checkpoints are configured without it
            raise ConfigError(f"feature config: dither {data['dither']!r} is not supported; set it to 0.0")
        # transformers' key names; a missing key takes WhisperFeatureExtractor's default
        names = {"feature_size": "n_mels", **{field: field for field in FIELDS if field != "n_mels"}}
        return cls(**{field: data[key] for key, field in names.items() if key in data})

    def to_dict(self) -> dict[str, Any]:
        """preprocessor_config.json's keys (for a manifest): from_preprocessor_config(to_dict()) == self."""
        data = asdict(self)
        return {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": data.pop("n_mels"), **data}


FIELDS = tuple(FeatureConfig.__dataclass_fields__)


def check_positive(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"feature config: {field} must be a positive integer, got {value!r}")


def load_feature_config(folder: str | Path) -> FeatureConfig:
    """The FeatureConfig of a Whisper model folder (its preprocessor_config.json)."""
    data = read_json_object(Path(folder) / "preprocessor_config.json", ConfigError,
                            missing="a Whisper model folder has one (save the processor with the model)",
                            hint="save the processor again (WhisperProcessor.save_pretrained)")
    return FeatureConfig.from_preprocessor_config(data)


@functools.lru_cache(maxsize=8)
def mel_filters(n_mels: int, n_fft: int, sampling_rate: int) -> np.ndarray:
    """(n_mels, n_freqs) float64: Slaney-scale triangles from 0 Hz to Nyquist, each divided by its width.

    As librosa.filters.mel(norm="slaney") and transformers' mel_filter_bank(norm="slaney",
    mel_scale="slaney") (which hard-codes 8000 Hz: the Nyquist frequency of Whisper's 16 kHz)."""
    n_freqs = n_fft // 2 + 1
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sampling_rate / 2), n_mels + 2))  # (n_mels + 2,)
    fft_freqs = np.linspace(0, sampling_rate // 2, n_freqs)                                     # (n_freqs,)
    offsets = edges[None, :] - fft_freqs[:, None]                                             # (n_freqs, n_mels + 2)
    rising = -offsets[:, :-2] / np.diff(edges)[:-1]    # from each lower edge up to the centre
    falling = offsets[:, 2:] / np.diff(edges)[1:]      # from the centre down to the upper edge
    triangles = np.maximum(0.0, np.minimum(rising, falling))                                  # (n_freqs, n_mels)
    area = 2.0 / (edges[2:] - edges[:-2])  # Slaney: about equal energy per filter
    filters = (triangles * area[None, :]).T
    filters.setflags(write=False)  # cached: shared by every caller
    return filters


@functools.lru_cache(maxsize=8)
def mel_bands(n_mels: int, n_fft: int, sampling_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """mel_filters' nonzero weights, filter by filter, for `project`: (bins, weights), both (n_mels, width),
    each filter's bins from its first, padded with weight 0. A triangle covers a few bins (80 filters of 201
    bins: 391 weights, at most 14 a filter), so the projection reads a few per cent of the dense matrix."""
    filters = mel_filters(n_mels, n_fft, sampling_rate)
    nonzero = [np.flatnonzero(row) for row in filters]
    width = max(1, *(len(found) for found in nonzero))
    bins, weights = np.zeros((n_mels, width), np.int64), np.zeros((n_mels, width))
    for mel, found in enumerate(nonzero):
        bins[mel, :len(found)], weights[mel, :len(found)] = found, filters[mel, found]
    for array in (bins, weights):
        array.setflags(write=False)  # cached: shared by every caller
    return bins, weights


def project(power: np.ndarray, bands: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(n_mels, frames) = mel_filters @ power.T for power (frames, n_freqs), each filter's nonzero weights
    only (`mel_bands`), summed by einsum rather than BLAS: on a busy 2-core machine OpenBLAS's threads took
    43 ms for one 4 s window's (80, 201) @ (201, 401) product, 0.8 ms on one thread, this 0.3 ms."""
    bins, weights = bands
    return np.einsum("mkf,mk->mf", np.ascontiguousarray(power.T)[bins], weights)


# The Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4).
MIN_LOG_HZ, MIN_LOG_MEL, LOG_STEP = 1000.0, 15.0, np.log(6.4) / 27.0


def hz_to_mel(hz):
    hz = np.asarray(hz, dtype=np.float64)
    return np.where(hz >= MIN_LOG_HZ, MIN_LOG_MEL + np.log(np.maximum(hz, MIN_LOG_HZ) / MIN_LOG_HZ) / LOG_STEP,
                    3.0 * hz / 200.0)


def mel_to_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= MIN_LOG_MEL, MIN_LOG_HZ * np.exp(LOG_STEP * (np.maximum(mel, MIN_LOG_MEL) - MIN_LOG_MEL)),
                    200.0 * mel / 3.0)


@functools.lru_cache(maxsize=8)
def hann_window(n_fft: int) -> np.ndarray:
    """(n_fft,) periodic Hann (torch.hann_window's default): the symmetric n_fft + 1 window less its last point.
    Cached (read-only): a batched VAD transcription computes it once per 4 s chunk otherwise."""
    window = np.hanning(n_fft + 1)[:-1]
    window.setflags(write=False)
    return window


def as_samples(samples: Any) -> np.ndarray:
    """(samples,) float32, finite: what every feature function takes (float32 first, as transformers does)."""
    array = np.asarray(samples)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InputError(f"audio samples must be one mono channel of real numbers, got an array of shape "
                         f"{array.shape} and dtype {array.dtype}; mix channels with tfm_export.audio.load_audio")
    if array.size == 0:
        raise InputError("the audio holds no samples; pass a recording that is not empty")
    array = array.astype(np.float32, copy=False)
    if not np.isfinite(array).all():
        raise InputError("the audio holds NaN or infinite samples; re-export the recording")
    return array


def log_mel_spectrogram(samples: Any, config: FeatureConfig) -> np.ndarray:
    """(n_mels, len(samples) // hop_length) float32 of the samples as they are (no window padding)."""
    samples = as_samples(samples)
    if len(samples) < config.hop_length:
        raise InputError(f"the audio is {len(samples)} samples long, shorter than one feature frame "
                         f"({config.hop_length} samples); pass a longer recording")
    half = config.n_fft // 2
    padded = np.pad(samples, half, mode="reflect")  # center=True: frame t is centred on sample t * hop_length
    frames = np.lib.stride_tricks.sliding_window_view(padded, config.n_fft)[:: config.hop_length]  # (frames + 1, n_fft)
    count = len(frames) - 1  # the last frame is dropped, as Whisper does: 30 s gives exactly 3000 frames
    window = hann_window(config.n_fft)
    bands = mel_bands(config.n_mels, config.n_fft, config.sampling_rate)  # mel_filters' nonzero weights
    log_mel = np.empty((config.n_mels, count), dtype=np.float64)              # (n_mels, frames)
    for start in range(0, count, BLOCK_FRAMES):
        block = frames[start: min(start + BLOCK_FRAMES, count)] * window     # (block, n_fft) float64
        power = np.abs(np.fft.rfft(block, axis=-1)) ** 2                     # (block, n_freqs)
        log_mel[:, start: start + len(block)] = np.log10(np.maximum(project(power, bands), LOG_FLOOR))
    log_mel = np.maximum(log_mel, log_mel.max() - DYNAMIC_RANGE)
    return ((log_mel + 4.0) / 4.0).astype(np.float32)


def pad_or_trim(samples: Any, config: FeatureConfig) -> np.ndarray:
    """(n_samples,) float32: the first window's samples, padded with padding_value at the end."""
    samples = as_samples(samples)[: config.n_samples]
    return np.pad(samples, (0, config.n_samples - len(samples)), constant_values=config.padding_value)


def log_mel(samples: Any, config: FeatureConfig) -> np.ndarray:
    """(n_mels, nb_max_frames) float32: WhisperFeatureExtractor()(samples)'s features (the first 30 s)."""
    return log_mel_spectrogram(pad_or_trim(samples, config), config)


def log_mel_batch(batch: Sequence[Any], config: FeatureConfig) -> np.ndarray:
    """(batch, n_mels, nb_max_frames) float32; each recording clamped at its own max, as transformers does."""
    if len(batch) == 0:
        raise InputError("the audio batch is empty; pass at least one recording")
    return np.stack([log_mel(samples, config) for samples in batch])


def feature_window(features: np.ndarray, start_frame: int, config: FeatureConfig) -> np.ndarray:
    """(n_mels, nb_max_frames): the frames from `start_frame` of a whole recording's (n_mels, frames)
    features, the end padded with 0.0 as transformers' long-form generate and OpenAI's pad_or_trim do."""
    window = features[:, start_frame: start_frame + config.nb_max_frames]
    return np.pad(window, ((0, 0), (0, config.nb_max_frames - window.shape[1])))


def feature_windows(samples: Any, config: FeatureConfig) -> Iterator[tuple[int, np.ndarray]]:
    """(start_frame, (n_mels, nb_max_frames) features) for each 30 s window of a recording, one after another."""
    features = log_mel_spectrogram(samples, config)  # (n_mels, frames): one max over the whole recording
    for start in range(0, features.shape[1], config.nb_max_frames):
        yield start, feature_window(features, start, config)
