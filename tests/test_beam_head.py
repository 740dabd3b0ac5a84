"""Beam search's device-side top-k (runtime.states.head): the host path's candidates, transformers' hypotheses."""

import numpy as np
import onnxruntime as ort
import pytest

from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.runtime import open_export
from tfm_export.runtime.states import growing as cache
from tfm_export.runtime.decode.beam import top_k
from tfm_export.runtime.device import parse_device
from tfm_export.runtime.options.generation import GenerationConfig
from tfm_export.runtime.states.head import BeamHead
from tfm_export.runtime.decode.processors import bias_array, bias_key, log_softmax, process, process_top

EOS = 2


@pytest.fixture(scope="module")
def head():
    return BeamHead(parse_device("cpu"))


def run_head(head, logits, bias, width):
    return head(ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(logits)), bias, width)


def random_logits(rows, vocab, seed=0, dtype=np.float32):
    """Random logits with exact ties at the top and in the middle, and a row of mostly masked ids."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, vocab)) * 3).astype(dtype)
    x[0, [5, 9, 17, vocab - 1]] = 9.0  # a four-way tie for the best
    x[1, [3, 4, 30]] = x[1, 20]  # a tie around the k-th place
    x[2, :] = np.finfo(dtype).min  # the model's suppress_ids: the lowest finite value
    x[2, [7, 8]] = 1.0
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("vocab", [61, 64])
def test_head_equals_numpy_log_softmax_and_top_k(head, vocab, dtype):
    logits = random_logits(6, vocab, dtype=dtype)
    for banned in ([], [EOS], [0, 5, 9]):
        bias = np.zeros(vocab, np.float32)
        bias[banned] = -np.inf
        logp, ids = run_head(head, logits, bias, 8)
        expected = log_softmax(logits) + bias
        assert np.array_equal(ids, top_k(expected, 8))  # ties: the lower id first, as on the host
        want = np.take_along_axis(expected, ids, axis=1)
        assert np.array_equal(np.isinf(logp), np.isinf(want))
        assert np.allclose(logp[np.isfinite(want)], want[np.isfinite(want)], rtol=0, atol=1e-12)
        best = [i for i in (5, 9, 17, vocab - 1) if i not in banned]  # the tie for the best, by id
        assert ids[0, :len(best)].tolist() == best
        masked = [i for i in range(vocab) if i not in banned + [7, 8]][:6]  # equal masked values: by id
        assert ids[2].tolist() == [7, 8] + masked


def test_head_rows_do_not_depend_on_the_batch(head):
    """A row's scores are bit-equal alone and in a batch (odd vocab: no SIMD tail in the exp sum)."""
    logits = random_logits(64, 8003, seed=3)
    bias = np.zeros(8003, np.float32)
    batched = run_head(head, logits, bias, 8)
    for r in (0, 1, 2, 37, 63):
        alone = run_head(head, logits[r:r + 1], bias, 8)
        assert np.array_equal(alone[0][0], batched[0][r]) and np.array_equal(alone[1][0], batched[1][r])


def test_gathered_head_equals_the_head_of_those_rows(head):
    """In-flight groups pick from some rows of the batch: the graph gathers them, with bit-equal results
    to the head over those rows alone (any order, repeats allowed)."""
    logits = random_logits(24, 8003, seed=4)
    bias = np.zeros(8003, np.float32)
    bias[[EOS, 11]] = -np.inf
    for rows in ([5, 6, 7, 8], [20, 3, 3, 0, 23], list(range(24))):
        gathered = head(ort.OrtValue.ortvalue_from_numpy(logits), bias, 8, rows=np.array(rows))
        alone = run_head(head, logits[rows], bias, 8)
        assert np.array_equal(gathered[0], alone[0]) and np.array_equal(gathered[1], alone[1])
    narrow = head(ort.OrtValue.ortvalue_from_numpy(logits), bias, 4, rows=np.arange(24))
    wide = head(ort.OrtValue.ortvalue_from_numpy(logits), bias, 8, rows=np.arange(24))
    assert np.array_equal(narrow[1], wide[1][:, :4]) and np.array_equal(narrow[0], wide[0][:, :4])


@pytest.mark.parametrize("settings", [dict(min_new_tokens=3), dict(forced_eos=True),
                                      dict(min_new_tokens=9, forced_eos=True)])
def test_head_bias_and_process_top_are_process(head, settings):
    """The head's ban plus process_top give each row's best of `process`, at every step."""
    config = GenerationConfig(num_beams=4, **settings)
    logits = random_logits(8, 40, seed=5)
    history = np.zeros((8, 1), dtype=np.int64)
    for step in range(6):
        scores = process(log_softmax(logits), history, step, 5, config, EOS)
        bias = bias_array(40, bias_key(step, 5, config, EOS))
        logp, ids = run_head(head, logits, bias, 8)
        logp = process_top(logp, ids, step, 5, config, EOS)
        assert np.array_equal(ids, top_k(scores, 8))
        assert np.allclose(logp, np.take_along_axis(scores, ids, axis=1), rtol=0, atol=1e-12)


# -- the head in beam search on exports, against the host path and transformers ---------------------

HF_STEPS = 12
SETTINGS = [dict(num_beams=4, num_return_sequences=4), dict(num_beams=4, length_penalty=0.6, early_stopping=True),
            dict(num_beams=3, length_penalty=2.0, early_stopping="never", num_return_sequences=2),
            dict(num_beams=4, min_new_tokens=5, num_return_sequences=3),
            dict(num_beams=5, length_penalty=0.8, num_return_sequences=5)]


@pytest.fixture(scope="module")
def marian_exports(tmp_path_factory):
    """Random MarianMT models (with and without forced EOS) and the ORT runtime of each one's export."""
    pytest.importorskip("transformers")
    from marian_fixtures import marian, save
    from tfm_export.importers import load_any

    out = []
    for seed in (0, 1):
        hf = marian(seed=seed, forced_eos=seed == 0)
        folder = tmp_path_factory.mktemp(f"head{seed}")
        export_model(load_any(save(hf, folder / "hf")), folder / "out", ExportOptions(validate=False))
        out.append((hf, open_export(folder / "out", device="cpu"), seed == 0))
    return out


def count_calls(monkeypatch, cls, name):
    calls = []
    original = getattr(cls, name)
    monkeypatch.setattr(cls, name, lambda self, *a, **k: calls.append(name) or original(self, *a, **k))
    return calls


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_device_head_equals_host_path_and_transformers(marian_exports, settings, monkeypatch):
    from marian_fixtures import padded_batch
    from test_search import hf_generate, same

    for seed, (hf, runtime, forced) in enumerate(marian_exports):
        src, mask = padded_batch(seed=seed + 1)
        sources = [row[: int(m.sum())] for row, m in zip(src.tolist(), mask)]
        # The folder's defaults (renormalize_logits, forced EOS or not) with the settings over them.
        config = runtime.generation_config(max_new_tokens=HF_STEPS, forced_eos=forced, **settings)
        assert config.renormalize_logits
        with monkeypatch.context() as patch:
            tops, logits = count_calls(patch, BeamHead, "__call__"), count_calls(patch, cache.GrowingState, "logits")
            on_device = runtime.generate(sources, config)
        assert tops and not logits  # the logits never came to the host
        with monkeypatch.context() as patch:
            patch.setattr(cache.GrowingState, "device_top", False)  # an ORT state without the head: the host path
            on_host = runtime.generate(sources, config)
        same(on_device, [[(h.ids, h.score) for h in row] for row in on_host], atol=1e-12)
        same(on_device, hf_generate(hf, src, mask, **settings))  # its generation_config forces EOS or not


def test_whole_row_processors_keep_the_host_path(marian_exports, monkeypatch):
    from marian_fixtures import padded_batch
    from test_search import hf_generate, same

    hf, runtime, forced = marian_exports[0]
    src, mask = padded_batch()
    sources = [row[: int(m.sum())] for row, m in zip(src.tolist(), mask)]
    settings = dict(num_beams=4, no_repeat_ngram_size=2, repetition_penalty=1.3, num_return_sequences=2)
    tops, logits = count_calls(monkeypatch, BeamHead, "__call__"), count_calls(monkeypatch, cache.GrowingState, "logits")
    ours = runtime.generate(sources, max_new_tokens=HF_STEPS, forced_eos=forced, **settings)
    assert logits and not tops
    same(ours, hf_generate(hf, src, mask, **settings))
