"""serve.joiner: the in-flight engine encodes joining sources on a second thread. Tokens stay those of
serial decoding; a source that fails to encode is answered alone; a job cancelled while it waits
encoded never decodes; the engine stops only when nothing is held. Engine-level (no HTTP)."""

from __future__ import annotations

import threading
import time

from tfm_export.runtime import open_export
from tfm_export.serve.batcher import EngineConfig, Job
from tfm_export.serve.engine import ServeSettings, open_engine

SOURCES = [[5, 9, 13, 40], [7], [3, 3, 3, 3, 3, 3, 3, 3, 3, 30], [11, 12], [50] * 30, [6, 6, 8]]


class Recorder:
    """Each job's tokens and its final event."""

    def __init__(self):
        self.tokens: dict[int, list[int]] = {}
        self.ends: dict[int, tuple[str, object]] = {}

    def job(self, i: int, ids: list[int], steps: int) -> Job:
        def emit(kind, value):
            if kind == "token":
                self.tokens.setdefault(i, []).append(value)
            else:
                self.ends[i] = (kind, value)
        return Job(ids, steps, emit)


def test_jobs_encoded_ahead_on_the_joiner_thread_decode_like_serial(static_export, serial):
    """Free rows take jobs in the decode loop; while both rows are busy the joiner encodes the next ones."""
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=2)))
    threads: list[str] = []
    encode = engine.rows.encode
    engine.rows.encode = lambda src, *a: (threads.append(threading.current_thread().name), encode(src, *a))[1]
    record = Recorder()
    engine.start()
    engine.submit([record.job(i, ids, 12) for i, ids in enumerate(SOURCES * 2)])
    engine.close(30)
    assert threads[0] == "tfm-export-inflight" and "tfm-export-joiner" in threads
    assert [record.tokens.get(i, []) for i in range(len(SOURCES) * 2)] == [serial(ids, 12) for ids in SOURCES * 2]
    assert engine.held == 0 and engine.active == 0


def test_a_source_that_fails_to_encode_on_the_joiner_is_answered_alone(static_export, serial):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=1)))
    encode, failed = engine.joiner._encode, []

    def broken(src):
        if not failed:  # the first source the joiner encodes
            failed.append(src[0].tolist())
            raise RuntimeError("no memory left")
        return encode(src)

    engine.joiner._encode = broken
    step = engine.rows.step  # slower steps: the joiner encodes the next job while the only row is busy, also
    engine.rows.step = lambda *a: (time.sleep(0.005), step(*a))[1]  # on a loaded machine (it once did none)
    record = Recorder()
    engine.start()
    engine.submit([record.job(i, ids, 8) for i, ids in enumerate(SOURCES)])
    engine.close(30)
    bad = next(i for i, ids in enumerate(SOURCES) if ids == failed[0])
    assert record.ends[bad] == ("error", "encoding failed: RuntimeError: no memory left") and bad not in record.tokens
    for i, ids in enumerate(SOURCES):
        if i != bad:
            assert record.ends[i][0] == "done" and record.tokens.get(i, []) == serial(ids, 8)


def test_a_job_cancelled_while_it_waits_encoded_never_decodes(static_export, serial):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=1)))
    step = engine.rows.step
    engine.rows.step = lambda *a: (time.sleep(0.005), step(*a))[1]  # the long row keeps the only row busy
    long_ids = next(ids for ids in ([n, n + 1, 40] for n in range(4, 60)) if len(serial(ids, 64)) == 64)  # no EOS
    record = Recorder()
    long_job, waiting, after = record.job(0, long_ids, 64), record.job(1, SOURCES[0], 8), record.job(2, SOURCES[1], 8)
    engine.start()
    engine.submit([long_job, waiting, after])
    deadline = time.time() + 10
    while (waiting not in engine.joiner.waiting() or 0 not in record.tokens) and time.time() < deadline:
        time.sleep(0.001)
    assert waiting in engine.joiner.waiting() and 0 in record.tokens and 0 not in record.ends  # encoded ahead
    waiting.cancel()
    engine.close(30)
    assert 1 not in record.tokens and 1 not in record.ends  # cancelled: its client is gone, nothing is sent
    assert record.tokens[2] == serial(SOURCES[1], 8) and record.tokens[0] == serial(long_ids, 64)
    assert engine.held == 0


def test_beam_jobs_taken_by_the_joiner_go_to_the_search_lane(static_export):
    from tfm_export.runtime.options.generation import GenerationConfig

    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=2)))
    model = open_export(static_export, "cpu")
    beam = GenerationConfig(num_beams=3, num_return_sequences=2, max_new_tokens=8)
    record = Recorder()
    jobs = [record.job(i, ids, 8) for i, ids in enumerate(SOURCES[:3])]
    jobs = [Job(job.ids, 8, job.emit, beam) for job in jobs]
    engine.start()
    engine.submit(jobs)
    engine.close(30)
    for i, ids in enumerate(SOURCES[:3]):
        kind, hypotheses = record.ends[i]
        assert kind == "done" and [h.ids for h in hypotheses] == [h.ids for h in model.generate([ids], beam)[0]]
