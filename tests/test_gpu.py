"""The CUDA paths on a GPU, each against CPU float32 (the whole module skips without a GPU).

IOBinding with the cache on the device (greedy, beam search with its device-side head), the static
decoder replayed as CUDA graphs, `--dtype float16`, the server's in-flight rows and Whisper. Exact token
equality on the bundled model, whose answers have clear margins; on trained fixtures float16 may
flip near-ties, so there the bar is token agreement (>= 99.5 %), or for speech the held-out WER, printed for
BENCHMARKS.md (`pytest -m gpu -rP`).

The Whisper case speaks models/whisper-digits' held-out set with espeak-ng. A GPU machine without it reads
the recordings from the .npz that TFM_HELDOUT_SPEECH names, written where espeak-ng is by
`python tests/test_gpu.py speech.npz`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import hf_fixtures
from conftest import BUNDLED, has_cuda_gpu
from helpers import run_cli_ok
from test_serve_groups import outcome
from tfm_export.demo import read_heldout
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.serve.batcher import EngineConfig, InflightBatcher, Job
from tfm_export.serve.engine import ServeSettings, open_engine


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda_gpu(), reason="needs a CUDA GPU and onnxruntime-gpu")]

SOURCES = [s for s, _ in read_heldout(BUNDLED / "heldout.tsv")] + [str(n) for n in range(0, 1000, 7)]
FAMILIES = ("marian", "bart", "t5")  # sinusoidal + learned positions, T5's relative bias
AGREEMENT = 0.995
WHISPER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
WHISPER_DROP = 0.02  # float16's allowed WER rise over CPU float32 on the held-out set (as tests/test_whisper_trained)


@pytest.fixture(scope="module")
def bundled_static(tmp_path_factory):
    """The bundled model with its static decoders (CUDA graphs, in-flight rows), float32."""
    out = tmp_path_factory.mktemp("gpu-static") / "out"
    export_model(load_checkpoint(BUNDLED / "model.pt"), out, ExportOptions(static_cache=True))
    return out


@pytest.fixture(scope="module")
def bundled_float16(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-f16") / "out"
    run_cli_ok(BUNDLED / "model.pt", "-o", out, "--dtype", "float16", "--cuda-graph")
    return out


def in_batches(model, ids, config, size=64):
    return [h for i in range(0, len(ids), size) for h in model.generate(ids[i:i + size], config)]


def assert_same(got, expected, scores=True):
    assert [[h.ids for h in hyps] for hyps in got] == [[h.ids for h in hyps] for hyps in expected]
    if scores and expected[0][0].score is not None:
        np.testing.assert_allclose([h.score for hyps in got for h in hyps],
                                   [h.score for hyps in expected for h in hyps], atol=1e-4)


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}, {"num_beams": 4, "num_return_sequences": 4}],
                         ids=["greedy", "beam4", "nbest4"])
def test_cuda_decoding_equals_cpu(bundled_export, bundled_static, options):
    """IOBinding (growing cache) and the CUDA-graph static decoder, float32, against CPU."""
    cpu = open_export(bundled_export, "cpu")
    ids = [cpu.encode(s) for s in SOURCES]
    config = cpu.generation_config(**options)
    expected = in_batches(cpu, ids, config)
    gpu = open_export(bundled_export, "cuda")
    assert gpu.device.ort_type == "cuda"
    assert_same(in_batches(gpu, ids, config), expected)
    graphs = open_export(bundled_static, "cuda", RuntimeOptions(cuda_graph=True))
    assert_same(in_batches(graphs, ids, config), expected)
    assert_same(in_batches(graphs, ids, config), expected)  # replayed graphs


def test_float16_cuda_graphs_equal_cpu_float32(bundled_export, bundled_float16):
    cpu = open_export(bundled_export, "cpu")
    ids = [cpu.encode(s) for s in SOURCES]
    for options in ({}, {"num_beams": 4}):
        config = cpu.generation_config(**options)
        expected = in_batches(cpu, ids, config)
        for cuda_graph in (False, True):
            half = open_export(bundled_float16, "cuda", RuntimeOptions(cuda_graph=cuda_graph))
            assert_same(in_batches(half, ids, config), expected, scores=False)


def token_agreement(got: list[list[int]], expected: list[list[int]]) -> float:
    """Positions where the two agree, over the longer sequence of each pair."""
    same = sum(a == b for g, e in zip(got, expected) for a, b in zip(g, e))
    return same / sum(max(len(g), len(e)) for g, e in zip(got, expected))


@pytest.mark.parametrize("family", FAMILIES)
def test_float16_agrees_with_float32_on_a_trained_fixture(family, trained_export, tmp_path):
    out = tmp_path / "f16"
    run_cli_ok(hf_fixtures.trained_folder(family), "-o", out, "--dtype", "float16", "--static-slots", "64")
    cpu = open_export(trained_export(family), "cpu")
    ids = [cpu.encode(e.source) for e in hf_fixtures.task_examples(family, 500)]
    report = {}
    for name, options in (("greedy", {"num_beams": 1}), ("default", {})):  # and the folder's default
        config = cpu.generation_config(**options)
        expected = [h[0].ids for h in in_batches(cpu, ids, config)]
        half = open_export(out, "cuda", RuntimeOptions(cuda_graph=True))
        got = [h[0].ids for h in in_batches(half, ids, config)]
        name = f"{name} (beam {config.num_beams})"
        report[name] = {"tokens": token_agreement(got, expected),
                        "sequences": sum(g == e for g, e in zip(got, expected)) / len(ids)}
        assert report[name]["tokens"] >= AGREEMENT, (family, report)
    print(f"float16 agreement {family}: {json.dumps(report)}")


def test_inflight_rows_on_cuda_equal_direct_generate(bundled_static):
    engine = open_engine(ServeSettings(str(bundled_static), device="cuda",
                                       engine=EngineConfig(max_batch=24, max_queue=256)))
    assert isinstance(engine, InflightBatcher) and engine.model.device.ort_type == "cuda"
    rng = random.Random(7)
    mixed = [{}, {"num_beams": 4}, {"num_beams": 3, "num_return_sequences": 2}, {"num_beams": 2}]
    results: dict = {}
    jobs = []
    for n, text in enumerate(rng.sample(SOURCES, 96)):
        config = engine.model.generation_config(**mixed[n % len(mixed)])
        emit = lambda kind, v, n=n: results.setdefault(n, []).append((kind, v))  # noqa: E731
        jobs.append(Job(engine.model.encode(text), 24, emit, config))
    engine.start()
    engine.submit(jobs)
    engine.close(300)
    direct = open_export(bundled_static, "cuda", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        tokens, hypotheses = outcome(results[n])
        expected = direct.generate([job.ids], job.config.replace(max_new_tokens=job.max_new_tokens))[0]
        assert tokens == expected[0].ids, (n, job.config)
        if hypotheses is not None:
            assert [h.ids for h in hypotheses] == [h.ids for h in expected]
            np.testing.assert_allclose([h.score for h in hypotheses], [h.score for h in expected], atol=1e-4)


def spoken_heldout() -> list:
    """[(Spoken, samples)]: whisper-digits' held-out set, read from TFM_HELDOUT_SPEECH or spoken by espeak-ng."""
    sys.path.insert(0, str(WHISPER))
    from speech import Spoken

    rows = (WHISPER / "heldout.tsv").read_text().splitlines()
    if os.environ.get("TFM_HELDOUT_SPEECH"):
        with np.load(os.environ["TFM_HELDOUT_SPEECH"]) as saved:
            return [(Spoken.from_row(row), saved[str(n)]) for n, row in enumerate(rows)]
    if not shutil.which("espeak-ng"):
        pytest.skip("needs espeak-ng or TFM_HELDOUT_SPEECH")
    return [(s, s.samples()) for s in map(Spoken.from_row, rows)]


def test_whisper_on_cuda_transcribes_like_cpu(tmp_path):
    """The trained Whisper fixture on CUDA: float32 gives CPU's ids (language detected, greedy and beam 3);
    float16 keeps the held-out WER within WHISPER_DROP of CPU float32's."""
    jiwer = pytest.importorskip("jiwer")
    heldout = spoken_heldout()[::2]
    run_cli_ok(WHISPER, "-o", tmp_path / "f32")
    run_cli_ok(WHISPER, "-o", tmp_path / "f16", "--dtype", "float16", "--no-validate")
    cpu, gpu = open_export(tmp_path / "f32", "cpu"), open_export(tmp_path / "f32", "cuda")
    half = open_export(tmp_path / "f16", "cuda")
    assert gpu.device.ort_type == "cuda" and half.device.ort_type == "cuda"
    refs = [spoken.text() for spoken, _ in heldout]
    for options in ({}, {"num_beams": 3}):
        expected = [cpu.transcribe(samples, **options) for _, samples in heldout]
        assert [gpu.transcribe(x, **options)["ids"] for _, x in heldout] == [r["ids"] for r in expected]
        halves = [half.transcribe(samples, **options)["text"].strip() for _, samples in heldout]
        wer32 = jiwer.wer(refs, [r["text"].strip() for r in expected])
        wer16 = jiwer.wer(refs, halves)
        print(f"whisper-digits held-out WER {options or 'greedy'}: CPU float32 {wer32:.4f}, CUDA float16 {wer16:.4f}")
        assert wer16 <= wer32 + WHISPER_DROP


if __name__ == "__main__":  # write the held-out recordings for a machine without espeak-ng
    np.savez_compressed(sys.argv[1], **{str(n): x for n, (_, x) in enumerate(spoken_heldout())})
