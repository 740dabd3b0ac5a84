"""`transcribe` of any speech export: the decode that fits what its encoder reads (issue #39). Torch-free.

The manifest's config.source says what the encoder reads, hence how audio becomes its input: Whisper's
log-mel windows (source "features", runtime.speech.whisper) or a filterbank's frames (source "frames",
runtime.speech.frames). Both take the same options and give the same {text, language, segments, ids}.
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import InputError
from . import frames, whisper

# config.source -> the transcription of an export whose encoder reads it
TRANSCRIBERS: dict[str, Callable[..., dict[str, Any]]] = {"features": whisper.transcribe,
                                                          "frames": frames.transcribe}


def transcribe(model: Any, audio: Any, **options: Any) -> dict[str, Any]:
    """`model.transcribe(audio, ...)` by the export's encoder input; a text model is one InputError."""
    transcriber = TRANSCRIBERS.get(model.config.source)
    if transcriber is None:
        raise InputError(f"this export is not a speech model (its encoder reads {model.manifest.encoder_input.name}, "
                         f"token ids); transcribe needs a Whisper export or a frames model; decode text with "
                         f"`tfm-export generate` (model.translate)")
    if model.config.source != "features" and options.pop("word_timestamps", False):
        raise InputError("word timestamps need a Whisper export (its alignment heads time the tokens); this "
                         "frames model has none")
    return transcriber(model, audio, **options)
