"""`transcribe` of any speech export: the decode that fits what its encoder reads (issue #39). Torch-free.

The manifest's config.source says what the encoder reads, hence how audio becomes its input: Whisper's
log-mel windows (source "features", runtime.speech.whisper) or a filterbank's frames (source "frames",
runtime.speech.frames). Both take the same options and give the same {text, language, segments, ids}.
With `vad=True` either transcribes only the recording's speech, chunk by chunk (runtime.speech.chunks);
with `batch_size` > 1 a Whisper export decodes the chunks, and a list of recordings, together
(runtime.speech.batch).
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import InputError
from . import frames, whisper
from .batch import transcribe_batch
from .chunks import ChunkPlan, transcribe_speech
from .vad import VadParameters

# config.source -> the transcription of an export whose encoder reads it
TRANSCRIBERS: dict[str, Callable[..., dict[str, Any]]] = {"features": whisper.transcribe,
                                                          "frames": frames.transcribe}


def _whisper_plan(model: Any) -> ChunkPlan:
    """Chunks of up to one Whisper window; a segment's seek in its mel frames."""
    features = whisper.speech_settings(model)[1]
    return ChunkPlan(features.sampling_rate, features.chunk_length,
                     features.nb_max_frames / features.chunk_length)


def _frames_plan(model: Any) -> ChunkPlan:
    """Chunks of up to the model's max_len frames (what one decode takes)."""
    filterbank = frames.declared_filterbank(model.manifest)
    return ChunkPlan(filterbank.sample_rate, filterbank.seconds(model.config.max_len))


# config.source -> how its recordings are chunked with the VAD
PLANS: dict[str, Callable[[Any], ChunkPlan]] = {"features": _whisper_plan, "frames": _frames_plan}


def transcribe(model: Any, audio: Any, vad: bool = False, vad_parameters: VadParameters | dict | None = None,
               batch_size: int = 1, **options: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """`model.transcribe(audio, ...)` by the export's encoder input; a text model is one InputError.
    `vad`: only the speech (runtime.speech.chunks), found with `vad_parameters` (vad.VadParameters or a
    dict of its fields; default: faster-whisper's). `batch_size` > 1: a Whisper export decodes that many
    VAD chunks, or recordings, together (runtime.speech.batch). `audio` a list or tuple of recordings: a
    list of answers."""
    transcriber = TRANSCRIBERS.get(model.config.source)
    if transcriber is None:
        raise InputError(f"this export is not a speech model (its encoder reads {model.manifest.encoder_input.name}, "
                         f"token ids); transcribe needs a Whisper export or a frames model; decode text with "
                         f"`tfm-export generate` (model.translate)")
    if model.config.source != "features" and options.pop("word_timestamps", False):
        raise InputError("word timestamps need a Whisper export (its alignment heads time the tokens); this "
                         "frames model has none")
    whisper_only = sorted(set(options) & whisper.DECODING_OPTIONS) if model.config.source != "features" else []
    if whisper_only:
        raise InputError(f"{', '.join(whisper_only)} {'is' if len(whisper_only) == 1 else 'are'} Whisper's long-form "
                         f"decoding; this export is a frames model, decoded whole: drop them")
    speculating = [name for name in sorted(whisper.SPECULATION_OPTIONS) if options.get(name)]
    if speculating and model.config.source != "features":
        raise InputError(f"{', '.join(speculating)}: speculative decoding is Whisper's (its greedy windows); this "
                         f"export is a frames model: drop {'it' if len(speculating) == 1 else 'them'}")
    if vad_parameters is not None and not vad:
        raise InputError("vad_parameters are the VAD's: pass vad=True with them")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a whole number of 1 or more, got {batch_size!r}")
    if speculating and batch_size > 1 and (isinstance(audio, (list, tuple)) or vad):
        raise InputError(f"{', '.join(speculating)}: speculative decoding checks one window at a time, and "
                         f"batch_size {batch_size} decodes windows together (not speculated yet): use batch_size 1")
    many = isinstance(audio, (list, tuple))
    if many and options.get("on_text") is not None:
        raise InputError("on_text streams one recording's text; transcribe a list of recordings without it")
    plan = PLANS[model.config.source](model) if vad else None
    recordings = list(audio) if many else [audio]
    if batch_size > 1 and model.config.source == "features" and (many or vad):
        results = transcribe_batch(model, recordings, transcriber, plan, batch_size, vad_parameters, **options)
    elif vad:
        results = [transcribe_speech(model, a, transcriber, plan, vad_parameters, **options) for a in recordings]
    else:
        results = [transcriber(model, a, **options) for a in recordings]
    return results if many else results[0]
