"""A transcription as files: SubRip and WebVTT subtitles of its segments, and `tfm-export transcribe --format`'s
texts (txt, srt, vtt, json). Torch-free: runtime.speech.whisper's result in, text out.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

__all__ = ["TRANSCRIPT_FORMATS", "to_srt", "to_vtt"]


def _clock(seconds: float, decimal: str) -> str:
    millis = int(round(max(seconds, 0.0) * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    return f"{hours:02d}:{minutes:02d}:{millis // 1000:02d}{decimal}{millis % 1000:03d}"


def to_srt(segments: Sequence[dict[str, Any]]) -> str:
    """SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, the text, a blank line."""
    return "".join(f"{n}\n{_clock(s['start'], ',')} --> {_clock(s['end'], ',')}\n{s['text'].strip()}\n\n"
                   for n, s in enumerate(segments, 1))


def to_vtt(segments: Sequence[dict[str, Any]]) -> str:
    """WebVTT: the header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm` and their text."""
    return "WEBVTT\n\n" + "".join(f"{_clock(s['start'], '.')} --> {_clock(s['end'], '.')}\n{s['text'].strip()}\n\n"
                                  for s in segments)


# `tfm-export transcribe --format` -> one recording's `transcribe` result (and its file's name) as that file's text
TRANSCRIPT_FORMATS: dict[str, Callable[[dict[str, Any], str], str]] = {
    "txt": lambda result, file: result["text"].strip() + "\n",
    "srt": lambda result, file: to_srt(result["segments"]),
    "vtt": lambda result, file: to_vtt(result["segments"]),
    "json": lambda result, file: json.dumps({"file": file, **result}, ensure_ascii=False) + "\n",
}
