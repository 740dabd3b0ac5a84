"""`python -m benchmarks speech-batched` (benchmarks/speech_batched.py): its recording is what it says, and its two
sides, ours with VAD + batching and faster-whisper's BatchedInferencePipeline as the scenario sets it up (the
fixture's window, the multilingual prompt, the folder's suppress_tokens), both transcribe the held-out speech
exactly. Skipped without espeak-ng or faster-whisper (a benchmark-only install: the scenario's docstring)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")

FIXTURE = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
BATCHED_VAD = {"max_speech_duration_s": 4.0, "min_silence_duration_ms": 160}  # the batched pipeline's


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    from benchmarks.speech_batched import PAUSES, RATE, recording

    work = tmp_path_factory.mktemp("speech-batched")
    samples, reference = recording(FIXTURE, 40.0, 3, work)
    assert samples.dtype == np.float32 and len(samples) == 40 * RATE
    assert len(reference.split()) >= 40 // (PAUSES[1] + 3)  # an utterance (2-5 digits) at least every 15 s
    again, same = recording(FIXTURE, 40.0, 3, work)  # the cached wav and words
    assert same == reference and np.array_equal(again, samples)
    return samples, reference, work


def test_ours_with_vad_and_batching_transcribes_the_recording_exactly(spoken, digits_export):
    from tfm_export.bench.whisper import wer
    from benchmarks.speech_batched import Ours
    from tfm_export.runtime import RuntimeOptions, open_export

    samples, reference, _ = spoken
    model = open_export(digits_export, "cpu", RuntimeOptions(intra_op_threads=2))
    side = Ours(model, 8, BATCHED_VAD)
    assert wer(reference, side(samples)) == 0.0
    assert len(side.chunks(samples, 4.0)) >= 2


def test_faster_whisper_batched_as_the_scenario_sets_it_up_transcribes_it_exactly(spoken):
    pytest.importorskip("faster_whisper")
    from faster_whisper import WhisperModel

    from tfm_export.bench.whisper import converted, wer
    from benchmarks.speech_batched import Faster, Multilingual

    samples, reference, work = spoken
    model = WhisperModel(str(converted(FIXTURE, work / "ct2", None)), device="cpu", compute_type="float32",
                         cpu_threads=2)
    assert not model.model.is_multilingual  # CTranslate2 judges by the vocabulary's size (532 ids here)
    model.model = Multilingual(model.model)
    suppress = [329]  # the folder's generation_config suppress_tokens
    side = Faster(model, 8, 64, suppress)
    assert wer(reference, side(samples)) == 0.0
    assert suppress == [329]  # faster-whisper extends the list it is given: the side passes a copy
    assert side.pipeline.model.model.is_multilingual


def test_wer_only_reads_seed_ranges_and_bounds_the_paired_difference():
    from benchmarks.speech_batched import bootstrap_interval, errors, seed_range

    assert seed_range("0-3,7") == [0, 1, 2, 3, 7] and seed_range("5") == [5]
    assert errors("eight one two", "one eight two") == (2, 3)
    ours = np.array([[2, 260], [0, 280], [0, 300]], np.float64)
    assert bootstrap_interval(ours, ours) == [0.0, 0.0]
    low, high = bootstrap_interval(ours + [[4, 0], [3, 0], [5, 0]], ours)  # worse on every recording
    assert 0 < low <= 12 / 840 <= high
