"""`tfm-export serve`: in-flight batching gives the tokens of serial decoding; every limit and error is
answered as documented; SIGTERM finishes what is in flight. Servers run on free loopback ports."""

from __future__ import annotations

import json
import random
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from helpers import free_port, run_cli, run_cli_ok, server_process, serving  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.export.exporter import ExportOptions, export_model  # noqa: E402
from tfm_export.model.checkpoint import load_checkpoint  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig, Job  # noqa: E402
from tfm_export.serve.engine import ServeSettings, check_bind, open_engine  # noqa: E402
from tfm_export.serve.guard import body_limit  # noqa: E402
from tfm_export.serve.server import run_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "models" / "num2words-de" / "model.pt"


def varied_requests(count: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(4, 60) for _ in range(rng.randrange(1, 40))], rng.randrange(1, 65))
            for _ in range(count)]


@pytest.fixture(scope="module")
def server(static_export):
    settings = ServeSettings(str(static_export), engine=EngineConfig(max_batch=8, max_queue=256), max_texts=4)
    with serving(settings) as (url, engine):
        yield url, engine, static_export


def test_concurrent_clients_get_exactly_the_serial_tokens(server, serial):
    """8 clients x 100 requests of varied lengths and budgets through in-flight batching."""
    url, engine, _ = server
    work = [varied_requests(100, seed) for seed in range(8)]

    def client(requests):
        with httpx.Client(base_url=url, timeout=60) as http:
            return [http.post("/v1/translate", json={"ids": [ids], "max_new_tokens": n}).json() for ids, n in requests]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(client, work))
    for requests, replies in zip(work, answers):
        for (ids, n), reply in zip(requests, replies):
            assert reply["translations"][0]["ids"] == serial(ids, n)
    before = scrape(url)  # the fixture's server may have answered requests of other tests
    assert before["tfm_export_requests_total"][OK] >= 800 and before["tfm_export_request_seconds_count"][()] >= 800
    assert before["tfm_export_tokens_total"][()] >= sum(len(serial(ids, n)) for reqs in work for ids, n in reqs)
    assert before["tfm_export_batch_occupancy"][()] == 0 and before["tfm_export_queue_depth"][()] == 0
    assert before["tfm_export_tokens_per_second"][()] > 0  # tokens were made since the last scrape
    buckets = {dict(labels)["le"]: n for labels, n in before["tfm_export_first_token_seconds_bucket"].items()}
    assert buckets["+Inf"] == before["tfm_export_first_token_seconds_count"][()]
    reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5, 6, 7]], "max_new_tokens": 8})
    after = scrape(url)
    assert after["tfm_export_requests_total"][OK] - before["tfm_export_requests_total"][OK] == 1
    tokens = len(reply.json()["translations"][0]["ids"])
    assert after["tfm_export_tokens_total"][()] - before["tfm_export_tokens_total"][()] == tokens


OK = (("status", "200"),)  # scrape's labels of tfm_export_requests_total{status="200"}


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """GET /metrics parsed with prometheus_client's own parser: {sample name: {labels: value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_a_request_joins_the_running_batch_within_a_step(static_export, serial):
    """A short job sent while a long one decodes finishes first: it did not wait for the batch to end."""
    engine = open_engine(ServeSettings(str(static_export), engine=EngineConfig(max_batch=2)))
    long_ids = next(ids for ids, _ in varied_requests(200, 3) if len(serial(ids, 64)) == 64)
    events: list[tuple[str, str]] = []
    started, submitted = threading.Event(), threading.Event()

    def recorder(name):
        def emit(kind, value):
            events.append((name, kind))
            if name == "long" and len(events) == 5:  # the decode thread waits for the short job's submit:
                started.set()  # on a busy machine it could otherwise step on before this thread runs
                assert submitted.wait(10)
        return emit

    engine.start()
    engine.submit([Job(long_ids, 64, recorder("long"))])
    assert started.wait(10)
    engine.submit([Job([5, 6], 2, recorder("short"))])
    submitted.set()
    engine.close(30)
    done = [name for name, kind in events if kind == "done"]
    assert done == ["short", "long"]
    short = [n for n, event in enumerate(events) if event[0] == "short"]
    assert short[0] <= 7  # it joined at the next step (the long row's 6th token), not after the batch
    # the two rows stepped together: one long token between the short one's two tokens (then its end)
    assert [events[n] for n in range(short[0], short[-1] + 1)] == [
        ("short", "token"), ("long", "token"), ("short", "token"), ("short", "done")]


def test_request_level_and_single_engines_match_serial(static_export, serial):
    for batching in ("request", "single"):
        engine = open_engine(ServeSettings(str(static_export), batching=batching)).start()
        got: dict[int, list[int]] = {}
        requests = varied_requests(12, 5)
        jobs = [Job(ids, n, lambda kind, v, i=i: kind == "token" and got.setdefault(i, []).append(v))
                for i, (ids, n) in enumerate(requests)]
        engine.submit(jobs)
        engine.close(30)
        assert [got.get(i, []) for i in range(len(requests))] == [serial(ids, n) for ids, n in requests]


@pytest.mark.parametrize("body, status, named", [
    ({"ids": [[5]], "beam_size": 4, "topk": 2}, 422, "beam_size, topk"),
    ({"ids": [[5]], "texts": ["x"]}, 422, "exactly one of"),
    ({}, 422, "exactly one of"),
    ({"ids": []}, 422, "empty"),
    ({"ids": [[5]] * 5}, 413, "max_texts"),
    ({"ids": [[5] * 65]}, 413, "max_len"),
    ({"ids": [[5, 9999]]}, 422, "out of range"),
    ({"ids": [["5"]]}, 422, "ids.0.0"),
    ({"ids": [[5]], "max_new_tokens": 500}, 422, "max_new_tokens"),
    ({"ids": [[5]], "max_new_tokens": 0}, 422, "max_new_tokens"),
    ({"texts": ["hallo"]}, 422, "no tokenizer"),
])
def test_bad_requests_get_a_json_error_naming_the_problem(server, body, status, named):
    reply = httpx.post(f"{server[0]}/v1/translate", json=body)
    assert reply.status_code == status, reply.text
    assert named in reply.json()["error"] or named == reply.json().get("limit")


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_a_body_that_is_not_a_json_object_is_a_400(server, raw):
    reply = httpx.post(f"{server[0]}/v1/translate", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and "JSON object" in reply.json()["error"]


def test_healthz_and_docs(server):
    assert httpx.get(f"{server[0]}/healthz").json()["status"] == "ok"
    assert "/v1/translate" in httpx.get(f"{server[0]}/openapi.json").json()["paths"]
    assert httpx.get(f"{server[0]}/docs").status_code == 200
    listed = httpx.get(f"{server[0]}/v1/models").json()  # OpenAI's model list: the one export served
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == [Path(server[2]).resolve().name]


def test_a_body_larger_than_any_valid_request_is_refused_unread(server):
    """A body over max_texts sources of the longest length (serve.guard.body_limit) is a 413 naming the limit,
    declared or chunked (no Content-Length), never read into a 30 MB JSON parse; LibreTranslate's route 400."""
    url, engine, _ = server
    limit = body_limit(4, engine.model.config.max_len)  # the fixture's max_texts
    huge = json.dumps({"texts": ["1" * (limit + 1)]}).encode()
    answer = httpx.post(f"{url}/v1/translate", content=huge, headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["limit"] == "max_body_bytes"
    assert f"over this server's limit of {limit}" in answer.json()["error"]

    def chunks():
        for start in range(0, len(huge), 65536):
            yield huge[start:start + 65536]
    answer = httpx.post(f"{url}/v1/translate", content=chunks(), headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["limit"] == "max_body_bytes", answer.text
    form = httpx.post(f"{url}/translate", content=b"q=" + b"1" * (limit + 1),
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 400 and form.json()["limit"] == "max_body_bytes"
    assert httpx.post(f"{url}/v1/translate", json={"ids": [[5, 6]], "max_new_tokens": 2}).status_code == 200


def test_a_full_queue_answers_429_with_retry_after(static_export, serial):
    settings = ServeSettings(str(static_export), engine=EngineConfig(max_batch=1, max_queue=2), max_texts=8)
    with serving(settings) as (url, _):
        reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5]] * 3})
        assert reply.status_code == 429 and reply.headers["Retry-After"] == "1"
        assert reply.json()["limit"] == "max_queue"
        requests = varied_requests(24, 11)
        with ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda r: httpx.post(f"{url}/v1/translate", timeout=60,
                                                         json={"ids": [r[0]], "max_new_tokens": r[1]}), requests))
    codes = {r.status_code for r in replies}
    assert 429 in codes and codes <= {200, 429}
    for (ids, n), reply in zip(requests, replies):
        if reply.status_code == 200:
            assert reply.json()["translations"][0]["ids"] == serial(ids, n)


def stream_events(response) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def test_a_client_that_disconnects_frees_its_row(static_export, serial):
    engine = open_engine(ServeSettings(str(static_export)))
    step = engine.rows.step
    engine.rows.step = lambda *a: (time.sleep(0.02), step(*a))[1]  # 64 steps take ~1.3 s: time to hang up
    long_ids = next(ids for ids, _ in varied_requests(200, 3) if len(serial(ids, 64)) == 64)
    with serving(ServeSettings(str(static_export)), engine) as (url, _):
        with httpx.stream("POST", f"{url}/v1/translate", json={"ids": [long_ids], "stream": True}) as response:
            next(response.iter_lines())  # the first event: decoding has started; then hang up
        deadline = time.time() + 5
        while engine.active and time.time() < deadline:
            time.sleep(0.01)
        assert engine.active == 0 and engine.tokens_total < 64


@pytest.fixture(scope="module")
def bundled_static(tmp_path_factory) -> Path:
    if not BUNDLED.exists():
        pytest.skip("the bundled model is not trained yet")
    out = tmp_path_factory.mktemp("serve_bundled") / "static"
    export_model(load_checkpoint(BUNDLED), out, ExportOptions(static_cache=True, validate=False))
    return out


def test_streamed_events_concatenate_to_the_translation(bundled_static):
    texts = ["4718", "12", "990001"]
    with serving(ServeSettings(str(bundled_static))) as (url, engine):
        plain = httpx.post(f"{url}/v1/translate", json={"texts": texts}, timeout=60).json()["translations"]
        with httpx.stream("POST", f"{url}/v1/translate", json={"texts": texts, "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = stream_events(response)
    expected = open_export(bundled_static, "cpu").translate(texts)
    assert [row["text"] for row in plain] == expected
    assert events[-1] == ("done", {"translations": plain})
    for index, row in enumerate(plain):
        tokens = [data for kind, data in events if kind == "token" and data["index"] == index]
        assert "".join(t["text"] for t in tokens) == row["text"]
        assert [t["id"] for t in tokens] == row["ids"]


def test_api_key(static_export):
    with serving(ServeSettings(str(static_export), api_key="s3cret")) as (url, _):
        body = {"ids": [[5, 6]], "max_new_tokens": 3}
        assert httpx.post(f"{url}/v1/translate", json=body).status_code == 401
        wrong = httpx.post(f"{url}/v1/translate", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
        assert httpx.get(f"{url}/metrics").status_code == 401
        assert httpx.get(f"{url}/v1/models").status_code == 401
        right = httpx.post(f"{url}/v1/translate", json=body, headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert httpx.get(f"{url}/healthz").status_code == 200  # probes need no key
    with pytest.raises(InputError, match="reachable from other machines"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", "key")
    check_bind("::1", None)


def test_cli_needs_the_static_decoder_only_for_inflight_batching(tiny_export):
    result = run_cli("serve", tiny_export, "--port", free_port(), "--batching", "inflight")
    assert result.exit_code == 1 and "re-export with --static-slots N" in result.output
    assert "serving" not in result.output and len(result.output.strip().splitlines()) == 1
    result = run_cli("serve", tiny_export, "--host", "0.0.0.0")
    assert result.exit_code == 1 and "--api-key" in result.output


def test_cli_refuses_a_taken_port_in_one_line_before_opening_the_model(tiny_export, tmp_path):
    """A port another process listens on: one line naming it, exit 1, before the batching notice
    (uvicorn's own failure was its log line and exit 3, after the model loaded)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", tiny_export, "--port", port)
        assert result.exit_code == 1, result.output
        assert result.output.strip() == f"Error: port {port} on 127.0.0.1 is in use; pick another --port"
        settings = ServeSettings(str(tmp_path / "no-export"))  # the port is checked before the folder is read
        with pytest.raises(InputError, match=f"port {port} on 127.0.0.1 is in use"):
            run_server(settings, "127.0.0.1", port)


@pytest.mark.parametrize("export, kind, notice", [("tiny_export", "request-level", True),
                                                  ("static_export", "in-flight", False)])
def test_cli_serves_any_export_and_says_so_once_it_listens(export, kind, notice, request):
    """Default flags serve an export without the static decoder too (request-level batching, with a
    notice saying how to get in-flight batching); "serving on" comes once requests are answered."""
    folder = request.getfixturevalue(export)
    with server_process("serve", folder, wait=None) as server:  # no polling: the test waits for its line
        proc, port = server.proc, server.port
        lines = [proc.stderr.readline()]
        if notice:
            assert "request-level batching; for in-flight batching re-export with --static-slots N" in lines[0]
            lines.append(proc.stderr.readline())
        assert f"serving {folder} on http://127.0.0.1:{port}/ with {kind} batching" in lines[-1]
        health = httpx.get(f"http://127.0.0.1:{port}/healthz")  # no retry: it listens already
        assert health.json()["batching"] == ("request" if notice else "inflight")
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/translate", json={"ids": [[5, 6]], "max_new_tokens": 3})
        assert reply.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_write_config(static_export, tmp_path):
    yaml = pytest.importorskip("yaml")
    from tfm_export.serve.ray_config import settings_from_dict

    path = tmp_path / "serve.yaml"
    run_cli_ok("serve", static_export, "--write-config", path, "--replicas", "3", "--max-batch", "4")
    config = yaml.safe_load(path.read_text())
    app = config["applications"][0]
    assert app["import_path"] == "tfm_export.serve.ray_app:app_builder"
    assert app["deployments"][0]["num_replicas"] == 3
    settings = settings_from_dict(app["args"])
    assert settings.engine.max_batch == 4 and Path(settings.folder) == static_export.resolve()


def post_or_refused(client: httpx.Client, url: str, body: dict):
    """The reply, or None when the server never took the request: the connection was refused (it had
    stopped listening), reset while it still waited in the kernel's backlog, or closed by the server's
    shutdown before it had read the request (the app never saw it; the test's count of answered
    requests covers every request the server had queued)."""
    try:
        return client.post(url, json=body, timeout=60)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return None


def test_sigterm_finishes_what_is_in_flight_and_exits_0(static_export, serial):
    # Four sources per request and one row: the queue grows ~4x faster than one row drains it, however
    # slowly the clients send (one shared client, so no per-request TLS set-up slows them either).
    sources = [ids for ids, _ in varied_requests(128, 7)]
    requests = [sources[i:i + 4] for i in range(0, len(sources), 4)]
    with httpx.Client(limits=httpx.Limits(max_connections=40)) as client, \
            server_process("serve", static_export, "--max-batch", "1", "--max-queue", "256", client=client) as server:
        url, proc = server.url, server.proc
        with ThreadPoolExecutor(len(requests)) as pool:
            submitted, futures, deadline = [], [], time.time() + 60
            while (health := client.get(f"{url}/healthz").json())["queue_depth"] < 6:  # waiting for the one row
                assert time.time() < deadline, f"{health}; {sum(f.done() for f in futures)} of {len(futures)} answered"
                # First round, or every request answered before six sources waited (clients slowed down by a
                # busy machine): another round.
                if all(f.done() for f in futures):
                    submitted += requests
                    futures += [pool.submit(post_or_refused, client, f"{url}/v1/translate",
                                            {"ids": texts, "max_new_tokens": 64}) for texts in requests]
                time.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
            replies = [f.result() for f in futures]
        assert proc.wait(30) == 0
    answered = [(texts, reply) for texts, reply in zip(submitted, replies) if reply is not None]
    assert sum(len(texts) for texts, _ in answered) >= 7  # the 6 waiting sources and the row's
    for texts, reply in answered:
        assert reply.status_code == 200
        assert [t["ids"] for t in reply.json()["translations"]] == [serial(ids, 64) for ids in texts]


def test_beams_above_the_maximum_are_a_422_and_rows_over_max_rows_a_413(static_export):
    with serving(ServeSettings(str(static_export), max_texts=4, max_beams=4, max_rows=6)) as (url, _):
        for name in ("num_beams", "num_return_sequences"):
            reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5]], name: 5, "do_sample": name != "num_beams"})
            assert reply.status_code == 422 and reply.json()["field"] == name, reply.text
            assert f"{name} 5 exceeds this server's limit of 4 rows per source (max_beams" in reply.json()["error"]
        assert httpx.post(f"{url}/v1/translate", json={"ids": [[5]] * 3, "num_beams": 2}).status_code == 200
        reply = httpx.post(f"{url}/v1/translate", json={"ids": [[5]] * 4, "num_beams": 2})
        assert reply.status_code == 413 and reply.json()["limit"] == "max_rows", reply.text
        assert "8 decoder rows exceed the limit of 6 per request (max_rows, a server setting: tfm-export serve " \
               "--max-rows)" in reply.json()["error"]
        schema = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]["TranslateRequest"]
        beams = [b for b in schema["allOf"][1]["anyOf"] if b["properties"]["do_sample"]["enum"][0] is False]
        # each beam count's bound, once per return_alternatives branch (serve.contract_ct2)
        assert sorted({b["properties"].get("ids", {"maxItems": 4})["maxItems"] for b in beams}, reverse=True) == [
            4, 3, 2, 1]
