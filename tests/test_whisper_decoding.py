"""Whisper decoding (runtime.speech.prompt, whisper_search, whisper_longform) against transformers' own code.

Everything is built from dicts on a small made-up vocabulary laid out as Whisper's (text, EOS, SOT,
languages, tasks, <|startoftranscript|>... <|notimestamps|>, then the timestamps); nothing is downloaded.
- processors: transformers' SuppressTokens / SuppressTokensAtBegin / WhisperTimeStamp logits processors
  (and the list `_retrieve_logit_processors` builds) on random logits and log-probabilities (beam rows) and
  random histories: equal -inf masks, equal values;
- prompts: `_retrieve_init_tokens` and `_prepare_decoder_input_ids` (private, called here with stand-ins);
- segments: `_retrieve_segment` (generate's segments) and the tokenizer's `_compute_offsets`;
- the long-form driver with a scripted window decoder (seeks, times, prompts, fallback);
- the strategies against `WhisperForConditionalGeneration.generate` of a tiny random model (greedy,
  timestamps, language detection, beam search), stepped here without a cache.
"""

from __future__ import annotations

import copy
import json
import types

import numpy as np
import pytest
import torch
from transformers import GenerationConfig as HFGenerationConfig
from transformers import WhisperConfig, WhisperForConditionalGeneration
from transformers.generation.logits_process import (LogitsProcessorList, SuppressTokensAtBeginLogitsProcessor,
                                                    SuppressTokensLogitsProcessor, WhisperTimeStampLogitsProcessor)
from transformers.models.whisper.generation_whisper import WhisperGenerationMixin
from transformers.models.whisper.tokenization_whisper import WhisperTokenizer

from tfm_export.errors import InputError, ManifestError
from tfm_export.runtime.decode.loop import run
from tfm_export.runtime.options.generation import GenerationConfig
from tfm_export.runtime.speech.prompt import WhisperSettings, init_tokens, language_id, max_new_tokens, prompt_prefix
from tfm_export.runtime.speech.rules import (detect_language, language_probs, suppress, suppress_at_begin,
                                             timestamp_rules, whisper_process)
from tfm_export.runtime.speech.longform import (Fallback, Segment, Window, cache_runner, compression_ratio, offsets,
                                                split_segments, transcribe, window_config, window_decoder,
                                                window_prompt)
from tfm_export.runtime.speech.search import LanguageDetector, prompts_for, whisper_strategy
from whisper_fixtures import generate_segments

EOS, SOT, TRANSLATE, TRANSCRIBE, PREV, NOSPEECH, NTS = 50, 51, 57, 58, 60, 61, 62
BEGIN = NTS + 1  # <|0.00|>
VOCAB = BEGIN + 61  # timestamps up to <|1.20|>
LANGS = {"<|en|>": 52, "<|de|>": 53, "<|fr|>": 54, "<|es|>": 55, "<|zh|>": 56}
GENERATION = {  # generation_config.json of a multilingual Whisper folder, on this vocabulary
    "decoder_start_token_id": SOT, "eos_token_id": EOS, "pad_token_id": EOS, "bos_token_id": EOS,
    "no_timestamps_token_id": NTS, "lang_to_id": LANGS,
    "task_to_id": {"translate": TRANSLATE, "transcribe": TRANSCRIBE},
    "is_multilingual": True, "suppress_tokens": [1, 2, 7, 11, 59, PREV, NOSPEECH], "begin_suppress_tokens": [3, EOS],
    "max_initial_timestamp_index": 5, "prev_sot_token_id": PREV, "forced_decoder_ids": [[1, None], [2, TRANSCRIBE]],
    "alignment_heads": [[0, 1]], "max_length": 448, "return_timestamps": False,
}
SETTINGS = WhisperSettings.from_dict(GENERATION)


def hf_config(**changes) -> HFGenerationConfig:
    """transformers' GenerationConfig of GENERATION with `changes` (a None value is set as None)."""
    data = {**copy.deepcopy(GENERATION), **changes}
    config = HFGenerationConfig(**{k: v for k, v in data.items() if v is not None})
    for key, value in data.items():
        if value is None:
            setattr(config, key, None)
    return config


def random_history(rng: np.random.Generator, rows: int, begin: int) -> np.ndarray:
    """Rows of one length: a prompt of `begin` ids, then text and timestamps in Whisper-like patterns."""
    generated = int(rng.integers(0, 7))
    out = []
    for _ in range(rows):
        row = [SOT, *rng.integers(52, 59, begin - 1).tolist()]
        stamp = BEGIN + int(rng.integers(0, 10))
        for _ in range(generated):
            if rng.random() < 0.45:
                stamp = min(stamp + int(rng.integers(-2, 8)), VOCAB - 1)  # sometimes lower: the rules still hold
                row.append(max(stamp, BEGIN))
            else:
                row.append(int(rng.integers(0, EOS)))
        out.append(row)
    return np.array(out, dtype=np.int64)


def random_scores(rng: np.random.Generator, rows: int) -> np.ndarray:
    scores = rng.normal(0, 3, (rows, VOCAB)).astype(np.float32)
    scores[rng.random(rows) < 0.5, BEGIN:] += 3.0  # timestamps often win in sum: the log-prob rule acts
    return scores


def same(mine: np.ndarray, theirs: torch.Tensor) -> None:
    theirs = theirs.double().numpy()
    assert np.array_equal(np.isneginf(mine), np.isneginf(theirs))
    finite = np.isfinite(theirs)
    assert np.array_equal(mine[finite], theirs[finite])


# ---- processors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("beam", [False, True], ids=["logits", "beam-logprobs"])
def test_processors_equal_transformers(beam):
    rng = np.random.default_rng(1)
    for trial in range(120):
        rows, begin = 5, int(rng.integers(1, 5))
        history = random_history(rng, rows, begin)
        scores = random_scores(rng, rows)
        if beam:  # beam search processes log_softmax(logits), as transformers' _beam_search
            scores = torch.log_softmax(torch.from_numpy(scores), -1).numpy()
        ids, hf = torch.from_numpy(history), torch.from_numpy(scores)
        mine = scores.astype(np.float64)
        same(suppress(mine.copy(), GENERATION["suppress_tokens"]),
             SuppressTokensLogitsProcessor(GENERATION["suppress_tokens"])(ids, hf.clone()))
        same(suppress_at_begin(mine.copy(), history.shape[1], begin, GENERATION["begin_suppress_tokens"]),
             SuppressTokensAtBeginLogitsProcessor(GENERATION["begin_suppress_tokens"], begin)(ids, hf.clone()))
        initial = [None, 0, 5][trial % 3]
        theirs = WhisperTimeStampLogitsProcessor(hf_config(max_initial_timestamp_index=initial), begin)(ids, hf.clone())
        same(timestamp_rules(mine.copy(), history, begin, NTS, EOS, initial), theirs)
        # the whole list as Whisper's generate builds it, in its order
        config = hf_config(return_timestamps=True, no_speech_threshold=None)
        processors = LogitsProcessorList(WhisperForConditionalGeneration._retrieve_logit_processors(
            types.SimpleNamespace(), config, None, begin, 1, "cpu"))
        assert [type(p).__name__ for p in processors] == ["SuppressTokensAtBeginLogitsProcessor",
                                                          "SuppressTokensLogitsProcessor",
                                                          "WhisperTimeStampLogitsProcessor"]
        same(whisper_process(mine.copy(), history, begin, SETTINGS, True), processors(ids, hf.clone()))


def test_timestamp_rules_cases():
    """The rules by hand: a pair forbids timestamps, a lone one forbids text, the first token is a timestamp."""
    zeros = np.zeros((1, VOCAB))
    after_pair = timestamp_rules(zeros.copy(), np.array([[SOT, BEGIN, 5, BEGIN + 3, BEGIN + 3]]), 1, NTS, EOS,
                                 from_logprob=False)
    assert np.isneginf(after_pair[0, BEGIN:]).all() and np.isfinite(after_pair[0, :NTS]).all()
    lone = timestamp_rules(zeros.copy(), np.array([[SOT, BEGIN, 5, BEGIN + 3]]), 1, NTS, EOS, from_logprob=False)
    assert np.isneginf(lone[0, :EOS]).all() and np.isneginf(lone[0, BEGIN:BEGIN + 3]).all()
    assert np.isfinite(lone[0, BEGIN + 3:]).all() and np.isfinite(lone[0, EOS])
    first = timestamp_rules(zeros.copy(), np.array([[SOT]]), 1, NTS, EOS, 2, from_logprob=False)
    assert np.flatnonzero(np.isfinite(first[0])).tolist() == [BEGIN, BEGIN + 1, BEGIN + 2]


# ---- settings and prompts --------------------------------------------------------------------------

def test_settings_round_trip():
    assert WhisperSettings.from_dict(SETTINGS.to_dict()) == SETTINGS
    assert SETTINGS.timestamp_begin == BEGIN and SETTINGS.no_speech_token_id == NOSPEECH
    assert SETTINGS.suppress_tokens == (1, 2, 7, 11, 59, PREV, NOSPEECH)
    assert SETTINGS.languages()[:2] == ["<|en|>", "<|de|>"]


def test_settings_from_folder(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(GENERATION))
    assert WhisperSettings.from_folder(tmp_path) == SETTINGS
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": EOS}))
    with pytest.raises(ManifestError, match="decoder_start_token_id"):
        WhisperSettings.from_folder(tmp_path)
    with pytest.raises(ManifestError, match="missing"):
        WhisperSettings.from_folder(tmp_path / "nowhere")
    with pytest.raises(InputError, match="prompt_ids"):  # detection runs without the prompt: detect first
        prompts_for(SETTINGS, 1, None, None, False, prompt_prefix(SETTINGS, [5]))
    assert prompts_for(SETTINGS, 1, None, None, False, [PREV, 5], detected=[53]) == \
        [[PREV, 5, SOT, 53, TRANSCRIBE, NTS]]


class StandIn:
    """What `_retrieve_init_tokens` uses of the model: its device and detect_language."""

    def __init__(self, detected: list[int]):
        self.device, self.detected = torch.device("cpu"), detected

    def detect_language(self, **_):
        return torch.tensor(self.detected)


PROMPT_CASES = [  # (language, task, timestamps, forced_decoder_ids of the folder)
    (None, None, False, "folder"), (None, None, True, "folder"), ("de", None, False, "folder"),
    ("German", "translate", True, "folder"), ("<|fr|>", "transcribe", False, None), (None, "translate", False, None),
    (None, None, False, None), ("es", None, True, None), (["de", "fr"], "transcribe", False, "folder"),
    (None, None, False, [[1, 53], [2, TRANSLATE], [3, NTS]]), (None, "transcribe", True, [[1, 53], [2, TRANSLATE]]),
]


@pytest.mark.parametrize("language,task,timestamps,forced", PROMPT_CASES)
def test_init_tokens_equal_transformers(language, task, timestamps, forced):
    batch, detected = 2, [LANGS["<|zh|>"], LANGS["<|es|>"]]
    forced_ids = GENERATION["forced_decoder_ids"] if forced == "folder" else forced
    config = hf_config(forced_decoder_ids=forced_ids)
    config.language, config.task, config.return_timestamps = language, task, timestamps
    theirs = WhisperGenerationMixin._retrieve_init_tokens(StandIn(detected), None, batch, config,
                                                          types.SimpleNamespace(forced_decoder_ids=None), 3000, {})
    settings = WhisperSettings.from_dict({**GENERATION, "forced_decoder_ids": forced_ids})
    mine = prompts_for(settings, batch, language, task, timestamps, detected=detected)
    assert mine == theirs.tolist()
    if language is None or isinstance(language, str):
        assert init_tokens(settings, language, task, timestamps, detected[0]) == theirs[0].tolist()


def test_language_names():
    for name in ("de", "DE", "german", "German", "<|de|>"):
        assert language_id(SETTINGS, name) == LANGS["<|de|>"]
    for bad in ("xx", "klingon", "<|xx|>", "it"):  # "it" is a Whisper language, not one of this model's
        with pytest.raises(InputError, match="its languages are en, de, fr, es, zh, given as"):
            language_id(SETTINGS, bad)
        config = hf_config()
        config.language = bad
        with pytest.raises(ValueError):
            WhisperGenerationMixin._retrieve_init_tokens(StandIn([52]), None, 1, config, types.SimpleNamespace(),
                                                         3000, {})
    english = WhisperSettings.from_dict({**GENERATION, "is_multilingual": False, "lang_to_id": None})
    with pytest.raises(InputError, match="English-only"):
        init_tokens(english, "de")
    with pytest.raises(InputError, match="task"):
        init_tokens(SETTINGS, "de", "summarize")


def hf_decoder_input(init, prompt_ids, segments, condition, condition_type="first-segment"):
    config = hf_config(prompt_condition_type=condition_type)
    hf_segments = [[{"tokens": torch.tensor(s.tokens)} for s in segments]]
    ids, _ = WhisperGenerationMixin._prepare_decoder_input_ids(
        cur_bsz=1, init_tokens=torch.tensor([init]), current_segments=hf_segments, batch_idx_map=[0],
        do_condition_on_prev_tokens=[condition], prompt_ids=None if prompt_ids is None else torch.tensor(prompt_ids),
        generation_config=config, config=types.SimpleNamespace(max_target_positions=448), device="cpu",
        suppress_tokens=None, timestamp_begin=BEGIN, kwargs={})
    return ids[0].tolist()


def test_window_prompt_equal_transformers():
    init = init_tokens(SETTINGS, "de", "transcribe", True)
    prompt = prompt_prefix(SETTINGS, [5, 6, 7])
    assert prompt == [PREV, 5, 6, 7] and prompt_prefix(SETTINGS, prompt) == prompt
    rng = np.random.default_rng(3)
    history = [Segment(0, 0, [5, 6, 7])] + [
        Segment(0, 1, [BEGIN, *rng.integers(0, EOS, int(rng.integers(1, 90))).tolist(), BEGIN + 9, BEGIN + 9][: n])
        for n in (5, 200, 3, 300)]
    for condition in (False, True):
        for kind in ("first-segment", "all-segments"):
            for segments in (history[:1], history):
                for p in (None, prompt):
                    expected = hf_decoder_input(init, p, segments, condition, kind)
                    assert window_prompt(SETTINGS, init, segments, condition, p, kind) == expected
    assert max_new_tokens(SETTINGS, 4) == 444 and max_new_tokens(SETTINGS, 300) == 148
    with pytest.raises(InputError, match="448"):
        max_new_tokens(SETTINGS, 300, 200)


# ---- segments --------------------------------------------------------------------------------------

def random_window_ids(rng: np.random.Generator) -> list[int]:
    ids, t = [], int(rng.integers(0, 5))
    for _ in range(int(rng.integers(0, 5))):
        ids.append(BEGIN + t)
        ids += rng.integers(0, EOS, int(rng.integers(0, 4))).tolist()
        t += int(rng.integers(0, 8))
        ids.append(BEGIN + min(t, 60))
    ending = rng.integers(0, 4)
    if ending == 0 and ids:
        ids.pop()  # ends with text after a lone timestamp... or a single timestamp
    elif ending == 1:
        ids += rng.integers(0, EOS, 3).tolist()  # an unfinished segment
    elif ending == 2:
        ids.append(BEGIN + min(t + 2, 60))  # a single timestamp ending
    return ids


def test_segments_equal_transformers():
    rng = np.random.default_rng(4)
    for _ in range(400):
        ids = random_window_ids(rng)
        seek, frames = int(rng.integers(0, 9000)), int(rng.choice([3000, 2999, 1234, 17, int(rng.integers(1, 3000))]))
        theirs, advance = WhisperGenerationMixin._retrieve_segment(
            seek_sequence=torch.tensor(ids, dtype=torch.long), seek_outputs=[None],
            time_offset=torch.tensor([seek], dtype=torch.float64) * 0.02 / 2, timestamp_begin=BEGIN,
            seek_num_frames=torch.tensor([frames]), time_precision=0.02, time_precision_features=0.01, input_stride=2,
            prev_idx=0, idx=0, return_token_timestamps=False, decoder_input_ids=torch.zeros((1, 4)))
        mine, mine_advance = split_segments(ids, BEGIN, seek * 0.02 / 2, frames)
        assert mine_advance == int(advance)
        assert [(s.start, s.end, s.tokens) for s in mine] == \
            [(float(s["start"]), float(s["end"]), s["tokens"].tolist()) for s in theirs]
    for frames in range(1, 3001):  # no timestamp: the end is frames * 0.01 / 0.02 in float32, truncated
        theirs, _ = WhisperGenerationMixin._retrieve_segment(
            seek_sequence=torch.tensor([5, 6]), seek_outputs=[None],
            time_offset=torch.tensor([0.0], dtype=torch.float64),
            timestamp_begin=BEGIN, seek_num_frames=torch.tensor([frames]), time_precision=0.02,
            time_precision_features=0.01, input_stride=2, prev_idx=0, idx=0, return_token_timestamps=False,
            decoder_input_ids=torch.zeros((1, 4)))
        assert split_segments([5, 6], BEGIN, 0.0, frames)[0][0].end == float(theirs[0]["end"])


class OffsetsStandIn:
    """What WhisperTokenizer._compute_offsets uses of a tokenizer: the ids stand in for the text."""

    all_special_ids = [NTS]

    def _preprocess_token_ids(self, ids):
        return ids

    def _decode(self, ids):
        return [int(t) for t in ids if t < BEGIN]

    def _filter_timestamp_ids(self, text):
        return text


def test_offsets_equal_tokenizer():
    rng = np.random.default_rng(5)
    for _ in range(300):
        ids = [SOT, 53, TRANSCRIBE] + [t for _ in range(int(rng.integers(1, 4))) for t in random_window_ids(rng)]
        theirs = WhisperTokenizer._compute_offsets(OffsetsStandIn(), ids)
        mine = offsets(ids, BEGIN)
        assert [(s.start, s.end, s.tokens) for s in mine] == \
            [(o["timestamp"][0], o["timestamp"][1], o["text"]) for o in theirs]


# ---- long form -------------------------------------------------------------------------------------

def test_transcribe_seeks_and_times():
    """Window 1 ends in a pair at 1.20 s (seek -> 120 frames; the text after it is dropped), window 2 in a
    single timestamp (seek += the whole window), window 3 (500 frames) has no timestamp: one segment to its end."""
    script = [[BEGIN, 5, 6, BEGIN + 30, BEGIN + 30, 7, BEGIN + 60, BEGIN + 60, 8, EOS],
              [BEGIN, 9, BEGIN + 20, BEGIN + 20, 10, BEGIN + 40, EOS],
              [11, 12, EOS]]
    seen = []

    def decode_window(window, prompt, temperature):
        seen.append((window.shape, window[0, 0], window[0, -1], prompt, temperature))
        return script[len(seen) - 1]

    frames = 120 + 3000 + 500
    features = np.arange(1, frames + 1, dtype=np.float32)[None, :].repeat(4, axis=0)
    init = init_tokens(SETTINGS, "de", timestamps=True)
    out = transcribe(features, decode_window, SETTINGS, init, VOCAB, condition_on_prev_tokens=True)
    assert [w.seek for w in out.windows] == [0, 120, 3120]
    assert [s[0] for s in seen] == [(4, 3000)] * 3
    assert [(s[1], s[2]) for s in seen] == [(1, 3000), (121, 3120), (3121, 0)]  # the last window zero-padded
    off = [0 * 0.02 / 2, 120 * 0.02 / 2, 3120 * 0.02 / 2]
    assert [(s.start, s.end) for s in out.segments] == [
        (off[0], off[0] + 30 * 0.02), (off[0] + 30 * 0.02, off[0] + 60 * 0.02),
        (off[1], off[1] + 20 * 0.02), (off[1] + 20 * 0.02, off[1] + 40 * 0.02), (off[2], off[2] + 250 * 0.02)]
    assert out.ids == script[0][:8] + script[1][:-1] + [11, 12]
    # conditioning: <|startofprev|>, the previous segments (a pair's last timestamp dropped), the init tokens
    assert seen[1][3] == [PREV, BEGIN, 5, 6, BEGIN + 30, BEGIN + 30, 7, BEGIN + 60, *init]
    assert seen[2][3][:1] == [PREV] and seen[2][3][-len(init):] == init and all(s[4] == 0.0 for s in seen)
    prompts = []
    transcribe(features, lambda w, p, t: prompts.append(p) or [11, EOS], SETTINGS, init, VOCAB)
    assert prompts == [init, init]  # no conditioning: the init tokens alone; no timestamp: whole windows


def test_transcribe_initial_prompt_segment_dropped():
    init = init_tokens(SETTINGS, "de", timestamps=True)
    prompt = prompt_prefix(SETTINGS, [20, 21])
    seen = []
    out = transcribe(np.zeros((4, 100), np.float32), lambda w, p, t: seen.append(p) or [BEGIN, 5, BEGIN + 3],
                     SETTINGS, init, VOCAB, prompt_ids=prompt, condition_on_prev_tokens=True)
    assert seen == [[PREV, 20, 21, *init]]
    assert [(s.start, s.end, s.tokens) for s in out.segments] == [(0.0, 0.06, [BEGIN, 5, BEGIN + 3])]


def test_transcribe_fallback_and_silence():
    repetitive = [BEGIN] + [5, 6] * 40 + [BEGIN + 50, EOS]
    good = types.SimpleNamespace(ids=[BEGIN, 7, 8, BEGIN + 50], ended=True, avg_logprob=-0.3, no_speech_prob=0.1)
    temps = []

    def decode_window(window, prompt, temperature):
        temps.append(temperature)
        return repetitive if temperature < 0.4 else good

    fallback = Fallback((0.0, 0.2, 0.4, 0.6), compression_ratio_threshold=2.4)
    assert compression_ratio(repetitive, VOCAB) > 2.4 > compression_ratio(good.ids + [EOS], VOCAB)
    init = init_tokens(SETTINGS, "de", timestamps=True)
    out = transcribe(np.zeros((4, 3000), np.float32), decode_window, SETTINGS, init, VOCAB, fallback=fallback)
    assert temps == [0.0, 0.2, 0.4] and out.ids == good.ids
    # the try that stayed: its temperature and measures, on the window and on each of its segments
    kept = Window(0, 0.4, -0.3, compression_ratio(good.ids + [EOS], VOCAB), 0.1)
    assert out.windows == [kept] and [s.window for s in out.segments] == [kept]
    silent = types.SimpleNamespace(ids=[BEGIN, 5, BEGIN + 1], ended=True, avg_logprob=-2.0, no_speech_prob=0.9)
    quiet = Fallback((0.0, 0.5), logprob_threshold=-1.0, no_speech_threshold=0.6)
    out = transcribe(np.zeros((4, 4000), np.float32), lambda w, p, t: silent, SETTINGS, init, VOCAB, fallback=quiet)
    assert [(w.seek, w.temperature, w.skipped) for w in out.windows] == [(0, 0.0, True), (3000, 0.0, True)]
    assert out.segments == [] and out.windows[0].avg_logprob == -2.0 and out.windows[0].no_speech_prob == 0.9
    with pytest.raises(InputError, match="logprob_threshold"):
        Fallback(no_speech_threshold=0.6)


def test_transcribe_logprob_fallback_and_conditioning():
    """A low average log-probability falls back too; after a window decoded at temperature >= 0.5 the next
    window is not conditioned on the previous text (transformers' is_low_temperature)."""
    init = init_tokens(SETTINGS, "de", timestamps=True)
    seen = []

    def decode_window(window, prompt, temperature):
        seen.append((prompt, temperature))
        doubtful = temperature == 0.0 and len(seen) == 1
        return types.SimpleNamespace(ids=[BEGIN, 7, BEGIN + 10, BEGIN + 10, 8, BEGIN + 20, BEGIN + 20],
                                     ended=False, avg_logprob=-3.0 if doubtful else -0.2, no_speech_prob=0.0)

    out = transcribe(np.zeros((4, 3000), np.float32), decode_window, SETTINGS, init, VOCAB,
                     condition_on_prev_tokens=True, fallback=Fallback((0.0, 0.6), logprob_threshold=-1.0))
    assert [t for _, t in seen[:3]] == [0.0, 0.6, 0.0]
    assert seen[2][0] == init  # window 1 ended at 0.6: no conditioning for window 2
    assert seen[3][0][0] == PREV  # window 2 ended at 0.0: window 3 is conditioned again
    assert [(w.seek, w.temperature) for w in out.windows[:3]] == [(0, 0.6), (40, 0.0), (80, 0.0)]


def test_window_config_and_language_probs():
    beams = GenerationConfig(num_beams=3, max_new_tokens=9)
    assert window_config(beams, 0.0) == beams
    hot = window_config(beams, 0.4)
    assert (hot.do_sample, hot.temperature, hot.num_beams, hot.max_new_tokens) == (True, 0.4, 1, 9)
    logits = np.random.default_rng(9).normal(0, 2, (3, VOCAB))
    probs = language_probs(logits, SETTINGS)
    assert all(abs(sum(p.values()) - 1) < 1e-12 for p in probs)
    assert [LANGS[max(p, key=p.get)] for p in probs] == detect_language(logits, SETTINGS).tolist()


def test_compression_ratio_equal_transformers():
    rng = np.random.default_rng(6)
    for vocab in (VOCAB, 51865):
        ids = rng.integers(0, vocab, 50).tolist() + [3, 4] * 30
        assert compression_ratio(ids, vocab) == WhisperGenerationMixin._retrieve_compression_ratio(
            torch.tensor(ids), vocab)


# ---- strategies against generate -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_whisper():
    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=16, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                           decoder_ffn_dim=32, max_source_positions=1500, max_target_positions=64,
                           decoder_start_token_id=SOT, eos_token_id=EOS, pad_token_id=EOS, bos_token_id=EOS,
                           init_std=0.5, begin_suppress_tokens=None, suppress_tokens=None)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = hf_config(max_length=64)
    return model


class TorchRows:
    """A DecoderState over the torch model without a cache: each step runs the whole prefix of each row."""

    device_top = False

    def __init__(self, model, features, rows):
        self.model, self.rows = model, rows
        with torch.no_grad():
            self.memory = model.model.encoder(torch.from_numpy(features)).last_hidden_state
        self.prefix = [[] for _ in range(rows)]
        self.group = rows // features.shape[0]

    def step(self, tokens):
        for r, t in enumerate(tokens.tolist()):
            self.prefix[r].append(t)
        with torch.no_grad():
            out = self.model(encoder_outputs=(self.memory.repeat_interleave(self.group, 0),),
                             decoder_input_ids=torch.tensor(self.prefix)).logits[:, -1]
        self._logits = out.numpy()

    def logits(self):
        return self._logits

    def reorder(self, beam_idx):
        self.prefix = [list(self.prefix[i]) for i in beam_idx.tolist()]


class NoLock:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class TorchCache:
    lock = NoLock()

    def __init__(self, model):
        self.model = model

    def start(self, src, expand=1):
        return TorchRows(self.model, src, src.shape[0] * expand)


GENERATE_CASES = [  # (language, task, timestamps, num_beams, bias of the EOS logit: rows that end, initial prompt)
    ("de", "transcribe", False, 1, 0.0, None), ("de", "translate", True, 1, 0.0, None),
    (None, None, True, 1, 0.0, None), (None, None, False, 1, 0.0, None), ("fr", None, True, 3, 0.0, None),
    (None, "transcribe", False, 2, 0.0, None),
    ("de", "translate", True, 1, 3.0, None), ("de", None, True, 2, 4.0, None), ("de", None, True, 3, 5.0, None),
    ("de", None, True, 1, 0.0, [20, 21, 22]), ("fr", "translate", False, 2, 0.0, [30]),
]


@pytest.mark.parametrize("language,task,timestamps,beams,eos_bias,prompt", GENERATE_CASES)
def test_strategies_equal_generate(tiny_whisper, language, task, timestamps, beams, eos_bias, prompt):
    """Our strategies stepped through runtime.decode.loop.run equal generate's single window token for token
    (force_unique_generate_call: the first window's whole decoder ids), its detected language, and, greedy,
    its average log-probability (`_retrieve_avg_logprobs` on generate's scores) and <|nospeech|> probability."""
    rng = np.random.default_rng(7)
    features = rng.normal(0, 1, (2, 8, 3000)).astype(np.float32)
    new = 12
    cache = TorchCache(tiny_whisper)

    def bias(module, inputs, logits):
        return logits + torch.nn.functional.one_hot(torch.tensor(EOS), VOCAB) * eos_bias

    hook = tiny_whisper.proj_out.register_forward_hook(bias)
    prompt_ids = None if prompt is None else prompt_prefix(SETTINGS, prompt)
    try:
        theirs = tiny_whisper.generate(torch.from_numpy(features), language=language, task=task,
                                       prompt_ids=None if prompt_ids is None else torch.tensor(prompt_ids),
                                       return_timestamps=timestamps, max_new_tokens=new, num_beams=beams,
                                       do_sample=False, force_unique_generate_call=True, output_scores=True,
                                       return_dict_in_generate=True)
        detected = None
        if language is None:
            detected = run(cache, features, LanguageDetector(2, SETTINGS))
            assert detected == tiny_whisper.detect_language(torch.from_numpy(features)).tolist()
        prompts = prompts_for(SETTINGS, 2, language, task, timestamps, prompt_ids)
        config = GenerationConfig(num_beams=beams, max_new_tokens=new)
        strategy = whisper_strategy(prompts, new, SETTINGS, config, timestamps, VOCAB)
        rows = run(cache, features, strategy)
        with torch.no_grad():
            # WhisperNoSpeechDetection reads the logits at <|startoftranscript|>, after an initial prompt
            head = torch.tensor([[*(prompt_ids or []), SOT]] * 2)
            first = tiny_whisper(input_features=torch.from_numpy(features), decoder_input_ids=head).logits[:, -1]
    finally:
        hook.remove()
    ended = 0
    for b in range(2):
        row = rows[b][0]
        expected = theirs["sequences"][b].tolist()
        assert expected[: len(row.prompt)] == row.prompt
        if detected is not None:
            assert row.prompt[1] == detected[b]
        expected = expected[len(row.prompt):]
        mine = row.ids + ([EOS] if row.ended else [])
        assert mine == expected[: len(mine)] and all(t == EOS for t in expected[len(mine):]), (mine, expected)
        ended += row.ended
        assert row.no_speech_prob == pytest.approx(float(torch.softmax(first[b], -1)[NOSPEECH]), abs=1e-6)
        if beams == 1:
            scores = [step[b] for step in theirs["scores"]]
            avg = WhisperGenerationMixin._retrieve_avg_logprobs(scores, torch.tensor(mine), 0.0)
            assert row.avg_logprob == pytest.approx(float(avg), abs=1e-5)
    assert (ended > 0) == (eos_bias > 0)  # rows of the biased cases end before max_new_tokens


def test_transcribe_equal_long_form_generate(tiny_whisper):
    """`transcribe` with our greedy strategy as the window decoder equals transformers' long-form generate
    segment for segment: 3200 frames, conditioned on the previous text; its windows start at 0, 8 (a pair),
    3008 (a single timestamp ending: the whole window), 3120. (Unconditioned, this model's windows seek a few
    frames at a time: hundreds of windows; window_prompt's own test covers that prompt.) Each segment's window
    measures (seek, temperature, avg_logprob, compression ratio, no-speech probability) are transformers'."""
    condition, new = True, 10
    features = np.random.default_rng(8).normal(0, 1, (8, 3200)).astype(np.float32)
    theirs, segments = generate_segments(tiny_whisper, features, language="de", max_new_tokens=new,
                                         condition_on_prev_tokens=condition)
    decode_window = window_decoder(cache_runner(TorchCache(tiny_whisper)), SETTINGS,
                                   GenerationConfig(max_new_tokens=new), VOCAB, max_target_positions=64)
    init = init_tokens(SETTINGS, "de", timestamps=True)
    out = transcribe(features, decode_window, SETTINGS, init, VOCAB, condition_on_prev_tokens=condition,
                     max_target_positions=64)
    expected = [(s["start"], s["end"], s["tokens"]) for s in segments]
    assert [w.seek for w in out.windows] == [0, 8, 3008, 3120]
    assert [(s.start, s.end, s.tokens) for s in out.segments] == expected
    assert out.ids == [t for t in theirs["sequences"][0].tolist() if t != EOS]
    assert_measures_equal([s.window for s in out.segments], segments)


def assert_measures_equal(windows, expected):
    """Our segments' windows carry transformers' values: seek and temperature equal, the floats within 1e-4."""
    assert [(w.seek, w.temperature) for w in windows] == [(s["seek"], s["temperature"]) for s in expected]
    for name in ("avg_logprob", "compression_ratio", "no_speech_prob"):
        assert np.allclose([getattr(w, name) for w in windows], [s[name] for s in expected], rtol=0, atol=1e-4), name
