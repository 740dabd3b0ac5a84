"""Speech in, features out: the audio analogue of `text/` (Whisper, issue #39). Torch-free.

    samples = load_audio("talk.mp3", config.sampling_rate)   # (samples,) float32 mono at 16 kHz
    features = log_mel(samples, config)                      # (n_mels, frames) float32: the encoder's input

`io` decodes (WAV, FLAC, MP3, OGG via libsndfile), mixes to mono and resamples (soxr); `features` is
the typed preprocessor config and the log-mel spectrogram. Needs the `audio` extra (soundfile, soxr):
`features` alone needs only numpy, so it is imported here and `io` is imported on first use.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

from .features import (FeatureConfig, feature_window, feature_windows, load_feature_config, log_mel, log_mel_batch,
                       log_mel_spectrogram, mel_filters, pad_or_trim)

IO_NAMES = ("load_audio", "resample", "check_files", "DEFAULT_MAX_SECONDS")

__all__ = ["FeatureConfig", "feature_window", "feature_windows", "load_feature_config", "log_mel", "log_mel_batch",
           "log_mel_spectrogram", "mel_filters", "pad_or_trim", *IO_NAMES]


def __getattr__(name: str) -> Any:
    # soundfile and soxr load only when audio is read: the features work where the audio extra is missing
    if name in IO_NAMES:
        try:
            from . import io
        except ImportError as exc:
            raise ConfigError(f"reading audio needs the audio extra: pip install 'tfm-export[audio]' ({exc})") from None
        return getattr(io, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
