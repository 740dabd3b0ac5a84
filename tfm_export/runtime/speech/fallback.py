"""Whisper's temperature fallback and silence skipping, as transformers' long-form generate judges a window.
Torch-free.

A window is decoded at `temperatures[0]`; when the try's compression ratio (runtime.speech.longform.
compression_ratio, EOS included) exceeds `compression_ratio_threshold`, or its avg_logprob is below
`logprob_threshold`, it is decoded again at the next temperature (the last try stays whatever it gives);
a try whose avg_logprob is below `logprob_threshold` and whose P(<|nospeech|>) exceeds `no_speech_threshold`
is silence: the window is skipped (transformers' `_need_fallback`). A temperature above 0 samples
(runtime.decode.sampling: SplitMix64 from GenerationConfig.seed, one beam: runtime.speech.longform.window_config),
so a seeded fallback gives the same ids in Python and Node (runtimes/node/speech/fallback.mjs).

`fallback_for` builds one from a call's arguments over the folder's generation_config.json
(runtime.speech.prompt.WhisperSettings): the thresholds given, else the folder's, as transformers'
`_set_thresholds_and_condition`; the temperatures are the call's only (transformers' generate reads
`temperature` from its arguments, not from the folder). `openai_fallback` is what OpenAI's `temperature`
means (serve.audio): 0 is the fallback from 0 to 1 by 0.2 with openai-whisper's thresholds (where the folder
sets none), a temperature above 0 samples at it alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ...errors import InputError
from .prompt import WhisperSettings

# openai-whisper's `transcribe` defaults, which OpenAI's service describes for temperature 0
OPENAI_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
OPENAI_THRESHOLDS = {"compression_ratio_threshold": 2.4, "logprob_threshold": -1.0, "no_speech_threshold": 0.6}


@dataclass(frozen=True)
class Fallback:
    """Temperature fallback and silence skipping (transformers' thresholds; None: off)."""

    temperatures: tuple[float, ...] = (0.0,)  # tried in order while a window needs fallback
    compression_ratio_threshold: float | None = None  # e.g. 1.35 (transformers' docs) / 2.4 (OpenAI)
    logprob_threshold: float | None = None  # e.g. -1.0
    no_speech_threshold: float | None = None  # e.g. 0.6; needs logprob_threshold

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise InputError("{temperature} needs at least one temperature", options={"temperature": ()})
        bad = [t for t in self.temperatures if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0)]
        if bad:
            raise InputError(f"{{temperature}} values must be numbers of 0 or more, got {bad[0]!r}",
                             options={"temperature": list(self.temperatures)})
        if self.no_speech_threshold is not None and self.logprob_threshold is None:
            raise InputError("{no_speech_threshold} needs a {logprob_threshold} (a silent window is one whose "
                             "average log-probability is below it)",
                             options={"no_speech_threshold": self.no_speech_threshold, "logprob_threshold": None})

    @property
    def samples(self) -> bool:
        """Whether some try samples (a temperature above 0)."""
        return any(t > 0 for t in self.temperatures)

    def judge(self, window: Any) -> tuple[bool, bool]:
        """(needs fallback, skip the window) for a decoded window (runtime.speech.longform.Window: its
        compression_ratio, avg_logprob, no_speech_prob), as transformers' `_need_fallback`."""
        needs = skip = False
        limit = self.compression_ratio_threshold
        if limit is not None and window.compression_ratio > limit:
            needs = True
        avg_logprob, no_speech = window.avg_logprob, window.no_speech_prob
        if self.logprob_threshold is not None:
            if avg_logprob is None:
                raise InputError("{logprob_threshold} needs each window's avg_logprob from decode_window",
                                 options={"logprob_threshold": self.logprob_threshold})
            low = avg_logprob < self.logprob_threshold
            needs = needs or low
            if self.no_speech_threshold is not None:
                if no_speech is None:
                    raise InputError("{no_speech_threshold} needs each window's no_speech_prob from decode_window",
                                     options={"no_speech_threshold": self.no_speech_threshold})
                if low and no_speech > self.no_speech_threshold:
                    needs, skip = False, True
        return needs, skip


def temperatures_of(temperature: float | Sequence[float] | None) -> tuple[float, ...]:
    """`temperature` as transformers' generate takes it: None (greedy), one number, or the fallback's tuple."""
    if temperature is None:
        return (0.0,)
    if isinstance(temperature, (list, tuple)):
        return tuple(float(t) if isinstance(t, (int, float)) else t for t in temperature)
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        return (float(temperature),)
    raise InputError(f"{{temperature}} must be a number or a list of numbers, got {temperature!r}",
                     options={"temperature": None})


def fallback_for(settings: WhisperSettings, temperature: float | Sequence[float] | None = None,
                 compression_ratio_threshold: float | None = None, logprob_threshold: float | None = None,
                 no_speech_threshold: float | None = None) -> Fallback:
    """The Fallback of a call: its temperatures, and each threshold given or else the folder's (the folder's
    no_speech_threshold only with a logprob_threshold: transformers could not apply it alone)."""
    logprob = logprob_threshold if logprob_threshold is not None else settings.logprob_threshold
    no_speech = no_speech_threshold
    if no_speech is None and logprob is not None:
        no_speech = settings.no_speech_threshold
    ratio = compression_ratio_threshold if compression_ratio_threshold is not None \
        else settings.compression_ratio_threshold
    return Fallback(temperatures_of(temperature), ratio, logprob, no_speech)


def openai_fallback(settings: WhisperSettings, temperature: float = 0.0) -> dict[str, Any]:
    """transcribe's fallback arguments for OpenAI's `temperature` (the module docstring): the thresholds are
    the folder's where it sets them, else openai-whisper's."""
    thresholds = {name: getattr(settings, name) if getattr(settings, name) is not None else value
                  for name, value in OPENAI_THRESHOLDS.items()}
    return {"temperature": OPENAI_TEMPERATURES if temperature == 0 else (float(temperature),), **thresholds}


__all__ = ["OPENAI_TEMPERATURES", "OPENAI_THRESHOLDS", "Fallback", "fallback_for", "openai_fallback",
           "temperatures_of"]
