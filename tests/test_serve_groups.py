"""Beam search, n-best and several samples inside the in-flight batch: a job takes a group of rows
(one per beam or sample), every group shares one decoder step with the greedy rows, a beam group's
cache rows follow its beams, and every answer equals a direct `generate` call of the same request."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.serve.batcher import EngineConfig, InflightBatcher, Job, SearchLane
from tfm_export.serve.engine import ServeSettings, open_engine

MIXED = [{}, {"num_beams": 4}, {"num_beams": 3, "num_return_sequences": 3, "length_penalty": 0.6},
         {"do_sample": True, "seed": 5, "top_k": 8}, {"num_beams": 2, "early_stopping": True},
         {"do_sample": True, "seed": 9, "num_return_sequences": 2}, {"num_beams": 4, "min_new_tokens": 3}]


def mixed_jobs(model, count: int, seed: int, results: dict) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for n in range(count):
        ids = [rng.randrange(4, 60) for _ in range(rng.randrange(1, 20))]
        steps, options = rng.randrange(2, 30), MIXED[n % len(MIXED)]
        config = model.generation_config(**options)
        emit = lambda kind, v, n=n: results.setdefault(n, []).append((kind, v))  # noqa: E731
        jobs.append(Job(ids, steps, emit, config))
    return jobs


def outcome(events: list) -> tuple[list[int], list | None]:
    tokens = [v for kind, v in events if kind == "token"]
    (kind, hypotheses), = [e for e in events if e[0] != "token"]
    assert kind == "done"
    return tokens, hypotheses


def test_every_strategy_decodes_in_the_batch_like_a_direct_call(static_export, monkeypatch):
    lane = []
    monkeypatch.setattr(SearchLane, "submit", lambda self, jobs: lane.extend(jobs))
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=12, max_queue=64)))
    assert isinstance(engine, InflightBatcher)
    steps, widest = [], [0]
    step = engine.rows.step

    def counted(tokens):
        steps.append(1)
        widest[0] = max(widest[0], engine.active)
        return step(tokens)

    engine.rows.step = counted
    results: dict = {}
    jobs = mixed_jobs(engine.model, 28, 3, results)
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    assert not lane  # no job went beside the batch
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        tokens, hypotheses = outcome(results[n])
        expected = direct.generate([job.ids], job.config.replace(max_new_tokens=job.max_new_tokens))[0]
        assert tokens == expected[0].ids, (n, job.config)
        if hypotheses is not None:  # greedy jobs compute no score
            assert [h.ids for h in hypotheses] == [h.ids for h in expected]
            np.testing.assert_allclose([h.score for h in hypotheses], [h.score for h in expected], atol=1e-4)
    assert widest[0] > 4  # groups of several rows ran side by side
    assert len(steps) < sum(job.max_new_tokens for job in jobs) / 3  # they shared decoder steps


def test_beam_groups_pick_on_the_device_unless_a_processor_needs_whole_rows(static_export):
    """Beam groups share head runs (runtime.states.head over their rows, one run per bias): the logits reach
    the host only for a group whose processors read whole rows, and every answer equals a direct call."""
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=16, max_queue=64)))
    runs, host = [], []
    top, logits = engine.rows.top, engine.rows.logits
    engine.rows.top = lambda *a, rows: runs.append(len(rows)) or top(*a, rows=rows)
    engine.rows.logits = lambda: host.append(1) or logits()
    model, results = engine.model, {}
    options = [{"num_beams": 4}, {"num_beams": 2, "length_penalty": 0.6}, {"num_beams": 4, "min_new_tokens": 4},
               {"num_beams": 3, "num_return_sequences": 2, "no_repeat_ngram_size": 2}]
    rng = random.Random(4)
    jobs = [Job([rng.randrange(4, 60) for _ in range(rng.randrange(1, 12))], rng.randrange(2, 16),
                lambda kind, v, n=n: results.setdefault(n, []).append((kind, v)),
                model.generation_config(**options[n % len(options)])) for n in range(16)]
    engine.start()
    engine.submit(jobs[:12])
    engine.close(120)
    assert runs and max(runs) > 4  # groups of different widths and settings shared runs
    only_head = [n for n in range(12) if "no_repeat_ngram_size" not in options[n % 4]]
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs[:12]):
        expected = direct.generate([job.ids], job.config.replace(max_new_tokens=job.max_new_tokens))[0]
        tokens, hypotheses = outcome(results[n])
        assert tokens == expected[0].ids and [h.ids for h in hypotheses] == [h.ids for h in expected], n
        np.testing.assert_allclose([h.score for h in hypotheses], [h.score for h in expected], atol=1e-9)
    assert host  # the n-gram groups took their logits to the host
    # Without a whole-row processor, no step sends the logits to the host.
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=16, max_queue=64)))
    logits, host, done = engine.rows.logits, [], []
    engine.rows.logits = lambda: host.append(1) or logits()
    engine.start()
    engine.submit([Job(jobs[n].ids, jobs[n].max_new_tokens, lambda kind, v: kind == "done" and done.append(v),
                       jobs[n].config) for n in only_head])
    engine.close(120)
    assert len(done) == len(only_head) and not host


def test_device_reorder_gathers_into_the_other_cache_set(static_export, monkeypatch):
    """RowBatch over decoder_static as on CUDA, whose caches are not host arrays: a beam step gathers
    every row into the other cache set on the device and flips the parity. On CPU the OrtValues wrap
    host arrays, so the same path runs here with the host view switched off; answers equal direct calls."""
    from tfm_export.runtime.states import host_rows as rows_module
    from tfm_export.runtime.states.rows import RowBatch

    made = []

    def device_rows(cache, batch, src_len):
        rows = RowBatch(cache, batch, src_len)
        rows.slots.caches_host = None  # as on CUDA: no host arrays behind the caches
        made.append(rows)
        return rows

    monkeypatch.setattr(rows_module, "open_rows", device_rows)
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=12, max_queue=64)))
    gathers = []
    gather = made[0]._device_gather
    made[0]._device_gather = lambda values, index, out=None: gathers.append(out is not None) or gather(values, index, out)
    results: dict = {}
    jobs = mixed_jobs(engine.model, 28, 11, results)
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    assert gathers and all(gathers)  # reorders ran, each into the bound buffers of the other set
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        expected = direct.generate([job.ids], job.config.replace(max_new_tokens=job.max_new_tokens))[0]
        tokens, hypotheses = outcome(results[n])
        assert tokens == expected[0].ids, (n, job.config)
        if hypotheses is not None:
            assert [h.ids for h in hypotheses] == [h.ids for h in expected]
            np.testing.assert_allclose([h.score for h in hypotheses], [h.score for h in expected], atol=1e-4)


def test_graphs_are_captured_on_the_decode_thread_before_the_helpers_start(static_export):
    """ORT keeps CUDA graphs per thread, and a capture fails while another thread uses the GPU: the
    decode thread captures first, and the joiner and the search lane start after it."""
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=4)))
    seen = []
    engine.rows.capture = lambda: seen.append((threading.current_thread().name, engine.joiner._thread.is_alive(),
                                               engine.lane._thread.is_alive()))
    engine.start()
    assert engine.joiner._thread.is_alive() and engine.lane._thread.is_alive()
    engine.close(10)
    assert seen == [("tfm-export-inflight", False, False)]


def test_jobs_that_do_not_fit_the_rows_go_to_the_search_lane(static_export):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=4)))
    model, slots = engine.model, engine.slots
    assert engine.rows_for(Job([5], 8, print, model.generation_config(num_beams=4))) == 4
    assert engine.rows_for(Job([5], 8, print, model.generation_config(num_beams=5))) == 0  # wider than the batch
    assert engine.rows_for(Job([5], slots + 1, print, model.generation_config())) == 0  # longer than the slots
    assert engine.rows_for(Job([5], 8, print, model.generation_config(do_sample=True, num_return_sequences=3))) == 3


def test_a_beam_group_waits_for_rows_and_later_narrower_jobs_do_not_overtake_it(static_export):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=4)))
    model, order = engine.model, []
    gate = threading.Event()

    def emit(name):
        def record(kind, value):
            if kind == "token" and name == "long" and not gate.is_set():
                gate.wait(10)  # hold the long job in its row until the others are queued
            if kind == "done":
                order.append(name)
        return record

    engine.start()
    engine.submit([Job([7, 8, 9], 40, emit("long"), model.generation_config())])
    beam = Job([5, 6], 6, emit("beam"), model.generation_config(num_beams=4))
    after = Job([11], 3, emit("after"), model.generation_config())
    engine.submit([beam, after])
    gate.set()
    engine.close(60)
    # The beam job needs all four rows: the greedy job queued after it waits for it (first come, first served).
    assert order.index("beam") < order.index("after")


def test_bundled_model_beams_in_the_batch_equal_direct_calls(bundled_export, tmp_path):
    """The trained bundled model (its beams really differ from greedy), exported with a static cache."""
    from tfm_export.export.exporter import ExportOptions, export_model
    from tfm_export.model.checkpoint import load_checkpoint
    from conftest import BUNDLED

    out = tmp_path / "static"
    export_model(load_checkpoint(BUNDLED / "model.pt"), out, ExportOptions(static_cache=True, static_slots=40, validate=False))
    engine = open_engine(ServeSettings(str(out), engine=EngineConfig(max_batch=16))).start()
    model = engine.model
    texts = [str(n) for n in random.Random(1).sample(range(100, 99999), 24)]
    results: dict = {}
    configs = [model.generation_config(num_beams=4, num_return_sequences=2), model.generation_config()]
    jobs = [Job(model.tokenizer.encode(t), 40, lambda kind, v, n=n: results.setdefault(n, []).append((kind, v)),
                configs[n % 2]) for n, t in enumerate(texts)]
    engine.submit(jobs)
    engine.close(120)
    direct = open_export(out, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        expected = direct.generate([job.ids], job.config.replace(max_new_tokens=40))[0]
        assert outcome(results[n])[0] == expected[0].ids


@pytest.mark.slow
def test_mixed_requests_from_8_clients_equal_direct_calls(static_export):
    """8 clients x 50 requests, greedy, beam and sampling mixed, over HTTP."""
    httpx = pytest.importorskip("httpx")
    from helpers import serving

    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    rng = random.Random(8)
    work = [([[rng.randrange(4, 60) for _ in range(rng.randrange(1, 16))]], rng.randrange(2, 20), MIXED[n % len(MIXED)])
            for n in range(400)]
    settings = ServeSettings(str(static_export), engine=EngineConfig(max_batch=16, max_queue=256))
    with serving(settings) as (url, _):
        with httpx.Client(timeout=120) as client:
            def post(item):
                sources, steps, options = item
                return client.post(f"{url}/v1/translate", json={"ids": sources, "max_new_tokens": steps, **options})

            with ThreadPoolExecutor(8) as pool:
                replies = list(pool.map(post, work))
    for (sources, steps, options), reply in zip(work, replies):
        assert reply.status_code == 200, reply.text
        row, = reply.json()["translations"]
        expected = direct.generate(sources, max_new_tokens=steps, **options)[0]
        assert row["ids"] == expected[0].ids, options
        assert [h["ids"] for h in row.get("hypotheses", [row])] == [h.ids for h in expected][:len(row.get("hypotheses", [row]))]
