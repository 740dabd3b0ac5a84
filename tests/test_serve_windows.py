"""The server's in-flight Whisper windows (serve.windows) without HTTP: recordings transcribed on threads of
their own, their windows sharing the decoder's steps, decode as direct `transcribe` calls on the growing cache
(greedy and beam search, detected and given languages, prompts, timestamps, long form); windows that cannot
join the rows decode alone; a recording whose client went away stops and frees its rows; a failing decode
loop answers every window with the error."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from test_serve_audio import tones
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.serve.jobs import Cancelled, Closed, DecodeFailed, EngineConfig
from tfm_export.serve.windows import WindowBatcher

pytestmark = pytest.mark.slow

CASES = [  # seconds of audio, transcribe's options (4 s windows: 10 s is three)
    (1.5, {}), (3.5, {"timestamps": True}), (10.0, {"language": "de"}), (7.0, {"num_beams": 2, "timestamps": True}),
    (2.0, {"prompt": "the quick brown fox", "language": "fr"}), (12.0, {"num_beams": 3}), (5.0, {"task": "translate"}),
]
MEASURES = ("avg_logprob", "compression_ratio", "no_speech_prob")  # the rows' graph rounds its logits otherwise


@pytest.fixture(scope="module")
def models(whisper_export):
    """The export opened as the server opens it (its static decoder's rows), and as a direct call does."""
    served = open_export(whisper_export, "cpu", RuntimeOptions(cuda_graph=True, static_search=False))
    return served, open_export(whisper_export, "cpu")


@pytest.fixture
def batcher(models):
    engine = WindowBatcher(models[0], EngineConfig(max_batch=6)).start()
    yield engine
    engine.close(30)


def assert_same(got, want):
    """Equal ids, text, language and segments; each segment's measures within 1e-5."""
    assert {k: v for k, v in got.items() if k != "segments"} == {k: v for k, v in want.items() if k != "segments"}
    assert [{k: v for k, v in s.items() if k not in MEASURES} for s in got["segments"]] == \
        [{k: v for k, v in s.items() if k not in MEASURES} for s in want["segments"]]
    for name in MEASURES:
        assert np.allclose([s[name] for s in got["segments"]], [s[name] for s in want["segments"]], atol=1e-5), name


def test_windows_of_concurrent_recordings_decode_as_direct_calls(models, batcher):
    served, direct = models
    audio = [tones(seconds, seed)[:, 0] for seed, (seconds, _) in enumerate(CASES)]
    want = [direct.transcribe(a, **options) for a, (_, options) in zip(audio, CASES)]
    got: list = [None] * len(CASES)
    shared = []  # the rows in use at each step
    step = batcher.batch.step
    batcher.batch.step = lambda ended: (shared.append(batcher.active), step(ended))

    def transcribe(n: int) -> None:
        got[n] = served.transcribe(audio[n], runner=batcher.runner(), **CASES[n][1])

    threads = [threading.Thread(target=transcribe, args=(n,)) for n in range(len(CASES))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for g, w in zip(got, want):
        assert_same(g, w)
    assert max(shared) > 3  # windows of several recordings (and beams) shared steps
    assert batcher.active == 0 and len(batcher.batch.free_rows()) == 6


def test_a_window_that_does_not_fit_the_rows_decodes_alone(models, batcher, caplog):
    """Fewer slots than a window's prompt and budget (an export made with few --static-slots), or more beams
    than rows: decoded on the worker's thread, with the same result; the rows never step (the language is
    given: its detection's one step would fit)."""
    served, direct = models
    audio = tones(7.0, 3)[:, 0]
    batcher.slots = 8
    stepped = []
    step = batcher.batch.step
    batcher.batch.step = lambda ended: (stepped.append(1), step(ended))
    options = {"language": "es", "timestamps": True}
    assert_same(served.transcribe(audio, runner=batcher.runner(), **options), direct.transcribe(audio, **options))
    batcher.slots, options["num_beams"] = 64, 8
    assert_same(served.transcribe(audio, runner=batcher.runner(), **options), direct.transcribe(audio, **options))
    assert not stepped
    assert "decode alone (re-export with --static-slots 64" in caplog.text  # said once, for the server's log


def test_a_recording_whose_client_went_away_stops_and_frees_its_rows(models, batcher):
    served, _ = models
    gone = threading.Event()
    step = batcher.batch.step

    def step_then_leave(ended):  # the client leaves while its first window decodes
        step(ended)
        gone.set()

    batcher.batch.step = step_then_leave
    with pytest.raises(Cancelled):
        served.transcribe(tones(10.0, 5)[:, 0], runner=batcher.runner(gone.is_set))
    batcher.batch.step = step
    assert batcher.active == 0 and len(batcher.batch.free_rows()) == 6
    assert served.transcribe(tones(1.5, 0)[:, 0], runner=batcher.runner())["ids"]  # still serving


def test_a_failing_decode_loop_answers_every_window(models, batcher):
    served, _ = models

    def broken(ended):
        raise RuntimeError("an ORT failure")

    batcher.batch.step = broken
    with pytest.raises(DecodeFailed, match="an ORT failure"):
        served.transcribe(tones(3.0, 1)[:, 0], language="en", runner=batcher.runner())
    with pytest.raises(Closed):  # the engine takes no more windows: the server answers 503 from now on
        served.transcribe(tones(3.0, 1)[:, 0], language="en", runner=batcher.runner())
