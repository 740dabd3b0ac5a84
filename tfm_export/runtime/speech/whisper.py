"""Speech in, text out: `transcribe` of an opened Whisper export (issue #39). Torch-free.

    model = open_export("whisper-onnx")
    model.transcribe("talk.wav", language="de", timestamps=True)
    # {"text": ..., "language": "de", "segments": [{"seek": 0, "start": 0.0, "end": 2.4, "text": ..., "tokens": [...],
    #   "temperature": 0.0, "avg_logprob": -0.2, "compression_ratio": 1.3, "no_speech_prob": 0.01}], "ids": [...]}

The steps are those of transformers' `WhisperForConditionalGeneration.generate` (5.x), which runs one loop
for short and long audio:
1. the audio (a path, bytes, or float32 samples at the model's rate) -> samples (audio.io.load_audio);
2. log-mel features (audio.features, the manifest's `features`): audio up to one window (30 s) is padded to
   the window first, as WhisperFeatureExtractor's default; longer audio keeps all its frames, unpadded
   (the extractor with truncation=False), and is decoded window by window;
3. the language, when none is given and the model has languages: runtime.speech.search.LanguageDetector
   on the first window (transformers' detect_language);
4. the init tokens (runtime.speech.prompt.init_tokens; an initial `prompt` goes before them with <|startofprev|>),
   then runtime.speech.longform.transcribe over the features with a window decoder on the export's cache
   (greedy or beam search, the Whisper logits processors). Without timestamps a window is decoded once
   and the next one starts a whole window later; with them, the next window starts at the last timestamp
   pair. Long audio always decodes with timestamps (transformers does the same).

The decoding settings are the manifest's `speech` (runtime.speech.prompt.WhisperSettings, from the folder's
generation_config.json); its long-form thresholds (compression ratio, log-probability, no-speech,
condition_on_prev_tokens) apply when the folder sets them. Sampling fallback temperatures are not used.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Sequence

import numpy as np

from ...audio.features import FeatureConfig, as_samples, log_mel, log_mel_spectrogram
from ...errors import AudioTooLong, InputError
from ..options.generation import GenerationConfig
from .prompt import WhisperSettings, init_tokens, needs_detection, prompt_prefix
from .longform import (Fallback, Segment, WindowRunner, cache_runner, transcribe as transcribe_features,
                       window_decoder)
from .search import LanguageDetector
from .words import add_words, alignment_session

DEFAULT_MAX_SECONDS = 3600.0  # audio.io's: an hour
TASKS = ("transcribe", "translate")

__all__ = ["DEFAULT_MAX_SECONDS", "TRANSCRIPT_FORMATS", "read_samples", "segment_fields", "speech_settings", "to_srt",
           "to_vtt", "transcribe"]


def speech_settings(model: Any) -> tuple[WhisperSettings, FeatureConfig]:
    """The export's Whisper settings and feature config, or one InputError for an export that is not a
    speech model (or was exported before exports kept them)."""
    manifest = model.manifest
    if manifest.features is None:
        raise InputError("this export is not a speech model (its encoder reads token ids); transcribe needs a "
                         "Whisper export; decode text with `tfm-export generate` (model.translate)")
    if manifest.speech is None:
        raise InputError("this export has no Whisper decoding settings (the manifest's speech, kept by exports "
                         "from this version on); export the Whisper folder again to transcribe with it")
    return WhisperSettings.from_dict(manifest.speech), FeatureConfig.from_preprocessor_config(manifest.features)


def read_samples(audio: Any, sampling_rate: int, max_seconds: float | None = DEFAULT_MAX_SECONDS) -> np.ndarray:
    """(samples,) float32 at `sampling_rate`: a recording's path or bytes (decoded, mixed, resampled), or
    samples already at that rate (a 1-D float array); anything else is one InputError."""
    if isinstance(audio, (str, os.PathLike, bytes, bytearray, memoryview)):
        from ...audio import load_audio

        return load_audio(audio, sampling_rate, max_seconds=max_seconds)
    if isinstance(audio, np.ndarray):
        if audio.dtype.kind != "f":
            raise InputError(f"audio samples must be floats in [-1, 1] (float32 at {sampling_rate} Hz), got "
                             f"{audio.dtype}; pass a path or the file's bytes to have it decoded")
        samples = as_samples(audio)
        seconds = len(samples) / sampling_rate
        if max_seconds is not None and seconds > max_seconds:
            raise AudioTooLong(f"the audio is {seconds:.1f} s long, over the limit of {max_seconds:g} s "
                             "(max_seconds); split the recording or raise max_seconds")
        return samples
    raise InputError(f"audio must be a path, the file's bytes or a float32 numpy array of samples at "
                     f"{sampling_rate} Hz, got {type(audio).__name__}")


def _fallback(settings: WhisperSettings) -> Fallback:
    """The folder's long-form thresholds (temperature 0 only: no sampling fallback)."""
    logprob = settings.logprob_threshold
    return Fallback((0.0,), settings.compression_ratio_threshold, logprob,
                    settings.no_speech_threshold if logprob is not None else None)


def _language_code(settings: WhisperSettings, token_id: int | None) -> str | None:
    for token, tid in (settings.lang_to_id or {}).items():
        if tid == token_id:
            return token[2:-2] if token.startswith("<|") and token.endswith("|>") else token
    return None


def _prompt_ids(model: Any, settings: WhisperSettings, prompt: str | Sequence[int] | None) -> list[int] | None:
    """An initial prompt as transformers' get_prompt_ids: <|startofprev|>, " " + the text's tokens."""
    if prompt is None or (isinstance(prompt, str) and not prompt.strip()):
        return None
    if isinstance(prompt, str):
        ids = model.tokenizer.encode_target(" " + prompt.strip()) if hasattr(model.tokenizer, "encode_target") \
            else model.tokenizer.encode(" " + prompt.strip())
        ids = [t for t in ids if t != settings.eos_token_id]
    else:
        ids = [int(t) for t in prompt]
        vocab = model.config.tgt_vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise InputError(f"{{prompt}} id {bad[0]} is out of range for the model's vocabulary of {vocab} ids",
                             options={"prompt": None})
    return prompt_prefix(settings, ids)


def _language_and_task(settings: WhisperSettings, language: str | None, task: str | None
                        ) -> tuple[str | None, str | None]:
    """`language` and `task` checked: an unknown task, or a language or translation asked of an English-only model
    (transformers takes neither for it: both become None), is an InputError."""
    if task is not None and task not in TASKS:
        raise InputError(f"{{task}} must be one of {', '.join(TASKS)}", options={"task": task})
    if settings.lang_to_id:
        return language, task
    if task == "translate":
        raise InputError("this Whisper model is English-only: it cannot translate; leave out {task}",
                         options={"task": task})
    if language is not None and language.lower().strip("<|>") not in ("en", "english"):
        raise InputError("this Whisper model is English-only: it takes no {language}", options={"language": language})
    return None, None


def _features(samples: np.ndarray, config: FeatureConfig) -> tuple[np.ndarray, np.ndarray]:
    """(the recording's features, its first window): up to one window of audio padded to it (n_mels, window);
    longer audio unpadded (n_mels, frames), its first window cut out and padded like a short one."""
    window = config.nb_max_frames
    if len(samples) > config.n_samples:
        features = log_mel_spectrogram(samples, config)  # long-form
    else:
        features = log_mel(samples, config)
    first = features[:, :window]
    if first.shape[1] < window:
        first = np.pad(first, ((0, 0), (0, window - first.shape[1])))
    return features, first


def transcribe(model: Any, audio: Any, language: str | None = None, task: str | None = "transcribe",
               timestamps: bool = False, num_beams: int = 1, prompt: str | Sequence[int] | None = None,
               max_seconds: float | None = DEFAULT_MAX_SECONDS, max_new_tokens: int | None = None,
               on_text: Callable[[str], None] | None = None, runner: WindowRunner | None = None,
               word_timestamps: bool = False) -> dict[str, Any]:
    """One recording -> {"text", "language", "segments", "ids"} (the module docstring; each segment's fields:
    `segment_fields`). `language`: a code, name or token (None: detected); `task`: transcribe or translate;
    `num_beams`: beam search per window; `prompt`: an initial prompt (text or token ids);
    `max_new_tokens`: per window (None: up to the folder's max_length); `on_text`: called after each
    window with the text so far (streaming; an exception it raises stops the transcription); `runner`: what
    decodes each window, the language detection's included (default: the export's own caches, one window at
    a time; a server passes its in-flight window batch, serve.windows); `word_timestamps`: each segment's
    `words` [{word, start, end}] and all of them as `words` (runtime.speech.words)."""
    settings, features_config = speech_settings(model)
    language, task = _language_and_task(settings, language, task)
    if word_timestamps:
        alignment_session(model)  # an export without alignment.onnx: refused before any decoding
    samples = read_samples(audio, features_config.sampling_rate, max_seconds)
    window = features_config.nb_max_frames
    features, first = _features(samples, features_config)
    config = GenerationConfig(num_beams=num_beams, max_new_tokens=max_new_tokens)
    detected = None
    if needs_detection(settings, language, task):
        detect = runner or cache_runner(model.cache_for(GenerationConfig(), 1))
        detected = detect(np.ascontiguousarray(first), LanguageDetector(1, settings))[0]
    long_form = features.shape[1] > window
    stamped = timestamps or long_form
    init = init_tokens(settings, language, task, stamped, detected)
    prompt_ids = _prompt_ids(model, settings, prompt)
    vocab = model.config.tgt_vocab_size
    max_positions = model.config.max_len
    decode_window = window_decoder(runner or cache_runner(model.cache_for(config, max_positions)), settings, config,
                                   vocab, stamped, max_positions)
    begin = settings.timestamp_begin
    tokenizer = model.tokenizer if model.manifest.tokenizer else None

    def text_of(ids: Sequence[int]) -> str:
        kept = [t for t in ids if t < begin]
        return tokenizer.decode(kept) if tokenizer is not None else " ".join(map(str, kept))

    on_window = None if on_text is None else lambda done: on_text(text_of([t for s in done for t in s.tokens]))
    out = transcribe_features(features, decode_window, settings, init, vocab, prompt_ids=prompt_ids,
                              condition_on_prev_tokens=bool(settings.condition_on_prev_tokens),
                              fallback=_fallback(settings), window_frames=window, max_target_positions=max_positions,
                              on_window=on_window)
    language_token = init[1] if len(init) > 1 and init[1] in (settings.lang_to_id or {}).values() else None
    seconds = len(samples) / features_config.sampling_rate
    segments = out.segments if stamped else [Segment(0.0, seconds, out.ids, out.windows[0])]  # one window
    code = _language_code(settings, language_token) or ("en" if not settings.lang_to_id else None)
    result = {"text": text_of(out.ids), "language": code,
              "segments": [segment_fields(s, text_of(s.tokens)) for s in segments], "ids": list(out.ids)}
    if word_timestamps:
        audio_frames = min(features.shape[-1], -(-len(samples) // features_config.hop_length))
        found = add_words(model, settings, features, segments, out.windows, window, audio_frames, code)
        for fields, segment_words in zip(result["segments"], found):
            fields["words"] = segment_words
        result["words"] = [word for segment_words in found for word in segment_words]
    return result


def segment_fields(segment: Segment, text: str) -> dict[str, Any]:
    """A segment as openai-whisper's (OpenAI's verbose_json, less its id): times, text, its ids (timestamps
    included) and its window's seek, temperature, avg_logprob, compression_ratio, no_speech_prob (one
    window's segments share them). A NaN (a window that generated nothing) is None: JSON has no NaN."""
    window = segment.window
    assert window is not None, "whisper_longform.transcribe's segments carry their window"
    avg = window.avg_logprob
    return {"seek": window.seek, "start": round(segment.start, 3), "end": round(segment.end, 3), "text": text,
            "tokens": list(segment.tokens), "temperature": window.temperature,
            "avg_logprob": None if avg is None or math.isnan(avg) else avg,
            "compression_ratio": window.compression_ratio, "no_speech_prob": window.no_speech_prob}



# ---- subtitles ---------------------------------------------------------------------------------------

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
