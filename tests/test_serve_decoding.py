"""Decoding options through the server: sampling and processor rows join the in-flight batch, beam
search and n-best jobs decode beside it; every answer equals the runner's direct `generate` call of
the same request (tokens equal, scores within 1e-4), and bad options are 422s naming the field."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from helpers import serving  # noqa: E402
from test_serve import stream_events, varied_requests  # noqa: E402

from tfm_export.runtime import RuntimeOptions, open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig, Job  # noqa: E402
from tfm_export.serve.engine import ServeSettings, open_engine  # noqa: E402

# Requests' decoding options: in-flight rows (sampling, processors) and the search lane (beams, n-best).
OPTIONS = [
    {"do_sample": True, "seed": 7, "top_p": 0.9, "temperature": 0.8},
    {"do_sample": True, "seed": 3, "top_k": 5},
    {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_new_tokens": 3, "forced_eos": True},
    {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.6},
    {"num_beams": 2, "early_stopping": True},
    {"do_sample": True, "seed": 11, "num_return_sequences": 2},
    {},
]


@pytest.fixture(scope="module")
def direct(static_export):
    """The direct call a served request must equal: `generate` on the request's sources."""
    model = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=False))
    return lambda sources, steps, options: model.generate(sources, max_new_tokens=steps, **options)


def requests(count: int, seed: int) -> list[tuple[list[list[int]], int, dict]]:
    """(sources, max_new_tokens, options): two sources each, options cycling through OPTIONS."""
    pairs = varied_requests(2 * count, seed)
    return [([pairs[2 * i][0], pairs[2 * i + 1][0]], max(2, pairs[2 * i][1] // 2), OPTIONS[i % len(OPTIONS)])
            for i in range(count)]


def assert_same(served: list[dict], expected) -> None:
    """Served translations (ids, score?, hypotheses?) against generate's hypotheses, source by source."""
    for row, hyps in zip(served, expected):
        assert row["ids"] == hyps[0].ids
        got = row.get("hypotheses", [row])
        assert [h["ids"] for h in got] == [h.ids for h in hyps]
        if "score" in row:
            np.testing.assert_allclose([h["score"] for h in got], [h.score for h in hyps], atol=1e-4)


@pytest.mark.parametrize("batching", ["inflight", "request"])
def test_engines_decode_every_option_like_a_direct_call(static_export, direct, batching):
    engine = open_engine(ServeSettings(str(static_export), batching=batching, engine=EngineConfig(max_batch=4))).start()
    results: dict[tuple[int, int], list] = {}
    work = requests(14, 21)
    for n, (sources, steps, options) in enumerate(work):
        config = engine.model.generation_config(**options)
        engine.submit([Job(ids, steps, lambda kind, v, key=(n, i): kind == "done" and results.setdefault(key, v),
                           config, row=i) for i, ids in enumerate(sources)])
    engine.close(120)
    for n, (sources, steps, options) in enumerate(work):
        expected = direct(sources, steps, options)
        for i, hyps in enumerate(expected):
            got = results[(n, i)]
            if got is None:  # plain greedy: no score computed, ids only through tokens
                assert options == {}
                continue
            assert [h.ids for h in got] == [h.ids for h in hyps], (options, i)
            np.testing.assert_allclose([h.score for h in got], [h.score for h in hyps], atol=1e-4)


def test_served_options_equal_direct_generate(static_export, direct):
    settings = ServeSettings(str(static_export), engine=EngineConfig(max_batch=4, max_queue=64), max_texts=4)
    work = requests(21, 5)
    with serving(settings) as (url, _):
        def post(request):
            sources, steps, options = request
            return httpx.post(f"{url}/v1/translate", json={"ids": sources, "max_new_tokens": steps, **options},
                              timeout=120)

        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(post, work))
        streamed = work[3]  # beams + n-best, streamed: tokens of the best, then the n-best
        with httpx.stream("POST", f"{url}/v1/translate", timeout=120,
                          json={"ids": streamed[0], "max_new_tokens": streamed[1], "stream": True, **streamed[2]}
                          ) as response:
            events = stream_events(response)
    for (sources, steps, options), reply in zip(work, replies):
        assert reply.status_code == 200, reply.text
        assert_same(reply.json()["translations"], direct(sources, steps, options))
    assert streamed[2]["num_return_sequences"] == 2
    done = events[-1][1]["translations"]
    assert_same(done, direct(*streamed))
    assert [e["id"] for kind, e in events if kind == "token" and e["index"] == 0] == done[0]["ids"]


@pytest.mark.parametrize("options, field", [
    ({"num_beams": 0}, "num_beams"),
    ({"top_p": 1.5}, "top_p"),
    ({"temperature": 0}, "temperature"),
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences"),
    ({"num_beams": 2, "do_sample": True}, "do_sample"),
    ({"early_stopping": "sometimes"}, "early_stopping"),
    ({"seed": -1}, "seed"),
    ({"top_k": 1.5}, "top_k"),
])
def test_bad_decoding_options_are_a_422_naming_the_field(static_export, options, field):
    with serving(ServeSettings(str(static_export))) as (url, engine):
        reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5, 6]], **options})
        assert reply.status_code == 422, reply.text
        body = reply.json()
        assert field in body["error"] and (body.get("field") == field or body.get("fields") == [field])
        assert engine.tokens_total == 0
