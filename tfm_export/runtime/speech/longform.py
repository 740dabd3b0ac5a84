"""Whisper's timestamps -> segments, and transformers' sequential long-form transcription. Torch-free.

`split_segments` is transformers' `_retrieve_segment` (generate's `segments`): a window's ids cut at each
pair of timestamp tokens, times from the window's offset (time precision 0.02 s; a window starts at
seek * 0.02 / 2 s, seek counting mel frames of 10 ms), and how far the next window starts.
`offsets` is the tokenizer's `_compute_offsets` (`return_timestamps` in the ASR pipeline) over one
sequence of several windows' ids.

`transcribe` is the loop of transformers' long-form generate for one audio, with the model behind a
callable `decode_window(window, prompt, temperature)`: `window` the (n_mels, 3000) features from `seek`
(zero-padded, as transformers pads), `prompt` the forced decoder input (runtime.speech.prompt.decoder_prompt,
with the previous text when conditioning), and the result the generated ids (ending with EOS when the
decoder emitted it), or an object with `ids`, `ended`, `avg_logprob`, `no_speech_prob` (and `token_logprobs`)
(runtime.speech.search.WhisperRow). Each window:
1. decode at temperatures[0]; when the compression ratio (zlib over the ids' bytes, EOS included) exceeds
   compression_ratio_threshold, or avg_logprob is below logprob_threshold, decode again at the next
   temperature (the last one's result stays); a window whose avg_logprob is below logprob_threshold
   and whose no_speech_prob exceeds no_speech_threshold is skipped (silence: seek += the window)
   (runtime.speech.fallback.Fallback judges each try);
2. its segments (`split_segments`); seek advances to the last timestamp pair's time, or by the whole
   window when the ids end with a single timestamp or have no pair;
3. with condition_on_prev_tokens (and the temperature below 0.5), the next prompt is <|startofprev|> (or
   the initial prompt, prompt_condition_type "all-segments"), the last max_target_positions // 2 - 1 ids of
   the segments so far (a segment ending in two timestamps without its last), then the init tokens.
faster-whisper's `hotwords` go right after <|startofprev|> in every window (one with none starts with
<|startofprev|> and them), and its `prefix` is forced as the first window's first generated ids (the timestamp
rules see them as generated; that window takes no hotwords, as faster-whisper's get_prompt).
Each window's `Window` (its seek, the temperature that stayed, that try's avg_logprob, compression ratio
and no_speech_prob: the values the fallback test judged, computed once) is kept in `Transcript.windows`
and on each of its segments (`Segment.window`), as openai-whisper's segments carry them.
"""

from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import InputError
from ..decode.loop import DecoderCache, run
from ..options.generation import GenerationConfig
from .fallback import Fallback
from .prompt import WhisperSettings, max_new_tokens
from .search import WhisperRow, whisper_strategy

TIME_PRECISION = 0.02  # seconds per timestamp token
FEATURE_PRECISION = 0.01  # seconds per mel frame
INPUT_STRIDE = 2  # mel frames per encoder position (Whisper's two convolutions)
WINDOW_FRAMES = 3000  # 30 s of mel frames: one window


@dataclass(frozen=True)
class Window:
    """One decoded window: where it started, the temperature of the try that stayed, and that try's
    measures (transformers' fallback test; openai-whisper's segment fields)."""

    seek: int  # mel frames (10 ms) from the audio's start
    temperature: float
    avg_logprob: float | None  # the decoder's (runtime.speech.search.WhisperRow); None: it gave ids only
    compression_ratio: float  # `compression_ratio` of its ids, EOS included
    no_speech_prob: float | None  # P(<|nospeech|>) at <|startoftranscript|>
    skipped: bool = False  # silence: no segments
    # What it read and generated, for word timestamps (runtime.speech.words), not part of what it measured:
    prompt: tuple[int, ...] = field(default=(), compare=False)  # the decoder's forced input
    ids: tuple[int, ...] = field(default=(), compare=False)  # the ids it generated, EOS included when it ended
    logprobs: tuple[float, ...] = field(default=(), compare=False)  # each id's log-probability (): not kept


@dataclass(frozen=True)
class Segment:
    start: float  # seconds from the audio's start
    end: float
    tokens: list[int]  # its ids, timestamps included (transformers' segment "tokens")
    window: Window | None = None  # the window it was decoded in (`transcribe` sets it)


def split_segments(ids: Sequence[int], timestamp_begin: int, time_offset: float = 0.0,
                   window_frames: int = WINDOW_FRAMES, time_precision: float = TIME_PRECISION,
                   feature_precision: float = FEATURE_PRECISION, input_stride: int = INPUT_STRIDE
                   ) -> tuple[list[Segment], int]:
    """A window's generated ids (EOS removed) -> its segments and the frames to advance seek by
    (transformers' `_retrieve_segment`); `window_frames`: the frames the window held (at most 3000)."""
    ids = [int(t) for t in ids]
    stamp = [t >= timestamp_begin for t in ids]
    single_ending = stamp[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(stamp) - 1) if stamp[i] and stamp[i + 1]]
    if cuts:
        if single_ending:
            cuts.append(len(ids))
        else:
            cuts[-1] += 1  # the last segment keeps both timestamps
        segments, last = [], 0
        for i, cut in enumerate(cuts):
            piece = ids[last:cut]
            end_at = -1 if i < len(cuts) - 1 or single_ending else -2
            segments.append(Segment(time_offset + float(piece[0] - timestamp_begin) * time_precision,
                                    time_offset + float(piece[end_at] - timestamp_begin) * time_precision, piece))
            last = cut
        advance = window_frames if single_ending else (ids[last - 2] - timestamp_begin) * input_stride
        return segments, advance
    # transformers computes this in float32: (frames * 0.01) / 0.02, truncated
    end_pos: float = int(np.float32(window_frames) * np.float32(feature_precision) / np.float32(time_precision))
    stamps = [i for i, s in enumerate(stamp) if s]
    if stamps and ids[stamps[-1]] != timestamp_begin:
        end_pos = float(ids[stamps[-1]] - timestamp_begin)
    return [Segment(time_offset, time_offset + end_pos * time_precision, ids)], window_frames


def offsets(ids: Sequence[int], timestamp_begin: int, time_precision: float = TIME_PRECISION,
            segment_size: int = 1500) -> list[Segment]:
    """The tokenizer's `_compute_offsets`: segments of one sequence (several windows' ids one after the
    other; a timestamp lower than the last starts the next window); `tokens` without the timestamps."""
    ids_ = np.asarray(ids, dtype=np.int64)
    stamp = ids_ >= timestamp_begin
    consecutive = np.where(stamp[:-1] & stamp[1:])[0] + 1
    if consecutive.shape[0] == 0 and stamp.sum() <= 1:
        return []
    if np.where(stamp)[0][-1] + 1 not in consecutive:
        consecutive = np.append(consecutive, np.where(stamp)[0][-1] + 1)
    out: list[Segment] = []
    last, cur_max, prev_len = int(np.where(stamp)[0][0]), 0, 0
    for cut in consecutive.tolist():
        piece = ids_[last:cut]
        if len(piece) > 1:
            start, end = int(piece[0]) - timestamp_begin, int(piece[-1]) - timestamp_begin
            if start < cur_max:  # the next window has started
                single = last >= 2 and not (ids_[last - 2] >= timestamp_begin and ids_[last - 1] >= timestamp_begin)
                prev_len += segment_size if single else cur_max
            cur_max = end
            out.append(Segment(start * time_precision + prev_len * time_precision,
                               end * time_precision + prev_len * time_precision,
                               [int(t) for t in piece if t < timestamp_begin]))
        last = cut
    return out


def compression_ratio(ids: Sequence[int], vocab_size: int) -> float:
    """transformers' `_retrieve_compression_ratio`: raw bytes / zlib bytes of the ids (little-endian,
    int(log2(vocab) / 8) + 1 bytes each)."""
    width = int(math.log2(vocab_size) / 8) + 1
    raw = b"".join(int(t).to_bytes(width, "little") for t in ids)
    return len(raw) / len(zlib.compress(raw))


@dataclass
class Transcript:
    ids: list[int] = field(default_factory=list)  # every segment's tokens in order (generate's sequences)
    segments: list[Segment] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)  # each decoded window, skipped ones included


def previous_text(segments: Sequence[Segment], timestamp_begin: int, cut_off: int) -> list[int]:
    """The segments' ids for conditioning (transformers' `_pad_to_max_length` with
    skip_ending_double_timestamps): a segment ending in two timestamps loses its last; the last `cut_off`."""
    ids: list[int] = []
    for seg in segments:
        t = seg.tokens
        ids += t[:-1] if len(t) > 2 and t[-2] >= timestamp_begin else t
    return ids[-cut_off:] if cut_off > 0 else ids


def window_prompt(settings: WhisperSettings, init: Sequence[int], history: Sequence[Segment], condition: bool,
                  prompt_ids: Sequence[int] | None = None, prompt_condition_type: str = "first-segment",
                  max_target_positions: int = 448, hotword_ids: Sequence[int] = ()) -> list[int]:
    """A window's forced decoder input (transformers' `_prepare_decoder_input_ids` for one audio); `history`:
    the segments so far, the initial prompt's (without <|startofprev|>) first with "first-segment";
    `hotword_ids`: faster-whisper's hotwords, right after <|startofprev|> (before the prompt and the text)."""
    prev = settings.prev_sot_token_id
    if prev is None and len(settings.suppress_tokens) >= 2:
        prev = settings.suppress_tokens[-2]
    text: list[int] = []
    if condition and history:
        head = list(prompt_ids) if prompt_ids and prompt_condition_type == "all-segments" else \
            [prev] if prev is not None else []
        text = previous_text(history, settings.timestamp_begin, max_target_positions // 2 - 1)
    else:
        head = list(prompt_ids or ())
    if hotword_ids:
        head = [prev, *hotword_ids, *head[1:]]  # head[0], when there is one, is <|startofprev|>
    return [*head, *text, *init]


Decoded = Any  # a sequence of ids, or an object with ids / ended / avg_logprob / no_speech_prob (/ token_logprobs)


def _read(result: Decoded, eos: int) -> tuple[list[int], float | None, float | None, tuple[float, ...]]:
    if hasattr(result, "ids"):
        ids = [int(t) for t in result.ids] + ([eos] if getattr(result, "ended", False) else [])
        return (ids, getattr(result, "avg_logprob", None), getattr(result, "no_speech_prob", None),
                tuple(getattr(result, "token_logprobs", ())))
    return [int(t) for t in result], None, None, ()


def _decode_tries(decode_window: Callable[..., Decoded], window: np.ndarray, prompt: list[int], forced: list[int],
                  fallback: Fallback, seek: int, vocab_size: int, eos: int) -> Window:
    """The window decoded at each temperature in turn while `fallback` judges the try to need it: the try that
    stayed, marked skipped when it is silence. `forced`: ids forced as the first generated ones (a prefix),
    decoded after the prompt and counted as the window's ids."""
    for temperature in fallback.temperatures:
        result = (decode_window(window, [*prompt, *forced], temperature, len(forced)) if forced
                  else decode_window(window, prompt, temperature))
        ids, avg, no_speech, logprobs = _read(result, eos)
        ids = [*forced, *ids]
        logprobs = (0.0,) * len(forced) + logprobs if logprobs else ()
        decoded = Window(seek, temperature, avg, compression_ratio(ids, vocab_size), no_speech, prompt=tuple(prompt),
                         ids=tuple(ids), logprobs=logprobs)
        needs, skip = fallback.judge(decoded)
        if not needs:
            break
    return replace(decoded, skipped=skip)


def transcribe(features: np.ndarray, decode_window: Callable[..., Decoded],
               settings: WhisperSettings, init: Sequence[int], vocab_size: int, *,
               prompt_ids: Sequence[int] | None = None, condition_on_prev_tokens: bool = False,
               prompt_condition_type: str = "first-segment", fallback: Fallback = Fallback(),
               num_frames: int | None = None, window_frames: int = WINDOW_FRAMES,
               max_target_positions: int = 448, hotword_ids: Sequence[int] = (), prefix_ids: Sequence[int] = (),
               on_window: Callable[[list[Segment]], None] | None = None) -> Transcript:
    """One audio's (n_mels, frames) features -> its Transcript (the module docstring's loop); `init`: the
    init tokens (runtime.speech.prompt.init_tokens, with timestamps); `prompt_ids`: an initial prompt
    (runtime.speech.prompt.prompt_prefix); `hotword_ids`, `prefix_ids`: faster-whisper's hotwords (every window
    but one with a prefix) and prefix (the first window's first ids, forced); `num_frames`: the audio's real
    frames (default: all); `on_window`: called after each window with the segments so far (a server streams
    them; raising stops the loop)."""
    if prompt_condition_type not in ("first-segment", "all-segments"):
        raise InputError('{prompt_condition_type} must be "first-segment" or "all-segments"',
                         options={"prompt_condition_type": prompt_condition_type})
    if prompt_condition_type == "all-segments" and not condition_on_prev_tokens:
        raise InputError("{prompt_condition_type} needs {condition_on_prev_tokens}",
                         options={"prompt_condition_type": "all-segments", "condition_on_prev_tokens": None})
    begin, eos = settings.timestamp_begin, settings.eos_token_id
    history: list[Segment] = []
    if prompt_ids and prompt_condition_type == "first-segment":
        first = list(prompt_ids)
        history.append(Segment(0.0, 0.0, first[1:] if first[0] == settings.prev_sot_token_id else first))
    start = len(history)
    out = Transcript()
    seek, total = 0, features.shape[-1] if num_frames is None else num_frames
    condition = condition_on_prev_tokens
    while seek < total:
        offset = seek * TIME_PRECISION / INPUT_STRIDE
        frames = min(total - seek, window_frames)
        window = features[:, seek:seek + frames]
        if frames < window_frames:
            window = np.pad(window, ((0, 0), (0, window_frames - frames)))
        forced = list(prefix_ids) if seek == 0 else []
        prompt = window_prompt(settings, init, history, condition, prompt_ids, prompt_condition_type,
                               max_target_positions, () if forced else hotword_ids)
        decoded = _decode_tries(decode_window, window, prompt, forced, fallback, seek, vocab_size, eos)
        condition = condition_on_prev_tokens and decoded.temperature < 0.5
        out.windows.append(decoded)
        if decoded.skipped:
            seek += frames
            continue
        ids = list(decoded.ids[:-1] if decoded.ids and decoded.ids[-1] == eos else decoded.ids)
        segments, advance = split_segments(ids, begin, offset, frames)
        seek += advance if advance > 0 else frames  # a pair at <|0.00|>: transformers would decode it again forever
        history += [replace(s, window=decoded) for s in segments]
        if on_window is not None:
            on_window(history[start:])
    out.segments = history[start:]
    out.ids = [t for seg in out.segments for t in seg.tokens]
    return out


@functools.lru_cache(maxsize=64)
def window_config(config: GenerationConfig, temperature: float) -> GenerationConfig:
    """The decoding settings of one fallback try (transformers' generate_with_fallback): sampling at
    `temperature` > 0 (one beam), else `config` as it is with temperature 1. Cached (both are frozen): each
    window of each VAD chunk asks, and a GenerationConfig checks every option when made."""
    if temperature > 0.0:
        return config.replace(do_sample=True, temperature=temperature, num_beams=1, num_return_sequences=1)
    return config.replace(do_sample=False, temperature=1.0)


WindowRunner = Callable[[np.ndarray, Any], Any]
"""Decodes one (n_mels, 3000) window with a runtime.decode.loop Strategy to its end and returns its results:
`cache_runner` over a runtime cache (a direct call), or the server's in-flight window batch
(serve.windows), where the windows of many recordings share each decoder step."""


def cache_runner(cache: DecoderCache) -> WindowRunner:
    """A WindowRunner that decodes each window alone on `cache` (runtime.decode.loop.run, a batch of one)."""
    return lambda window, strategy: run(cache, window[None], strategy)


def window_decoder(run_window: WindowRunner, settings: WhisperSettings, config: GenerationConfig, vocab_size: int,
                   timestamps: bool = True, max_target_positions: int = 448
                   ) -> Callable[..., WhisperRow]:
    """`transcribe`'s `decode_window(window, prompt, temperature, forced=0)` over a WindowRunner (an encoder that
    reads (batch, n_mels, frames) features): one source, the Whisper strategy of `window_config`, the best row;
    the prompt's last `forced` ids are a prefix, generated ids to Whisper's rules (search.whisper_strategy).
    (Sampling draws from config.seed in every window and try: transformers' global generator is not reproduced.)"""

    def decode_window(window: np.ndarray, prompt: list[int], temperature: float, forced: int = 0) -> WhisperRow:
        steps = max_new_tokens(settings, len(prompt), config.max_new_tokens, max_target_positions)
        strategy = whisper_strategy([prompt], steps, settings, window_config(config, temperature), timestamps,
                                    vocab_size, forced=forced)
        return run_window(window, strategy)[0][0]

    return decode_window
