"""The reference of the filterbank test: torchaudio.compliance.kaldi.fbank's recipe (Kaldi's compute-fbank-feats)
at its defaults, written out in float32 torch as torchaudio computes it (torchaudio is not a dependency).

Not a test module. Frames of 25 ms every 10 ms (whole frames only: snip_edges), each: its mean removed,
pre-emphasis 0.97 (the first sample against itself), a povey window (a symmetric Hann to the power 0.85),
zero-padded to a power of two, |rfft|^2, triangular filters equally spaced on Kaldi's mel scale
(1127 ln(1 + f / 700)) from 20 Hz to Nyquist, log of max(energy, float32 eps). No dither, no energy column.
"""

from __future__ import annotations

import numpy as np
import torch

EPS = torch.finfo(torch.float32).eps


def mel_banks(bins: int, padded: int, rate: float, low: float = 20.0, high: float = 0.0) -> torch.Tensor:
    """(bins, padded // 2 + 1) triangular filters; the last column (Nyquist) is 0, as Kaldi's."""
    high = high if high > 0 else rate / 2 + high
    low_mel, high_mel = (1127.0 * np.log(1.0 + f / 700.0) for f in (low, high))
    delta = (high_mel - low_mel) / (bins + 1)
    index = torch.arange(bins, dtype=torch.float32)[:, None]
    left, center, right = (low_mel + (index + k) * delta for k in (0.0, 1.0, 2.0))
    mel = 1127.0 * (1.0 + (rate / padded) * torch.arange(padded // 2, dtype=torch.float32) / 700.0).log()
    banks = torch.clamp(torch.min((mel - left) / (center - left), (right - mel) / (right - center)), min=0)
    return torch.nn.functional.pad(banks, (0, 1))


def fbank(samples: np.ndarray, bins: int = 80, rate: int = 16000, length_ms: float = 25.0,
          shift_ms: float = 10.0, preemph: float = 0.97) -> np.ndarray:
    """(frames, bins) float32 log mel energies of (samples,) float32."""
    x = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    size, shift = int(rate * length_ms / 1000), int(rate * shift_ms / 1000)
    padded = 1 << (size - 1).bit_length()
    frames = x.as_strided((1 + (len(x) - size) // shift, size), (shift, 1))
    frames = frames - frames.mean(dim=1, keepdim=True)
    frames = frames - preemph * torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = frames * torch.hann_window(size, periodic=False, dtype=torch.float32).pow(0.85)
    power = torch.fft.rfft(torch.nn.functional.pad(frames, (0, padded - size))).abs().pow(2.0)
    return torch.clamp(power @ mel_banks(bins, padded, rate).T, min=EPS).log().numpy()
