"""The Node client of `tfm-export serve`: runtimes/node/client.mjs and the CLI's --server.

The client runs under node against a real `tfm-export serve` subprocess of the bundled export and must
give the Python runtime's tokens; retries and the request body are checked against a stub server that
records what it receives. The page's server mode runs in headless Chromium in
runtimes/web/test/browser.test.mjs (tests/test_runtimes.py::test_browser_runtime); the server's CORS
in tests/test_serve_cors.py.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from helpers import free_port, server_process, serving_forever  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NODE_DIR = ROOT / "runtimes" / "node"
CLIENT = (NODE_DIR / "client.mjs").as_uri()
KEY = "client-test-key"
TEXTS = ["4718", "12", "990001", "7", "31415"]
MAX_TEXTS = 5


def node_json(code: str, **args: Any) -> Any:
    """Run an ES module snippet under node with `connect`, `ServerError` and `args` (JSON) in scope;
    it prints one JSON value, returned here."""
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test the Node client")
    script = (f"import {{ connect, ServerError }} from {json.dumps(CLIENT)};\n"
              f"const args = JSON.parse(process.env.CLIENT_ARGS);\n{code}")
    done = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CLIENT_ARGS": json.dumps(args)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# Each failing call as { name, status, message } (an Error that is no ServerError has no status).
CATCH = """
const caught = async (call) => {
  try { await call(); return null; } catch (err) {
    return { name: err.name, status: err.status ?? null, server: err instanceof ServerError, message: err.message };
  }
};
"""


@pytest.fixture(scope="module")
def api(bundled_export):
    """`tfm-export serve` of the bundled export (request-level batching: it has no static decoder), with a key."""
    with server_process("serve", bundled_export, "--batching", "request", "--api-key", KEY, "--max-texts", MAX_TEXTS,
                        "--threads", "1", "--no-spin", timeout=60) as server:
        yield server.url


@pytest.fixture(scope="module")
def model(bundled_export):
    return open_export(bundled_export, "cpu")


def test_translate_generate_ids_and_generate_equal_the_python_runtime(api, model):
    sources = [model.tokenizer.encode(t) for t in TEXTS]
    got = node_json("""
const server = connect(args.url, { apiKey: args.key });
console.log(JSON.stringify({
  texts: await server.translate(args.texts),
  ids: await server.generateIds(args.sources),
  short: await server.generateIds(args.sources, { maxNewTokens: 5, numBeams: undefined }),
  generated: await server.generate(args.texts.slice(0, 2)),
  health: await connect(args.url).health(),  // /healthz needs no key
}));""", url=api + "/", key=KEY, texts=TEXTS, sources=sources)
    assert got["texts"] == model.translate(TEXTS)
    assert got["ids"] == model.generate_ids(sources)
    assert got["short"] == model.generate_ids(sources, 5) and all(len(row) <= 5 for row in got["short"])
    best = [[{key: h[key] for key in ("ids", "text")} for h in hyps] for hyps in got["generated"]]
    assert best == [[{"ids": ids, "text": text}] for ids, text in
                    zip(model.generate_ids(sources[:2]), model.translate(TEXTS[:2]))]
    assert got["health"]["status"] == "ok" and got["health"]["batching"] == "request"


def test_decoding_options_through_the_server_equal_the_python_runtime(api, model):
    """Beam search with n-best and seeded sampling, sent by the client, answer Python's generate."""
    sources = [model.tokenizer.encode(t) for t in TEXTS[:3]]
    got = node_json("""
const server = connect(args.url, { apiKey: args.key });
console.log(JSON.stringify({
  beams: await server.generate(args.sources, { numBeams: 3, numReturnSequences: 2, lengthPenalty: 0.7 }),
  sampled: await server.generate(args.sources, { doSample: true, seed: 5, topP: 0.9, temperature: 1.3 }),
}));""", url=api, key=KEY, sources=sources)
    for name, options in (("beams", {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.7}),
                          ("sampled", {"do_sample": True, "seed": 5, "top_p": 0.9, "temperature": 1.3})):
        expected = model.generate(sources, **options)
        assert [[h["ids"] for h in hyps] for hyps in got[name]] == [[h.ids for h in hyps] for hyps in expected]
        for hyps, want in zip(got[name], expected):
            assert [h["score"] for h in hyps] == pytest.approx([h.score for h in want], abs=1e-4)


def test_streamed_pieces_are_the_python_runtimes(api, model):
    got = node_json("""
const server = connect(args.url, { apiKey: args.key });
const collect = async (source, options) => {
  const out = [];
  for await (const piece of server.stream(source, options)) out.push(piece);
  return out;
};
const texts = [];
for (const text of args.texts) texts.push(await collect(text));
const ids = await collect(args.source, { maxNewTokens: 7 });
let first;
for await (const piece of server.stream(args.texts[2])) { first = piece; break; }  // hangs up mid-stream
console.log(JSON.stringify({ texts, ids, first, after: await server.translate([args.texts[2]]) }));""",
                    url=api, key=KEY, texts=TEXTS, source=model.tokenizer.encode(TEXTS[0]))
    assert got["texts"] == [list(model.stream(text)) for text in TEXTS]
    assert ["".join(pieces) for pieces in got["texts"]] == model.translate(TEXTS)
    assert got["ids"] == model.generate_ids([model.tokenizer.encode(TEXTS[0])], 7)[0]
    assert got["first"] == next(model.stream(TEXTS[2])) and got["after"] == model.translate([TEXTS[2]])


@pytest.mark.parametrize("call, body, status", [
    ("server.translate(args.texts.concat(['1']))", {"texts": TEXTS + ["1"]}, 413),
    ("server.translate(['1'.repeat(200)])", {"texts": ["1" * 200]}, 413),
    ("server.generateIds([[5, 99999]])", {"ids": [[5, 99999]]}, 422),
    ("server.translate(['12x'])", {"texts": ["12x"]}, 422),
])
def test_an_error_answer_throws_the_servers_message(api, call, body, status):
    reply = httpx.post(f"{api}/v1/translate", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status_code == status
    got = node_json(CATCH + f"""
const server = connect(args.url, {{ apiKey: args.key }});
const streamed = async () => {{ for await (const _ of server.streamEvents(args.body.texts ?? args.body.ids)) {{}} }};
console.log(JSON.stringify([await caught(() => {call}), await caught(streamed)]));""", url=api, key=KEY, texts=TEXTS,
                    body=body)
    error = {"name": "ServerError", "status": status, "server": True,
             "message": f"{reply.json()['error']} (HTTP {status})"}
    assert got == [error, error]  # a stream is refused before its first event, with the same answer


def test_the_api_key(api):
    got = node_json(CATCH + """
console.log(JSON.stringify(await Promise.all([
  caught(() => connect(args.url).translate(['12'])),
  caught(() => connect(args.url, { apiKey: 'wrong' }).generateIds([[5, 2]])),
  caught(async () => { for await (const _ of connect(args.url).stream('12')) {} }),
  connect(args.url, { apiKey: args.key }).translate(['12']),
])));""", url=api, key=KEY)
    for refused in got[:3]:
        assert refused == {"name": "ServerError", "status": 401, "server": True,
                           "message": "missing or wrong API key; send Authorization: Bearer KEY (HTTP 401)"}
    assert got[3] == ["zwölf"]


def test_bad_urls_options_and_unreachable_servers_are_one_line_errors():
    got = node_json(CATCH + """
console.log(JSON.stringify(await Promise.all([
  caught(() => connect('127.0.0.1:8080')),
  caught(() => connect('ftp://127.0.0.1/')),
  caught(() => connect('http://127.0.0.1:9/').translate(['1'], { beamSize: 4 })),
  caught(() => connect(`http://127.0.0.1:${args.port}`).translate(['1'])),
])));""", port=free_port())
    assert got[0]["message"].startswith('not a URL: "127.0.0.1:8080"')
    assert got[1]["message"] == "ftp://127.0.0.1/ is not an http(s) URL"
    assert got[2]["message"].startswith('unknown decoding option "beamSize"; known: maxNewTokens, numBeams')
    assert got[3]["server"] and got[3]["status"] is None
    assert got[3]["message"].startswith("cannot reach http://127.0.0.1:") and "ECONNREFUSED" in got[3]["message"]


class Stub(http.server.BaseHTTPRequestHandler):
    """Answers POSTs with the server's queued (status, headers, body) answers; records each request."""

    answers: list[tuple[int, dict[str, str], dict]] = []
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(({name.lower(): value for name, value in self.headers.items()}, body))
        status, headers, body = self.answers.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub():
    Stub.answers, Stub.received = [], []
    with serving_forever(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", Stub


FULL = (429, {"Retry-After": "0"}, {"error": "the queue is full (max_queue); retry later", "limit": "max_queue"})


def test_full_queues_are_retried_after_retry_after_and_options_go_by_their_python_names(stub):
    url, server = stub
    server.answers = [FULL, (503, {"Retry-After": "0"}, {"error": "shutting down"}), (200, {}, {"translations": [
        {"ids": [3, 4], "text": "ab", "score": -0.5, "hypotheses": [{"ids": [3, 4], "text": "ab", "score": -0.5},
                                                                   {"ids": [4], "text": "b", "score": -0.9}]}]})]
    got = node_json("""
const server = connect(args.url, { apiKey: 'k' });
console.log(JSON.stringify(await server.generate([[5, 2]], {
  numBeams: 4, numReturnSequences: 2, earlyStopping: 'never', seed: 2n ** 64n - 1n, topP: 0.9, doSample: undefined })));
""", url=url)
    assert got == [[{"ids": [3, 4], "text": "ab", "score": -0.5}, {"ids": [4], "text": "b", "score": -0.9}]]
    assert len(server.received) == 3
    headers, raw = server.received[-1]
    assert headers["authorization"] == "Bearer k" and headers["content-type"] == "application/json"
    # the exact seed: 2**64 - 1 is written as a JSON number, not rounded through a float
    assert json.loads(raw) == {"ids": [[5, 2]], "num_beams": 4, "num_return_sequences": 2, "early_stopping": "never",
                               "seed": 2**64 - 1, "top_p": 0.9}


def test_retries_are_bounded(stub):
    url, server = stub
    server.answers = [FULL, FULL, (429, {"Retry-After": "3600"}, FULL[2])]
    got = node_json(CATCH + """
console.log(JSON.stringify([
  await caught(() => connect(args.url, { retries: 1 }).translate(['1'])),
  await caught(() => connect(args.url, { retries: 5 }).translate(['1'])),
]));""", url=url)
    full = {"name": "ServerError", "status": 429, "server": True,
            "message": "the queue is full (max_queue); retry later (HTTP 429)"}
    assert got == [full, full]  # 1 retry, then gave up; then Retry-After over maxRetryWait: no retry
    assert len(server.received) == 3


def node_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test the Node CLI")
    return subprocess.run(["node", NODE_DIR / "cli.mjs", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.parametrize("flags", [[], ["--stream"], ["--max-new-tokens", "6"]])
def test_the_cli_prints_the_same_lines_from_a_server(api, model, bundled_export, flags):
    remote = node_cli("--server", api, "--api-key", KEY, *flags, *TEXTS)
    assert remote.returncode == 0, remote.stderr
    max_new = int(flags[1]) if flags[:1] == ["--max-new-tokens"] else None
    assert remote.stdout == "".join(f"{line}\n" for line in model.translate(TEXTS, max_new))
    if (NODE_DIR / "node_modules").exists():  # the local CLI needs onnxruntime-node (`npm ci`)
        assert node_cli(str(bundled_export), *flags, *TEXTS).stdout == remote.stdout


def test_the_cli_takes_ids_and_the_key_from_the_environment(api, model):
    source = model.tokenizer.encode(TEXTS[0])
    remote = node_cli("--server", api, "--ids", " ".join(map(str, source)), TFM_EXPORT_API_KEY=KEY)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == " ".join(map(str, model.generate_ids([source])[0])) + "\n"
    refused = node_cli("--server", api, "12", TFM_EXPORT_API_KEY="")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == "error: missing or wrong API key; send Authorization: Bearer KEY (HTTP 401)\n"
