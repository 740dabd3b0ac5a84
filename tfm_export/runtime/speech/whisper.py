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
condition_on_prev_tokens) apply unless the call gives its own, as transformers' generate arguments do.
`temperature` is generate's: None or 0 greedy, a number above 0 sampling at it, a tuple (0.0, 0.2, ..., 1.0)
the temperature fallback (runtime.speech.fallback), whose sampled tries draw from `seed` (SplitMix64: Node
draws the same). `prompt_condition_type="all-segments"` puts the initial prompt before every window's
previous text (transformers'; it needs condition_on_prev_tokens), `hotwords` go after <|startofprev|> in
every window and `prefix` is forced as the first window's first words (faster-whisper's). `logprobs=True`
adds each text token's log-probability ({token, logprob, bytes}, OpenAI's include[]=logprobs).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...audio.features import FeatureConfig, as_samples, log_mel, log_mel_spectrogram
from ...errors import AudioTooLong, InputError
from ..options.generation import GenerationConfig
from . import assisted
from .prompt import WhisperSettings, init_tokens, needs_detection
from .prompt_text import hotword_ids, prefix_ids, prompt_ids
from .fallback import fallback_for
from .logprobs import streamed_text, text_reader, token_logprobs
from .longform import Segment, WindowRunner, cache_runner, transcribe as transcribe_features, window_decoder
from .search import LanguageDetector
from .words import add_words, alignment_session

DEFAULT_MAX_SECONDS = 3600.0  # audio.io's: an hour
TASKS = ("transcribe", "translate")

__all__ = ["DEFAULT_MAX_SECONDS", "read_samples", "segment_fields", "speech_settings", "transcribe"]


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


def _language_code(settings: WhisperSettings, token_id: int | None) -> str | None:
    for token, tid in (settings.lang_to_id or {}).items():
        if tid == token_id:
            return token[2:-2] if token.startswith("<|") and token.endswith("|>") else token
    return None


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


@functools.lru_cache(maxsize=64)
def _generation(num_beams: int, max_new_tokens: int | None, seed: int, prompt_lookup_num_tokens: int,
                num_assistant_tokens: int | None) -> GenerationConfig:
    """transcribe's GenerationConfig, made (and every option checked) once per setting, not per VAD chunk."""
    return GenerationConfig(num_beams=num_beams, max_new_tokens=max_new_tokens, seed=seed).replace(
        prompt_lookup_num_tokens=prompt_lookup_num_tokens, num_assistant_tokens=num_assistant_tokens)


def transcribe(model: Any, audio: Any, language: str | None = None, task: str | None = "transcribe",
               timestamps: bool = False, num_beams: int = 1, prompt: str | Sequence[int] | None = None,
               max_seconds: float | None = DEFAULT_MAX_SECONDS, max_new_tokens: int | None = None,
               on_text: Callable[[str], None] | None = None, runner: WindowRunner | None = None,
               word_timestamps: bool = False, logprobs: bool = False, assistant: Any = None,
               prompt_lookup_num_tokens: int = 0, num_assistant_tokens: int | None = None,
               **decoding: Any) -> dict[str, Any]:
    """One recording -> {"text", "language", "segments", "ids"} (the module docstring; each segment's fields:
    `segment_fields`). `language`: a code, name or token (None: detected); `task`: transcribe or translate;
    `num_beams`: beam search per window; `prompt`: an initial prompt (text or token ids);
    `max_new_tokens`: per window (None: up to the folder's max_length); `on_text`: called after each
    window with the text so far (streaming; an exception it raises stops the transcription; with `logprobs`
    a runtime.speech.logprobs.TextSoFar, whose `logprobs` are the text's so far); `runner`: what
    decodes each window, the language detection's included (default: the export's own caches, one window at
    a time; a server passes its in-flight window batch, serve.windows); `word_timestamps`: each segment's
    `words` [{word, start, end}] and all of them as `words` (runtime.speech.words); `logprobs`: `logprobs`
    [{token, logprob, bytes}] of the text's tokens. `assistant` (an opened Whisper export of the same
    tokenizer: a smaller one, or the model's int8 variant) or `prompt_lookup_num_tokens`: greedy windows decode
    speculatively (runtime.speech.assisted: the same ids), the assistant drafting `num_assistant_tokens` at
    first. `decoding`: `LongFormOptions`' fields (temperature, seed, the thresholds, condition_on_prev_tokens,
    prompt_condition_type, hotwords, prefix)."""
    settings, features_config = speech_settings(model)
    options = LongFormOptions.of(decoding)
    language, task = _language_and_task(settings, language, task)
    if logprobs and num_beams > 1:
        raise InputError("{logprobs} are each picked token's: decode with num_beams 1 to have them",
                         options={"logprobs": True})
    if word_timestamps:
        alignment_session(model)  # an export without alignment.onnx: refused before any decoding
    samples = read_samples(audio, features_config.sampling_rate, max_seconds)
    window = features_config.nb_max_frames
    features, first = _features(samples, features_config)
    config = _generation(num_beams, max_new_tokens, options.seed, prompt_lookup_num_tokens, num_assistant_tokens)
    speculation = assisted.speculating(model, config, assistant, runner)
    detected = _detected(model, settings, runner, first, language, task)
    stamped = timestamps or features.shape[1] > window  # long audio always decodes with timestamps
    init = init_tokens(settings, language, task, stamped, detected)
    vocab, max_positions = model.config.tgt_vocab_size, model.config.max_len
    decode_window = _window_decoder(model, runner, settings, config, speculation, stamped)
    begin = settings.timestamp_begin
    text_of = text_reader(model, begin)
    on_window = None if on_text is None else lambda done: on_text(streamed_text(model, done, begin, logprobs))
    out = transcribe_features(features, decode_window, settings, init, vocab, window_frames=window,
                              max_target_positions=max_positions, on_window=on_window,
                              **options.longform(model, settings, prompt_ids(model, settings, prompt), stamped))
    language_token = init[1] if len(init) > 1 and init[1] in (settings.lang_to_id or {}).values() else None
    seconds = len(samples) / features_config.sampling_rate
    segments = out.segments if stamped else [Segment(0.0, seconds, out.ids, out.windows[0])]  # one window
    code = _language_code(settings, language_token) or ("en" if not settings.lang_to_id else None)
    result = {"text": text_of(out.ids), "language": code,
              "segments": [segment_fields(s, text_of(s.tokens)) for s in segments], "ids": list(out.ids)}
    if logprobs:
        # the decoded segments, each with its window: without timestamps `segments` is one made of all the ids,
        # which a recording of several windows (or a window that went on) has with more than one window's
        result["logprobs"] = token_logprobs(model, out.segments, begin)
    if word_timestamps:
        audio_frames = min(features.shape[-1], -(-len(samples) // features_config.hop_length))
        _with_words(result, add_words(model, settings, features, segments, out.windows, window, audio_frames, code))
    return result


def _detected(model: Any, settings: WhisperSettings, runner: WindowRunner | None, first: np.ndarray,
              language: str | None, task: str | None) -> int | None:
    """The language token detected on the first window, when none is given and the model has languages."""
    if not needs_detection(settings, language, task):
        return None
    detect = runner or cache_runner(model.cache_for(GenerationConfig(), 1))
    return detect(np.ascontiguousarray(first), LanguageDetector(1, settings))[0]


def _window_decoder(model: Any, runner: WindowRunner | None, settings: WhisperSettings, config: GenerationConfig,
                    speculation: assisted.Assisted | None, stamped: bool) -> assisted.WindowDecoder:
    """What decodes each window: the runner (default: the export's cache) under Whisper's strategy, speculating
    when `speculation` says so (runtime.speech.assisted)."""
    vocab, max_positions = model.config.tgt_vocab_size, model.config.max_len
    decode_window = window_decoder(runner or cache_runner(model.cache_for(config, max_positions)), settings, config,
                                   vocab, stamped, max_positions)
    return assisted.assisted_decoder(decode_window, speculation, settings, config, stamped, max_positions)


def _with_words(result: dict[str, Any], found: list[list[dict[str, Any]]]) -> None:
    """word_timestamps: each segment's `words`, and all of them as the result's `words`."""
    for fields, segment_words in zip(result["segments"], found):
        fields["words"] = segment_words
    result["words"] = [word for segment_words in found for word in segment_words]


@dataclass(frozen=True)
class LongFormOptions:
    """transcribe's long-form decoding arguments (the module docstring), as transformers' and faster-whisper's."""

    temperature: float | tuple[float, ...] | None = None  # None/0: greedy; a tuple: the fallback's temperatures
    seed: int = 0  # the sampled tries' SplitMix64 seed (runtime.decode.sampling)
    compression_ratio_threshold: float | None = None  # None: the folder's (generation_config.json)
    logprob_threshold: float | None = None
    no_speech_threshold: float | None = None
    condition_on_prev_tokens: bool | None = None  # None: the folder's
    prompt_condition_type: str = "first-segment"  # "all-segments": the initial prompt before every window
    hotwords: str | Sequence[int] | None = None  # faster-whisper's: after <|startofprev|> in every window
    prefix: str | Sequence[int] | None = None  # faster-whisper's: the first window's first words, forced

    @classmethod
    def of(cls, options: dict[str, Any]) -> "LongFormOptions":
        """From transcribe's keyword arguments: an unknown one is one InputError naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"transcribe takes no {', '.join(unknown)}; its decoding options are "
                             f"{', '.join(sorted(known))}", options=dict.fromkeys(unknown))
        return cls(**{k: v for k, v in options.items() if v is not None})

    def longform(self, model: Any, settings: WhisperSettings, prompt_ids: list[int] | None, stamped: bool
                 ) -> dict[str, Any]:
        """runtime.speech.longform.transcribe's keyword arguments for these options."""
        condition = self.condition_on_prev_tokens
        if condition is None:
            condition = bool(settings.condition_on_prev_tokens)
        return {"prompt_ids": prompt_ids, "condition_on_prev_tokens": condition,
                "prompt_condition_type": self.prompt_condition_type,
                "fallback": fallback_for(settings, self.temperature, self.compression_ratio_threshold,
                                         self.logprob_threshold, self.no_speech_threshold),
                "hotword_ids": hotword_ids(model, settings, self.hotwords),
                "prefix_ids": prefix_ids(model, settings, self.prefix, stamped)}


# transcribe's options that only Whisper's long form takes (runtime.speech.transcribe refuses them for a frames model)
DECODING_OPTIONS = frozenset({f.name for f in dataclasses.fields(LongFormOptions)} | {"logprobs"})
# transcribe's speculative decoding (runtime.speech.assisted): Whisper's sequential windows only
SPECULATION_OPTIONS = frozenset({"assistant", "prompt_lookup_num_tokens", "num_assistant_tokens"})


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
