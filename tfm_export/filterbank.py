"""Samples -> Kaldi filterbank frames, for a model whose encoder reads frames (source "frames", issue #39).

`Filterbank` is the manifest's declaration (Manifest.filterbank): data, not code. Its fields are Kaldi's
compute-fbank-feats options under the names of kaldi-native-fbank's FbankOptions, with the defaults of
torchaudio.compliance.kaldi.fbank (what a speech tutorial's readers call on torchaudio.load's samples:
dither 0, energy floor 1, a povey window of 25 ms every 10 ms, low_freq 20 Hz, log power mel energies),
plus what goes around the filterbank: the sample scale (1: samples in [-1, 1] as torchaudio.load gives
them; 32768: Kaldi's and WeNet's 16-bit scale) and a per-utterance normalisation. `frames` computes them
with kaldi-native-fbank (the `audio` extra), imported on first use. Shapes: (frames, num_mel_bins).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .errors import ConfigError, InputError

KIND = "kaldi-fbank"  # the only filterbank so far: Kaldi's recipe, computed by kaldi-native-fbank
WINDOWS = ("povey", "hamming", "hanning", "rectangular", "blackman")  # kaldi-native-fbank's window types


def _mean(frames: np.ndarray) -> np.ndarray:
    return frames - frames.mean(axis=0, keepdims=True)


def _mean_var(frames: np.ndarray) -> np.ndarray:
    # the floor keeps a constant bin (silence floored at log(eps)) finite instead of dividing by 0
    return _mean(frames) / np.maximum(frames.std(axis=0, keepdims=True), 1e-5)


# Per-utterance normalisation after the filterbank -> what it does to the (frames, bins) array. "mean" is
# torchaudio's subtract_mean (Kaldi's apply-cmvn --norm-vars=false over the utterance).
NORMALIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {"none": lambda f: f, "mean": _mean,
                                                            "mean_var": _mean_var}


@dataclass(frozen=True)
class Filterbank:
    """How an export's frames are computed from audio; `to_dict` is the manifest's `filterbank` section."""

    num_mel_bins: int                  # the frames' width: the model's n_feats (less one with use_energy)
    sample_rate: int = 16000           # Hz; recordings are resampled to it
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0       # 100 frames a second
    dither: float = 0.0                # torchaudio's default; Kaldi's 1.0 adds noise: a decode would not repeat
    preemph_coeff: float = 0.97
    remove_dc_offset: bool = True
    window_type: str = "povey"
    round_to_power_of_two: bool = True
    blackman_coeff: float = 0.42
    snip_edges: bool = True            # only whole frames: 1 + (samples - 400) // 160 of them at 16 kHz
    low_freq: float = 20.0
    high_freq: float = 0.0             # <= 0: offset from the Nyquist frequency
    use_energy: bool = False           # a log-energy column first
    energy_floor: float = 1.0
    raw_energy: bool = True
    use_log_fbank: bool = True
    use_power: bool = True
    sample_scale: float = 1.0          # multiplies the [-1, 1] samples before the filterbank
    normalize: str = "none"            # key of NORMALIZE
    kind: str = KIND

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value, kind = getattr(self, field.name), FIELD_TYPES[field.name]
            if isinstance(value, int) and not isinstance(value, bool) and kind is float:
                object.__setattr__(self, field.name, float(value))  # frozen: JSON writes 16000.0 as 16000
            elif type(value) is not kind:
                raise ConfigError(f"filterbank: {field.name} must be {kind.__name__}, got {value!r}")
        choices = {"kind": (KIND,), "window_type": WINDOWS, "normalize": tuple(NORMALIZE)}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"filterbank: {name} must be one of {', '.join(allowed)}, got "
                                  f"{getattr(self, name)!r}")
        positive = ("num_mel_bins", "sample_rate", "frame_length_ms", "frame_shift_ms", "sample_scale")
        bad = [name for name in positive if not getattr(self, name) > 0]
        if bad or self.dither < 0:
            raise ConfigError(f"filterbank: {(bad or ['dither'])[0]} must be "
                              f"{'positive' if bad else 'at least 0'}, got {getattr(self, (bad or ['dither'])[0])!r}")
        if self.frame_samples < 2:
            raise ConfigError(f"filterbank: a frame of {self.frame_length_ms:g} ms at {self.sample_rate} Hz holds "
                              f"{self.frame_samples} samples; use longer frames")

    @property
    def n_feats(self) -> int:
        """Values per frame: the mel bins, plus the energy column with use_energy."""
        return self.num_mel_bins + self.use_energy

    @property
    def frame_samples(self) -> int:
        return int(self.sample_rate * self.frame_length_ms / 1000)

    def seconds(self, frames: int) -> float:
        """About how much audio `frames` frames cover (for messages)."""
        return frames * self.frame_shift_ms / 1000

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {"kind": data.pop("kind"), **data}  # what it is first

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Filterbank":
        unknown = sorted(set(data) - set(FIELD_TYPES))
        if unknown:
            raise ConfigError(f"filterbank: unknown option {unknown[0]!r}; known: {', '.join(FIELD_TYPES)}")
        if "num_mel_bins" not in data:
            raise ConfigError("filterbank: num_mel_bins is missing")
        return cls(**data)

    def options(self) -> Any:
        """kaldi-native-fbank's FbankOptions for these fields (what torchaudio's fbank takes by keyword)."""
        knf = _kaldi_native_fbank()
        opts = knf.FbankOptions()
        frame = {"samp_freq": float(self.sample_rate), "frame_length_ms": self.frame_length_ms,
                 "frame_shift_ms": self.frame_shift_ms, "dither": self.dither, "preemph_coeff": self.preemph_coeff,
                 "remove_dc_offset": self.remove_dc_offset, "window_type": self.window_type,
                 "round_to_power_of_two": self.round_to_power_of_two, "blackman_coeff": self.blackman_coeff,
                 "snip_edges": self.snip_edges}
        for name, value in frame.items():
            setattr(opts.frame_opts, name, value)
        mel = {"num_bins": self.num_mel_bins, "low_freq": self.low_freq, "high_freq": self.high_freq}
        for name, value in mel.items():
            setattr(opts.mel_opts, name, value)
        for name in ("use_energy", "energy_floor", "raw_energy", "use_log_fbank", "use_power"):
            setattr(opts, name, getattr(self, name))
        return opts


FIELD_TYPES: dict[str, type] = typing.get_type_hints(Filterbank)  # the annotations are strings here


def _kaldi_native_fbank() -> Any:
    try:
        import kaldi_native_fbank
    except ImportError as exc:
        raise ConfigError(f"computing filterbank frames needs the audio extra: pip install 'tfm-export[audio]' "
                          f"({exc})") from None
    return kaldi_native_fbank


def frames(samples: np.ndarray, filterbank: Filterbank) -> np.ndarray:
    """(frames, n_feats) float32 of (samples,) float32 at filterbank.sample_rate; a recording shorter than
    one frame is an InputError."""
    if len(samples) < filterbank.frame_samples:
        raise InputError(f"the audio is {len(samples) / filterbank.sample_rate * 1000:.0f} ms long, shorter than "
                         f"one filterbank frame ({filterbank.frame_length_ms:g} ms); pass a longer recording")
    computer = _kaldi_native_fbank().OnlineFbank(filterbank.options())
    computer.accept_waveform(float(filterbank.sample_rate),
                             np.ascontiguousarray(samples * filterbank.sample_scale, dtype=np.float32))
    computer.input_finished()
    out = np.array([computer.get_frame(i) for i in range(computer.num_frames_ready)], dtype=np.float32)
    return NORMALIZE[filterbank.normalize](out.reshape(-1, filterbank.n_feats)).astype(np.float32, copy=False)
