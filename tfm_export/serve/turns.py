"""Server VAD for live transcription (serve.realtime): where a speaker's turn starts and stops in a stream.

OpenAI's `server_vad` turn detection, on runtime.speech.silero's Silero model, each piece's whole windows in
one call, its recurrent state carried across the stream (runtime.speech.silero.speech_probabilities does the
same over a whole recording): a turn starts at the first window whose P(speech) reaches `threshold`, with
`prefix_padding_ms` of the audio before it, and stops once `silence_duration_ms` of windows stayed under
it. Torch-free; no web framework here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.speech.silero import CONTEXT, RATE, STATE, WINDOW, vad_session, window_probabilities


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI's server_vad settings (its defaults)."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500


class StreamingVad:
    """P(speech) of each 512-sample window of a 16 kHz stream, its state carried from window to window."""

    def __init__(self, session: Any = None):
        self.session = session or vad_session()
        self.state = np.zeros(STATE, np.float32)
        self.context = np.zeros(CONTEXT, np.float32)
        self.rest = np.zeros(0, np.float32)

    def __call__(self, samples: np.ndarray) -> list[float]:
        data = np.concatenate([self.rest, samples])
        count = len(data) // WINDOW
        self.rest = data[count * WINDOW:]
        if not count:
            return []
        windows = data[:count * WINDOW].reshape(count, WINDOW)
        probs, self.state = window_probabilities(windows, self.context, self.state, self.session)
        self.context = windows[-1, -CONTEXT:]
        return probs.tolist()


class TurnDetector:
    """Turns in a stream: `feed(samples)` -> actions in order: ("start", ms, samples before it), ("audio",
    samples) for audio inside a turn, ("stop", ms). ms count from the stream's start."""

    def __init__(self, settings: TurnDetection, vad: StreamingVad | None = None):
        self.settings, self.vad = settings, vad or StreamingVad()
        self.pending = np.zeros(0, np.float32)  # samples not yet given a probability
        self.recent = np.zeros(0, np.float32)  # the padding kept before a turn
        self.seen = 0  # samples judged
        self.speaking, self.quiet = False, 0  # in a turn; samples of silence since its last speech

    def feed(self, samples: np.ndarray) -> list[tuple[Any, ...]]:
        self.pending = np.concatenate([self.pending, samples])
        actions: list[tuple[Any, ...]] = []
        for prob in self.vad(samples):
            window, self.pending = self.pending[:WINDOW], self.pending[WINDOW:]
            self.seen += WINDOW
            self._judge(prob >= self.settings.threshold, window, actions)
        return actions

    def _judge(self, speech: bool, window: np.ndarray, actions: list[tuple[Any, ...]]) -> None:
        ms = lambda samples: int(samples * 1000 // RATE)  # noqa: E731
        if not self.speaking:
            if speech:
                self.speaking, self.quiet = True, 0
                actions.append(("start", ms(self.seen - WINDOW - len(self.recent)), self.recent))
                actions.append(("audio", window))
                self.recent = np.zeros(0, np.float32)
            else:
                keep = self.settings.prefix_padding_ms * RATE // 1000
                self.recent = np.concatenate([self.recent, window])[-keep:] if keep else self.recent[:0]
            return
        actions.append(("audio", window))
        self.quiet = 0 if speech else self.quiet + WINDOW
        if self.quiet >= self.settings.silence_duration_ms * RATE // 1000:
            self.speaking = False
            actions.append(("stop", ms(self.seen)))

    def reset(self) -> None:
        """The buffer was committed or cleared by the client: a turn in progress ends without a stop."""
        self.speaking, self.quiet, self.recent = False, 0, np.zeros(0, np.float32)
