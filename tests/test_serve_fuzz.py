"""Property-based test of the server's one promise about bad input: any JSON body gets a 200 or a 4xx
JSON error of one line naming the problem, never a 5xx, and the server goes on serving."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tfm_export.serve.app import ACCEPTED  # noqa: E402
from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

from helpers import serving  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,  # the same bodies on every run
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SCALAR = (st.none() | st.booleans() | st.integers(-3, 70) | st.integers() | st.floats() | st.text(max_size=6)
          | st.sampled_from(["never", "true", ""]))
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                          max_size=2), max_leaves=8)
IDS = st.lists(st.lists(st.integers(0, 70) | st.integers(-(1 << 70), 1 << 70), max_size=70), max_size=4)
# Each accepted field, usually with a plausible value so that decoding really runs, sometimes anything.
VALUE = {name: JSON for name in ACCEPTED} | {
    "ids": IDS | JSON,
    "texts": st.lists(st.text(max_size=12), max_size=3) | JSON,
    "max_new_tokens": st.integers(-2, 70) | JSON,
    "num_beams": st.integers(0, 5) | JSON,
    "num_return_sequences": st.integers(0, 5) | JSON,
}
BODIES = st.fixed_dictionaries({}, optional={**VALUE, "unknown": JSON})


@pytest.fixture(scope="module")
def server(static_export):
    settings_ = ServeSettings(str(static_export), engine=EngineConfig(max_batch=4, max_queue=64), max_texts=4)
    with serving(settings_) as (url, engine):
        yield url, engine


@FUZZ
@given(BODIES)
@example({"ids": [[5, 6]], "temperature": float("nan"), "do_sample": True})
@example({"ids": [[5, 1 << 65]]})
@example({"ids": [[5]], "num_beams": 4, "num_return_sequences": 5})
@example({"ids": [[5]], "stream": True, "num_beams": 2, "max_new_tokens": 3})
def test_any_body_gets_an_answer_or_a_4xx_naming_the_problem(server, body):
    url, _ = server
    reply = httpx.post(f"{url}/v1/translate", content=json.dumps(body, allow_nan=True),
                       headers={"content-type": "application/json"}, timeout=120)
    assert reply.status_code < 500, (body, reply.text)
    if reply.status_code >= 400:
        error = reply.json()["error"]
        assert error and "\n" not in error and "Traceback" not in error, (body, error)
    elif body.get("stream") is True:
        last = [line for line in reply.text.splitlines() if line.startswith("event: ")][-1]
        assert last in ("event: done", "event: error"), (body, reply.text[-300:])
    else:
        assert len(reply.json()["translations"]) == len(body.get("ids") or body.get("texts")), body


def test_the_server_still_serves_after_the_fuzz(server, serial):
    url, engine = server
    reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5, 6, 7]], "max_new_tokens": 8})
    assert reply.json()["translations"][0]["ids"] == serial([5, 6, 7], 8)
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok" and engine.active == 0
