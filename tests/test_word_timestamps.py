"""Word timestamps (runtime.speech.alignment, runtime.speech.words): the pieces against transformers' own functions, the
CLI's --word-timestamps, and the refusals. Parity of the times on real speech: tests/test_whisper_trained.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from transformers.models.whisper.generation_whisper import _dynamic_time_warping, _median_filter  # noqa: E402
from transformers.models.whisper.tokenization_whisper import _combine_tokens_into_words  # noqa: E402

from helpers import run_cli  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.alignment import dtw, median_filter, token_times, words  # noqa: E402

DIGITS = "models/whisper-digits"  # a published-style tokenizer (byte-level BPE, Whisper's special tokens)


@pytest.mark.parametrize("shape,levels", [((3, 5), 3), ((9, 40), 4), ((12, 200), 0), ((1, 7), 2)])
def test_dtw_and_the_median_filter_are_transformers(shape, levels):
    """Random matrices, and matrices of few values (ties everywhere: the tie-breaking must be transformers')."""
    rng = np.random.default_rng(sum(shape))
    for _ in range(5):
        matrix = rng.integers(0, levels, shape).astype(np.float64) if levels else rng.standard_normal(shape)
        ours, theirs = dtw(matrix), _dynamic_time_warping(matrix)
        assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
        weights = rng.standard_normal((2, *shape)).astype(np.float32)
        assert np.allclose(median_filter(weights, 7), _median_filter(torch.from_numpy(weights), 7).numpy(), atol=0)


def test_token_times_have_one_per_token_the_last_repeated():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 6, 50)).astype(np.float32)  # heads, rows (tokens but the last), positions
    times = token_times(weights, num_frames=60)
    assert len(times) == 7 and times[0] == 0.0 and times[-1] == times[-2]
    assert np.all(np.diff(times) >= 0) and times.max() <= 29 * 0.02  # within the 30 positions of 60 frames


def open_export_tokenizer():
    """The folder's tokenizer.json as an export decodes with it (tokenizers' decode)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{DIGITS}/tokenizer.json")
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("text,language", [
    (" three, (one) four. \"five\" -six- seven!", "english"),
    (" zwei, drei; vier... fünf?", "german"),
    ("十二点钟，我们走吧。", "chinese"),
])
def test_words_are_transformers_words(text, language):
    """Punctuation joins its word, words split on spaces (on characters for Chinese, whose byte-level tokens
    split characters): the same words, and each timed from its first token to the next word's first."""
    theirs = transformers.WhisperTokenizer.from_pretrained(DIGITS)
    decode = open_export_tokenizer()
    ids = theirs.encode(text, add_special_tokens=False)
    times = np.arange(len(ids) + 1) * 0.1
    code = {"english": "en", "german": "de", "chinese": "zh"}[language]
    got = words(decode, ids, times, theirs.eos_token_id, code)
    texts, _, indices = _combine_tokens_into_words(theirs, ids, language)
    assert [w["word"] for w in got] == texts and "".join(texts) == text
    assert [(w["start"], w["end"]) for w in got] == [(round(times[i[0]], 2), round(times[i[-1] + 1], 2))
                                                      for i in indices]


def test_cli_json_has_the_words_and_other_formats_refuse_them(whisper_export, tmp_path):
    sf = pytest.importorskip("soundfile")
    speech_wav = tmp_path / "tones.wav"
    t = np.arange(2 * 16000) / 16000
    sf.write(speech_wav, (0.3 * np.sin(2 * np.pi * (220 + 80 * np.sin(0.7 * t)) * t)).astype(np.float32), 16000)
    result = run_cli("transcribe", whisper_export, speech_wav, "--word-timestamps", "--json", "--max-new-tokens", 8)
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["words"] == [w for s in record["segments"] for w in s["words"]]
    assert all(w["start"] <= w["end"] for w in record["words"])
    refused = run_cli("transcribe", whisper_export, speech_wav, "--word-timestamps", "--format", "srt")
    assert refused.exit_code == 2 and "--word-timestamps shows in --json" in refused.output


def test_an_export_without_alignment_is_refused_before_decoding(whisper_export, tmp_path):
    """An export made before alignment.onnx (or of a folder without alignment_heads): one InputError."""
    older = tmp_path / "older"
    shutil.copytree(whisper_export, older)
    manifest = json.loads((older / "manifest.json").read_text())
    del manifest["graphs"]["alignment"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    (older / "alignment.onnx").unlink()
    model = open_export(older, device="cpu")
    with pytest.raises(InputError, match="no alignment.onnx, which word timestamps need"):
        model.transcribe(np.zeros(16000, np.float32), word_timestamps=True)
    assert "words" not in model.transcribe(np.zeros(16000, np.float32), max_new_tokens=4)
