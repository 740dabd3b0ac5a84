"""`tfm-export serve` on module exports (#42: a user's own architecture, tfm_export/serve/module_exports.py).

Seed 004 (test_any_module's briefly trained export: decoder_nocache.onnx, no tokenizer) is served with
request-level batching: its greedy, beam (n-best, scores), sampled and streamed answers to token ids
equal `open_export(OUT)`'s direct calls, also when requests decode together. Text without a tokenizer
is a 4xx naming the problem (POST /v1/translate and LibreTranslate's /translate), as are bad ids; the
schema takes ids only. In-flight batching and an encoder-only export (seed 003) are refused at startup
in one line, never a traceback; the CLI says why it serves request-level.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

import seed_models as sm  # noqa: E402
from helpers import run_cli, server_process, serving  # noqa: E402
from seed_models import held_out  # noqa: E402
from test_any_module import BEAMS, STEPS  # noqa: E402
from test_serve import stream_events  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.engine import ServeSettings, open_engine  # noqa: E402

SAMPLING = {"do_sample": True, "seed": 3, "top_k": 5, "num_return_sequences": 2}


@pytest.fixture(scope="module")
def export_004(api_004):
    """conftest's seed 004, trained briefly and exported through export_module (validated)."""
    return api_004[0]


@pytest.fixture(scope="module")
def direct(export_004):
    return open_export(export_004, device="cpu")


@pytest.fixture(scope="module")
def server(export_004):
    settings = ServeSettings(str(export_004), engine=EngineConfig(max_batch=8, window_ms=20), max_texts=8)
    with serving(settings) as (url, engine):
        yield url, engine


@pytest.fixture(scope="module")
def encoder_only(encoder_only_003):
    return encoder_only_003


def translate(url: str, **body) -> dict:
    reply = httpx.post(f"{url}/v1/translate", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["translations"]


def pairs(rows) -> list[list[tuple[list[int], float]]]:
    """Served n-best entries or direct Hypothesis lists as (ids, score) pairs."""
    return [[(h["ids"], h["score"]) if isinstance(h, dict) else (h.ids, h.score) for h in row] for row in rows]


def test_served_greedy_and_beam_equal_direct(server, direct):
    url, engine = server
    assert engine.name == "request" and httpx.get(f"{url}/healthz").json()["batching"] == "request"
    sources = held_out()
    greedy = direct.generate_ids(sources, max_new_tokens=STEPS)
    assert [t["ids"] for t in translate(url, ids=sources, max_new_tokens=STEPS)] == greedy
    assert all("text" not in t for t in translate(url, ids=sources[:1]))  # no tokenizer: ids only
    beam = translate(url, ids=sources, max_new_tokens=STEPS, num_beams=BEAMS, num_return_sequences=2)
    want = direct.generate(sources, max_new_tokens=STEPS, num_beams=BEAMS, num_return_sequences=2)
    got = [t["hypotheses"] for t in beam]
    assert [[ids for ids, _ in row] for row in pairs(got)] == [[ids for ids, _ in row] for row in pairs(want)]
    assert all(abs(a - b) <= 1e-6 for g, w in zip(pairs(got), pairs(want)) for (_, a), (_, b) in zip(g, w))
    assert [t["ids"] for t in beam] == direct.generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS)
    # the default budget (the export's max_len) too
    assert [t["ids"] for t in translate(url, ids=sources[:2])] == direct.generate_ids(sources[:2])


def test_sampled_and_streamed_equal_direct(server, direct):
    url, _ = server
    sources = held_out()[:3]
    sampled = translate(url, ids=sources, max_new_tokens=STEPS, **SAMPLING)
    assert pairs([t["hypotheses"] for t in sampled]) == pairs(direct.generate(sources, max_new_tokens=STEPS, **SAMPLING))
    with httpx.stream("POST", f"{url}/v1/translate", json={"ids": sources[:1], "max_new_tokens": STEPS, "stream": True},
                      timeout=60) as response:
        events = stream_events(response)
    want = direct.generate_ids(sources[:1], max_new_tokens=STEPS)[0]
    assert [e["id"] for kind, e in events if kind == "token"] == want
    assert events[-1] == ("done", {"translations": [{"ids": want}]})


def test_requests_decoded_together_equal_direct(server, direct):
    """Concurrent one-source requests within the window are one generate_ids batch: still each one's ids."""
    url, _ = server
    sources = held_out(7, 8)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda ids: translate(url, ids=[ids], max_new_tokens=STEPS)[0]["ids"], sources))
    assert got == [direct.generate_ids([ids], max_new_tokens=STEPS)[0] for ids in sources]


@pytest.mark.parametrize("path, body, status, named", [
    ("/v1/translate", {"texts": ["3 4 5"]}, 422, 'no tokenizer, so it takes no texts; send token ids instead: "ids"'),
    ("/v1/translate", {"ids": [[3, 99]]}, 422, "out of range"),
    ("/v1/translate", {"ids": [[3] * 40]}, 413, "max_len"),
    ("/v1/translate", {"ids": [[3]], "num_beams": 7}, 422, "num_beams"),
    ("/v1/translate", {"ids": [[3]], "source_lang": "en"}, 422, "no tokenizer, hence no language codes"),
    ("/v1/translate", {"ids": [[3]], "max_new_tokens": 0}, 422, "max_new_tokens"),
    ("/translate", {"q": "3 4", "source": "auto", "target": "de"}, 400, "no tokenizer"),
])
def test_bad_requests_get_a_json_error_naming_the_problem(server, path, body, status, named):
    reply = httpx.post(f"{server[0]}{path}", json=body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert named in error and "\n" not in error and "Traceback" not in error, error


def test_the_schema_takes_ids_only(server):
    props = httpx.get(f"{server[0]}/openapi.json").json()["components"]["schemas"]["TranslateRequest"]["properties"]
    assert props["texts"]["anyOf"] == [{"type": "null"}]
    source = props["ids"]["anyOf"][0]["items"]
    assert source["items"]["maximum"] == sm.VOCAB - 1 and source["maxItems"] == sm.MAX_LEN


def test_refusals_at_startup_are_one_line(export_004, encoder_only):
    cases = [([str(encoder_only)], f"{encoder_only} is an encoder-only export (no decoder): the server decodes"),
             ([str(encoder_only), "--batching", "single"], "`tfm-export run"),
             ([str(export_004), "--batching", "inflight"], "has a decoder without a cache (decoder_nocache.onnx, a "
                                                           "module export): in-flight batching needs the cache rows "
                                                           "of decoder_static.onnx; serve it with --batching auto")]
    for args, message in cases:
        result = run_cli("serve", *args, "--port", "1")  # refused before binding
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    with pytest.raises(InputError, match="encoder-only export"):
        open_engine(ServeSettings(str(encoder_only)))
    with pytest.raises(InputError, match=r'serve it with options\["batching"\] auto or request'):
        open_engine(ServeSettings(str(export_004), batching="inflight"))


def test_the_cli_serves_a_module_export(export_004, direct):
    """`tfm-export serve OUT` (a subprocess): says why it batches per request, and answers like direct."""
    source = held_out()[0]
    with server_process("serve", export_004, "--threads", "1") as live:
        reply = httpx.post(f"{live.url}/v1/translate", json={"ids": [source], "num_beams": BEAMS}, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["translations"][0]["ids"] == direct.generate_ids([source], num_beams=BEAMS)[0]
        live.proc.terminate()
        live.proc.wait(30)
        stderr = live.proc.stderr.read()
    assert "has a decoder without a cache (decoder_nocache.onnx): serving with request-level batching" in stderr
    assert "--static-slots" not in stderr  # not the native export's advice
