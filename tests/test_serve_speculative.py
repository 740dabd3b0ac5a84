"""Prompt lookup in the server's rows in flight (runtime.inflight.Speculating): a greedy request that asks
prompt_lookup_num_tokens decodes its row speculatively, each step of the rows one checking call of its own, next
to greedy, beam and sampling groups of the same batch; every answer equals the direct `generate` call (and
plain greedy's ids); without processors it is checked on the graph's argmax (no logits to the host) and has no
score, as a plain greedy row; under processors every row kind (speculating, plain, declined for load) carries the
direct call's score; the source was encoded once (for the rows, not again for its checking
state), the drafts were really checked (fewer calls than ids, counted on /metrics), a batch without such a
request steps exactly as before, and sampling with prompt lookup decodes beside the batch as generate does.
Under load (--speculate-below rows in flight or queued) such requests decode as plain rows, with the same ids."""

from __future__ import annotations

import dataclasses
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import hf_fixtures
from helpers import run_cli_ok, serving
from test_serve_groups import MIXED, outcome

from tfm_export.errors import InputError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.states.growing import GrowingState
from tfm_export.serve.batcher import EngineConfig, InflightBatcher, Job, SearchLane
from tfm_export.serve.engine import ServeSettings, open_engine
from tfm_export.serve.metrics import EngineCollector
from tfm_export.serve.ray_config import settings_from_dict

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

BUNDLED = Path(__file__).resolve().parents[1] / "models" / "num2words-de" / "model.pt"
LOOKUP = {"prompt_lookup_num_tokens": 5}
PROCESSED = {"prompt_lookup_num_tokens": 4, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3}  # ProcessorCheck's
ALWAYS = 10 ** 6  # speculate_below: every prompt-lookup request speculates, whatever the load


@pytest.fixture(scope="module")
def trained_static(tmp_path_factory):
    """family -> its trained fixture exported with its static-cache decoders (the server's rows)."""
    made: dict[str, Path] = {}

    def export(family: str) -> Path:
        if family not in made:
            made[family] = tmp_path_factory.mktemp(f"spec-{family}") / "out"
            run_cli_ok(hf_fixtures.trained_folder(family), "-o", made[family], "--no-validate",
                       "--static-slots", 64)
        return made[family]

    return export


def repeating_jobs(model, count: int, seed: int, results: dict, options: list[dict]) -> list[Job]:
    """Sources that repeat themselves (prompt lookup finds drafts), options cycling through `options`."""
    rng = random.Random(seed)
    jobs = []
    for n in range(count):
        unit = [rng.randrange(4, 60) for _ in range(rng.randrange(2, 5))]
        ids = (unit * 6)[:rng.randrange(6, 20)]
        config = model.generation_config(**options[n % len(options)])
        jobs.append(Job(ids, rng.randrange(8, 30), lambda kind, v, n=n: results.setdefault(n, []).append((kind, v)),
                        config))
    return jobs


def test_speculating_rows_decode_like_direct_calls_among_every_strategy(static_export, monkeypatch):
    lane = []
    monkeypatch.setattr(SearchLane, "submit", lambda self, jobs: lane.extend(jobs))
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=12, max_queue=64,
                                                                              speculate_below=ALWAYS)))
    assert isinstance(engine, InflightBatcher) and engine.checking is not None
    steps = []
    step = engine.rows.step
    engine.rows.step = lambda tokens: steps.append(1) or step(tokens)
    encodes, own = [], []  # sources through the rows' encoder; encoder runs of the checking states' own
    encode, own_encode = engine.rows.encode, engine.checking._encode
    engine.rows.encode = lambda src, *side: encodes.append(src.shape[0]) or encode(src, *side)
    engine.checking._encode = lambda src: own.append(1) or own_encode(src)
    results: dict = {}
    options = [LOOKUP, *MIXED[:3], {"prompt_lookup_num_tokens": 2}, MIXED[3], PROCESSED]
    jobs = repeating_jobs(engine.model, 28, 7, results, options)
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    assert not lane
    assert sum(encodes) == len(jobs) and not own  # every source encoded once, speculating or not
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    emitted = 0
    for n, job in enumerate(jobs):
        tokens, hypotheses = outcome(results[n])
        config = job.config.replace(max_new_tokens=job.max_new_tokens)
        expected = direct.generate([job.ids], config)[0][0]
        assert tokens == expected.ids, (n, job.config)
        if config.prompt_lookup_num_tokens:
            plain = direct.generate([job.ids], config.replace(prompt_lookup_num_tokens=0))[0][0]
            assert tokens == plain.ids
            if config.is_greedy:  # checked on the argmax: no score, as a plain greedy row
                assert hypotheses is None
            else:
                assert [h.ids for h in hypotheses] == [tokens]
                np.testing.assert_allclose([hypotheses[0].score] * 2, [expected.score, plain.score], atol=1e-4)
            emitted += len(tokens) + (len(tokens) < job.max_new_tokens)  # EOS is an emitted id too
    spec = engine.batch.speculation
    assert 0 < spec.accepted <= spec.drafted
    assert spec.calls < emitted  # drafts were checked in the rows: fewer calls than ids


def test_speculating_rows_without_processors_check_on_the_argmax_like_plain_greedy(static_export, monkeypatch):
    """No processors: the check is ArgmaxCheck's (the position logits never cross to the host), the ids are plain
    greedy's and the answer has no score, as a plain greedy row's; a processed request in the same batch still
    reads them (ProcessorCheck)."""
    read = []
    logits = GrowingState.position_logits
    monkeypatch.setattr(GrowingState, "position_logits", lambda self: read.append(1) or logits(self))
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=8, speculate_below=ALWAYS)))
    results: dict = {}
    jobs = repeating_jobs(engine.model, 6, 13, results, [LOOKUP, {"prompt_lookup_num_tokens": 2}])
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    assert engine.batch.speculation.accepted > 0 and not read
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        plain = direct.generate_ids([job.ids], max_new_tokens=job.max_new_tokens)[0]
        assert outcome(results[n]) == (plain, None), n
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=8, speculate_below=ALWAYS)))
    engine.start()
    engine.submit(repeating_jobs(engine.model, 1, 13, {}, [PROCESSED]))
    engine.close(120)
    assert read  # the ids under processors come from the processed logits


def test_a_batch_without_prompt_lookup_never_starts_a_checking_state(static_export):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=8)))
    started = []
    engine.checking.start = lambda *a, **k: started.append(1)
    results: dict = {}
    jobs = repeating_jobs(engine.model, 8, 3, results, [{}, {"num_beams": 2}])
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    assert not started and engine.batch.speculation.calls == 0 and len(results) == 8


def test_sampling_with_prompt_lookup_decodes_beside_the_batch_like_generate(static_export):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=4)))
    job_options = {"do_sample": True, "seed": 4, **LOOKUP}
    results: dict = {}
    jobs = repeating_jobs(engine.model, 2, 5, results, [job_options])
    assert engine.rows_for(jobs[0]) == 0  # the search lane: generate's speculative sampling, its draws
    engine.start()
    engine.submit(jobs)
    engine.close(120)
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        config = job.config.replace(max_new_tokens=job.max_new_tokens)
        assert outcome(results[n])[0] == direct.generate([job.ids], config)[0][0].ids


def answered(results: dict, count: int) -> None:
    """Wait until `count` jobs of `repeating_jobs` have ended (a done or error event each)."""
    deadline = time.monotonic() + 120
    while sum(events[-1][0] != "token" for events in results.values()) < count:
        assert time.monotonic() < deadline, results
        time.sleep(0.01)


def collected(engine, name: str) -> float:
    """A counter's value on /metrics (its collector, read without HTTP)."""
    return next(family.samples[0].value for family in EngineCollector(engine).collect() if family.name == name)


@pytest.mark.parametrize("count, speculating", [(3, True), (4, False)])
def test_under_load_prompt_lookup_requests_decode_as_plain_rows_and_alone_they_speculate(static_export, count,
                                                                                          speculating):
    """speculate_below 4: `count` jobs queued before the loop starts join in one round at a load of `count`; 3
    speculate, 4 decode as plain rows (no checking call, each counted declined), greedy's ids either way, and
    under processors generate's score either way (none without). A job that comes alone afterwards speculates."""
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=8, speculate_below=4)))
    results: dict = {}
    jobs = repeating_jobs(engine.model, count + 1, 11, results, [LOOKUP, PROCESSED])
    engine.submit(jobs[:count])
    engine.start()
    answered(results, count)
    spec = engine.batch.speculation
    assert (spec.calls > 0) == speculating and engine.declined == (0 if speculating else count)
    assert collected(engine, "tfm_export_speculative_declined") == engine.declined
    calls = spec.calls
    engine.submit(jobs[count:])  # alone: a load of 1
    answered(results, count + 1)
    assert spec.calls > calls and engine.declined == (0 if speculating else count)
    engine.close(60)
    direct = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    for n, job in enumerate(jobs):
        plain = direct.generate([job.ids], job.config.replace(max_new_tokens=job.max_new_tokens,
                                                              prompt_lookup_num_tokens=0))[0][0]
        tokens, hypotheses = outcome(results[n])
        assert tokens == plain.ids, n
        if job.config.is_greedy:  # no score, speculating or declined, as a plain greedy row
            assert hypotheses is None, n
        else:  # under processors generate's score, speculating or declined
            np.testing.assert_allclose(hypotheses[0].score, plain.score, atol=1e-4)


def test_speculate_below_zero_never_speculates_and_reaches_the_config(static_export, tmp_path):
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=4, speculate_below=0)))
    results: dict = {}
    engine.start()
    engine.submit(repeating_jobs(engine.model, 1, 2, results, [LOOKUP]))
    engine.close(60)
    assert engine.batch.speculation.calls == 0 and engine.declined == 1 and len(results) == 1
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "serve.yaml"
    run_cli_ok("serve", static_export, "--write-config", path, "--speculate-below", 2)
    settings = settings_from_dict(yaml.safe_load(path.read_text())["applications"][0]["args"])
    assert settings.engine == dataclasses.replace(ServeSettings("x").engine, max_batch=16, speculate_below=2)
    with pytest.raises(InputError, match="speculate_below"):
        EngineConfig(speculate_below=-1)


def served_equal_direct(folder: Path, sources: list[list[int]]) -> None:
    """Concurrent clients, speculating and plain, through /v1/translate: equal direct and greedy ids; under
    processors the score of a direct call and of the same request served without prompt lookup, without them no
    score (as plain greedy answers); the speculation's counters on /metrics."""
    settings = ServeSettings(str(folder), engine=EngineConfig(max_batch=8, max_queue=64, speculate_below=ALWAYS),
                             max_texts=4)
    # num_beams 1 by name: an export's defaults may be beam search (marian's), which does not speculate
    options = [{**LOOKUP, "num_beams": 1}, {"num_beams": 1}, {"num_beams": 2},
               {"do_sample": True, "seed": 3, "num_beams": 1}, {"prompt_lookup_num_tokens": 3, "num_beams": 1},
               {**PROCESSED, "num_beams": 1}]
    work = [([src], 16, options[n % len(options)]) for n, src in enumerate(sources)]
    processed = [(ids, steps, {**opts, "prompt_lookup_num_tokens": 0}) for ids, steps, opts in work
                 if "repetition_penalty" in opts]  # the same requests, not speculating: scored in the rows
    work += processed
    with serving(settings) as (url, engine):
        def post(request):
            ids, steps, opts = request
            return httpx.post(f"{url}/v1/translate", json={"ids": ids, "max_new_tokens": steps, **opts}, timeout=120)

        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(post, work))
        metrics = httpx.get(f"{url}/metrics").text
    direct = open_export(folder, "cpu", RuntimeOptions(cuda_graph=False))
    for (ids, steps, opts), reply in zip(work, replies):
        assert reply.status_code == 200, reply.text
        got, expected = reply.json()["translations"][0], direct.generate(ids, max_new_tokens=steps, **opts)[0][0]
        assert got["ids"] == expected.ids, opts
        if opts.get("prompt_lookup_num_tokens"):
            plain = direct.generate(ids, max_new_tokens=steps, **{**opts, "prompt_lookup_num_tokens": 0})[0][0]
            assert got["ids"] == plain.ids
            if direct.generation_config(**opts).is_greedy:  # checked on the argmax: no score, as plain greedy
                assert "score" not in got, opts
            else:  # under processors (the request's, or the export's: marian's forced EOS): generate's score
                np.testing.assert_allclose([got["score"]] * 2, [expected.score, plain.score], atol=1e-4)
    scores = [reply.json()["translations"][0]["score"] for (_, _, opts), reply in zip(work, replies)
              if "repetition_penalty" in opts]  # speculating ones, then the same served plainly
    assert processed and scores[:len(processed)] == pytest.approx(scores[len(processed):], abs=1e-4)
    spec = engine.batch.speculation
    assert spec.calls > 0 and f"tfm_export_speculative_drafted_total {float(spec.drafted)}" in metrics
    assert f"tfm_export_speculative_accepted_total {float(spec.accepted)}" in metrics


@pytest.mark.slow  # exports the fixture with its static decoders (~1 min on 2 cores)
@pytest.mark.parametrize("family", ["t5", "marian"])
def test_trained_fixtures_served_with_prompt_lookup_equal_direct_calls(trained_static, family):
    model = open_export(trained_static(family), "cpu")
    sources = [model.encode(e.source) for e in hf_fixtures.task_examples(family)][:6]
    served_equal_direct(trained_static(family), sources)


@pytest.mark.slow  # exports the bundled model with its static decoders
def test_the_bundled_model_served_with_prompt_lookup(tmp_path):
    if not BUNDLED.exists():
        pytest.skip("the bundled model is not trained yet")
    out = tmp_path / "static"
    export_model(load_checkpoint(BUNDLED), out, ExportOptions(static_cache=True, validate=False))
    model = open_export(out, "cpu")
    texts = ["12", "777777", "3456", "121212", "99", "1000000", "808080", "5"]
    served_equal_direct(out, [model.encode(t) for t in texts])


@pytest.mark.parametrize("options, field", [({"num_assistant_tokens": 4}, "num_assistant_tokens"),
                                            ({"assistant": "draft_onnx"}, "assistant"),
                                            ({"prompt_lookup_num_tokens": -1}, "prompt_lookup_num_tokens"),
                                            ({"prompt_lookup_num_tokens": 65}, "prompt_lookup_num_tokens")])
def test_a_draft_export_and_bad_lookups_are_a_422_naming_the_field(static_export, options, field):
    with serving(ServeSettings(str(static_export))) as (url, engine):
        reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5, 6]], **options})
        assert reply.status_code == 422, reply.text
        assert field in reply.json()["error"] and engine.tokens_total == 0
        schema = httpx.get(f"{url}/openapi.json").json()
    assert "prompt_lookup_num_tokens" in str(schema) and "num_assistant_tokens" not in str(schema)
