"""Speech in, text out for a frames model: a user's own speech Transformer (issue #39). Torch-free.

    model = open_export("speech-onnx")        # exported with a filterbank (manifest `filterbank`)
    model.transcribe("words.wav", num_beams=3)
    # {"text": ..., "language": None, "segments": [{"start": 0.0, "end": 1.3, "text": ...}], "ids": [...]}

The steps: the recording -> mono float32 samples at the filterbank's rate (runtime.speech.whisper.read_samples:
audio.io decodes and resamples); the manifest's filterbank -> (frames, n_feats) (filterbank.frames:
kaldi-native-fbank); then the one decode of generate (generate_ids: greedy or beam search) over those
frames, exactly as `generate --features` decodes them. Its text is the tokenizer's when the export has one,
else the ids as `generate` prints them. The whole recording is one source: longer than the model's
max_len frames is refused (no windows: a frames model's own training tells nothing of how to split).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...errors import InputError
from ...filterbank import Filterbank, frames as filterbank_frames
from .whisper import DEFAULT_MAX_SECONDS, read_samples

# Whisper's transcribe options -> whether a value leaves them unset: a frames model has no prompt tokens,
# languages, tasks or timestamps, so any other value is refused rather than ignored.
WHISPER_ONLY: dict[str, Callable[[Any], bool]] = {
    "language": lambda v: v is None, "task": lambda v: v in (None, "transcribe"),
    "timestamps": lambda v: not v, "prompt": lambda v: v is None}


def declared_filterbank(manifest: Any) -> Filterbank:
    """The export's filterbank, or one InputError for a frames export declared without one."""
    if manifest.filterbank is None:
        raise InputError(f"this export declares no filterbank (its frames come from the caller): compute its "
                         f"(frames, {manifest.config.n_feats}) features and pass them to generate --features, or "
                         f"export it again with --frontend kaldi-fbank")
    return manifest.filterbank


def audio_frames(manifest: Any, audio: Any, max_seconds: float | None = DEFAULT_MAX_SECONDS
                 ) -> tuple[np.ndarray, float]:
    """(frames, n_feats) float32 frames of a recording (a path, its bytes, or float32 samples at the
    filterbank's rate) by the export's filterbank, and the recording's length in seconds; more frames
    than the model's max_len is one InputError."""
    filterbank = declared_filterbank(manifest)
    samples = read_samples(audio, filterbank.sample_rate, max_seconds)
    out = filterbank_frames(samples, filterbank)
    max_len = manifest.config.max_len
    if len(out) > max_len:
        raise InputError(f"the audio gives {len(out)} frames ({len(samples) / filterbank.sample_rate:.2f} s), more "
                         f"than the model's max_len ({max_len} frames, about {filterbank.seconds(max_len):g} s); "
                         f"split the recording")
    return out, len(samples) / filterbank.sample_rate


def transcribe(model: Any, audio: Any, language: str | None = None, task: str | None = "transcribe",
               timestamps: bool = False, num_beams: int = 1, prompt: str | Sequence[int] | None = None,
               max_seconds: float | None = DEFAULT_MAX_SECONDS, max_new_tokens: int | None = None,
               on_text: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One recording -> {"text", "language": None, "segments": [one, the whole recording], "ids"} (the
    module docstring); the signature is runtime.speech.whisper.transcribe's, whose Whisper-only options are refused."""
    given = {name: value for name, value in
             {"language": language, "task": task, "timestamps": timestamps, "prompt": prompt}.items()
             if not WHISPER_ONLY[name](value)}
    if given:
        named = " and ".join(f"{{{name}}}" for name in given)
        raise InputError(f"{named} {'is' if len(given) == 1 else 'are'} Whisper's; this export is a frames model "
                         f"(no languages, tasks, timestamps or prompts): drop {'it' if len(given) == 1 else 'them'}",
                         options=dict.fromkeys(given))
    source, seconds = audio_frames(model.manifest, audio, max_seconds)
    config = model.generation_config(None, num_beams=num_beams, max_new_tokens=max_new_tokens)
    ids = model.generate_ids([source], config=config)[0]
    text = model.tokenizer.decode(ids) if model.manifest.tokenizer else " ".join(map(str, ids))
    if on_text is not None:
        on_text(text)  # one window: the whole recording
    return {"text": text, "language": None, "segments": [{"start": 0.0, "end": round(seconds, 3), "text": text}],
            "ids": list(ids)}
