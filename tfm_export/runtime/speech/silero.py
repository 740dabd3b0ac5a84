"""Silero VAD's model: P(speech) of each 32 ms window of a 16 kHz recording, on ONNX Runtime (issue #60). Torch-free.

The model is models/silero-vad (silero-vad 6.2.3's `silero_vad_16k_op15.onnx`, MIT; its README), in the
form tools/vad_batched.py writes: the same nodes with the windows on the LSTM's sequence axis, so that one
call takes up to 10,000 windows with the recurrent state carried inside the graph. It gives what silero_vad's
OnnxWrapper gives running the op15 file window by window (512-sample windows at 16 kHz, each with the 64
samples before it prepended, the state carried, one thread), to float32 rounding. runtime.speech.vad turns the
probabilities into speech spans; serve.turns feeds a live stream's windows piece by piece.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError

RATE = 16000  # Hz: the model's (and Whisper's) rate
WINDOW = 512  # samples per speech probability (32 ms), silero's window at 16 kHz
CONTEXT = 64  # samples of the window before, prepended to each window (OnnxWrapper's context)
STATE = (2, 1, 128)  # the model's recurrent state for one stream
MODEL_FILE = "silero_vad_16k_op15_batched.onnx"  # in the "silero-vad" bundle (tfm_export/resources.py)
CALL_WINDOWS = 10_000  # windows per model call (faster-whisper's): ~50 MB of front end at a time

__all__ = ["CALL_WINDOWS", "CONTEXT", "MODEL_FILE", "RATE", "STATE", "WINDOW", "speech_probabilities", "vad_session",
           "window_probabilities"]


@functools.lru_cache(maxsize=1)
def vad_session(path: str | None = None) -> Any:
    """The model's session (one per process: it keeps no state, each stream passes its own), on the CPU with
    one thread as silero's OnnxWrapper opens it: the windows follow one another through the LSTM."""
    import onnxruntime as ort

    from ...resources import bundled

    model = Path(path) if path else bundled("silero-vad") / MODEL_FILE
    if not model.is_file():
        raise ConfigError(f"the VAD model {model} is missing; reinstall tfm-export (the wheel carries it)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def window_probabilities(windows: np.ndarray, context: np.ndarray, state: np.ndarray, session: Any = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """P(speech) of consecutive (n, 512) windows of one stream, and the state after the last: `context` is
    the 64 samples before the first window (zeros at the stream's start), `state` the one the window before
    left (zeros at the start). Up to CALL_WINDOWS windows a call, the state carried from call to call."""
    session = session or vad_session()
    inputs = np.empty((len(windows), CONTEXT + WINDOW), np.float32)
    inputs[:, CONTEXT:] = windows
    inputs[:1, :CONTEXT] = context
    inputs[1:, :CONTEXT] = windows[:-1, -CONTEXT:]
    out = np.empty(len(windows), np.float32)
    for start in range(0, len(windows), CALL_WINDOWS):
        out[start:start + CALL_WINDOWS], state = session.run(
            None, {"input": inputs[start:start + CALL_WINDOWS], "state": state})
    return out, state


def speech_probabilities(samples: np.ndarray, session: Any = None) -> np.ndarray:
    """(ceil(len / 512),) float32: P(speech) of each 512-sample window of 16 kHz samples, the last one
    zero-padded, each window run with the 64 samples before it (zeros before the first) and the state the
    window before left (silero's get_speech_timestamps over OnnxWrapper)."""
    count = -(-len(samples) // WINDOW)
    padded = np.zeros(count * WINDOW, np.float32)
    padded[:len(samples)] = samples
    zeros = np.zeros(CONTEXT, np.float32), np.zeros(STATE, np.float32)
    return window_probabilities(padded.reshape(count, WINDOW), *zeros, session)[0]
