"""Word timestamps of a Whisper transcript: each decoded window's tokens timed by the export's alignment.onnx
(runtime.speech.alignment), then grouped into the words of each segment. Torch-free.

Each window is encoded again (as openai-whisper's `add_word_timestamps` runs the model again): the alignment
graph reads the window's decoder prompt and generated tokens in one pass, and the decode loops stay as they are.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import InputError
from .alignment import token_times, words
from .prompt import WhisperSettings
from .longform import FEATURE_PRECISION, Segment, Window

GRAPH = "alignment"


def alignment_session(model: Any) -> Any:
    """The export's alignment.onnx session (opened once, on first use), or one InputError saying why not."""
    if GRAPH not in model.manifest.graphs:
        raise InputError("this export has no alignment.onnx, which word timestamps need: export the Whisper "
                         "folder again with this version (its generation_config.json must name alignment_heads)")
    return model.extra_session(GRAPH)


def window_times(model: Any, features: np.ndarray, window: Window, frames: int, window_frames: int) -> np.ndarray:
    """Seconds from the recording's start of each token the window generated (EOS included when it ended).
    The window's features as it was decoded (whisper_longform.transcribe's slice, zero-padded); `frames`: its
    audio's, what the alignment reads."""
    part = features[:, window.seek:window.seek + window_frames]
    part = np.pad(part, ((0, 0), (0, window_frames - part.shape[1])))[None].astype(np.float32)
    encoded = model.encoder.run(None, {model.manifest.encoder_input.name: part})
    session = alignment_session(model)
    ids = np.asarray([[*window.prompt, *window.ids[:-1]]], dtype=np.int64)
    feeds = {"input_ids": ids, **{o.name: v for o, v in zip(model.encoder.get_outputs(), encoded)}}
    weights = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0][0]
    times = token_times(weights[:, len(window.prompt):], frames)
    return times + window.seek * FEATURE_PRECISION


def _positions(ids: Sequence[int], segments: Sequence[Segment]) -> list[list[int]]:
    """Where each token of each segment is in its window's ids: the segments' tokens are the ids in order, less
    what the segmentation dropped (a timestamp cut off, an unpaired tail), so each is found from the last."""
    found, cursor = [], 0
    for segment in segments:
        positions = []
        for token in segment.tokens:
            while cursor < len(ids) and ids[cursor] != token:
                cursor += 1
            positions.append(min(cursor, len(ids) - 1))
            cursor += 1
        found.append(positions)
    return found


def segment_words(model: Any, settings: WhisperSettings, segment: Segment, where: list[int], times: np.ndarray,
                  language: str | None) -> list[dict[str, Any]]:
    """The words of one segment, its tokens at `where` in its window's ids (`times`: the window's)."""
    eos = settings.eos_token_id
    kept = [(p, t) for p, t in zip(where, segment.tokens) if t < eos]
    if not kept:
        return []
    positions, tokens = [p for p, _ in kept], [t for _, t in kept]
    after = float(times[min(positions[-1] + 1, len(times) - 1)])  # the next token's start ends the last word ...
    # ... but EOS has no row of its own (as in transformers): it repeats the last token's time, and the last word
    # would end where it starts; the segment's end (its timestamp, or the audio's) ends it then
    if after <= times[positions[-1]]:
        after = max(after, segment.end)
    return words(model.tokenizer.decode, tokens, [*times[positions], after], eos, language)


def add_words(model: Any, settings: WhisperSettings, features: np.ndarray, segments: Sequence[Segment],
              windows: Sequence[Window], window_frames: int, audio_frames: int, language: str | None
              ) -> list[list[dict[str, Any]]]:
    """The words of each segment (`windows`: the transcript's; each is timed once). `audio_frames`: the
    recording's own frames (a short one's features are padded): the alignment reads no padding (transformers'
    num_frames, from the feature extractor's attention mask)."""
    by_window: dict[int, list[int]] = {}
    for n, segment in enumerate(segments):
        by_window.setdefault(id(segment.window), []).append(n)
    found: list[list[dict[str, Any]]] = [[] for _ in segments]
    for window in windows:
        members = by_window.get(id(window), [])
        if not members:
            continue
        frames = min(audio_frames - window.seek, window_frames)
        times = window_times(model, features, window, frames, window_frames)
        of_window = [segments[n] for n in members]
        for n, segment, where in zip(members, of_window, _positions(window.ids, of_window)):
            found[n] = segment_words(model, settings, segment, where, times, language)
    return found
