"""The OpenAPI schema is the server's contract. schemathesis reads /openapi.json of a live server, sends
requests it generates from it (valid ones and invalid ones, on every operation) and checks each
answer: a valid request gets a 2xx, an invalid one a 4xx, nothing a 5xx, and every status, content
type, header and body (server-sent events included) is one the schema documents. Every phase runs
on every operation, the coverage phase (boundary values: each minimum and maximum, one past them,
empty strings and lists) included, with two checks of this server's own (HOOKS): a value the schema
refuses is a 422 naming the field (413 only for the size limits, naming the limit), and an empty text
translates to an empty text; and one hook: a valid request's `target_prefix` (/v1/score's targets) gets one
item per source, the one rule the schema states in words only. The examples phase sends the schema's examples
(valid prefixed, alternatives and score requests: serve.contract_ct2). Deterministic (schemathesis' deterministic generation, no seed) and
bounded: a fixed number of cases per operation against a tiny model with small limits, so that every
valid request decodes fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("schemathesis")
httpx = pytest.importorskip("httpx")

from helpers import serving  # noqa: E402
from test_serve import OK, scrape  # noqa: E402

from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

EXAMPLES = 100  # cases per operation and phase: ~15 s of requests on the loaded 2-core test machine
# 413 is this server's answer to a request over a size limit (max_texts, source length, max_rows): a
# rejection, which schemathesis' default list leaves out; HOOKS checks that a 413 is one of those.
# Warnings fail the run: "most generated data was rejected" (low_valid_rate: valid requests refused)
# is the failure this test exists for.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

[warnings]
display = ["missing_test_data", "validation_mismatch", "missing_deserializer", "unsupported_regex",
           "method_not_allowed", "unresolvable_reference", "low_valid_rate"]
fail-on = true

[warnings.low_valid_rate]
threshold = 0.9
"""
SIZE_LIMITS = ("max_texts", "max_len", "max_src_len", "max_rows", "max_body_bytes")  # the limits a 413 may name (docs/serving.md)
# Checks of this server's own, run by schemathesis with its built-in ones on every case of every phase.
HOOKS = f"""
import json

import schemathesis

SIZE_LIMITS = {SIZE_LIMITS!r}


def _json(response):
    try:
        return json.loads(response.content)
    except ValueError:
        return None


@schemathesis.check
def refusals_name_their_cause(ctx, response, case):
    \"\"\"A 422 names the request field at fault; a 413 names the size limit (any other value the
    schema refuses, such as num_beams above its maximum, is a 422).\"\"\"
    if case.operation.path not in ("/v1/translate", "/v1/score") or response.status_code not in (413, 422):
        return None
    body = _json(response) or {{}}
    if response.status_code == 422 and not (body.get("field") or body.get("fields")):
        raise AssertionError(f"a 422 that names no field: {{body}}")
    if response.status_code == 413 and body.get("limit") not in SIZE_LIMITS:
        raise AssertionError(f"413 is for the size limits ({{', '.join(SIZE_LIMITS)}}); a value the schema "
                             f"refuses is a 422 naming the field: {{body}}")
    return None


# One prefix (target) per source: the rule the schema states in words only (serve.contract_ct2: JSON Schema
# cannot compare two arrays' lengths); each valid request is given as many as it has sources.
PAIRED = {{"/v1/translate": ("target_prefix",), "/v1/score": ("targets", "target_ids")}}


@schemathesis.hook
def before_call(ctx, case, kwargs):
    body, meta = case.body, getattr(case, "meta", None)
    if not isinstance(body, dict) or meta is None or not meta.generation.mode.is_positive:
        return
    sources = body.get("texts") if isinstance(body.get("texts"), list) else body.get("ids")
    for name in PAIRED.get(case.operation.path, ()):
        given = body.get(name)
        if isinstance(given, list) and given and isinstance(sources, list):
            body[name] = (given * len(sources))[: len(sources)]


@schemathesis.check
def empty_texts_translate_to_empty_texts(ctx, response, case):
    \"\"\"An empty source text is answered with an empty text (and no ids), without decoding.\"\"\"
    body = _json(response)
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(case.body, dict):
        return None
    if case.operation.path == "/v1/translate" and isinstance(case.body.get("texts"), list):
        for text, row in zip(case.body["texts"], body["translations"]):
            if text == "" and (row.get("text") != "" or row["ids"] != []):
                raise AssertionError(f"the empty text was translated into {{row}}")
    if case.operation.path == "/translate" and "q" in case.body:
        q, got = case.body["q"], body["translatedText"]
        for text, translated in zip(q if isinstance(q, list) else [q], got if isinstance(got, list) else [got]):
            if text == "" and translated != "":
                raise AssertionError(f"the empty text was translated into {{translated!r}}")
    return None
"""
OPERATIONS = {"POST /v1/translate", "POST /v1/score", "POST /translate", "GET /languages", "GET /healthz", "GET /metrics",
              "GET /v1/models", "GET /v1/models/{model}", "POST /detect", "GET /frontend/settings"}
# LibreTranslate's /translate_file: its file's name picks the format (.txt, .html, .docx), which OpenAPI cannot
# state, so generated uploads are refused; tests/test_serve_files.py covers it.
LEFT_OUT = ("--exclude-path", "/translate_file")


@pytest.fixture(scope="module")
def server(chars_export):
    """Text in and out (a character tokenizer), request-level batching, small limits (max_rows 6: fewer
    sources with 3 or 4 beams or samples)."""
    settings = ServeSettings(str(chars_export), engine=EngineConfig(max_batch=4, max_queue=64), max_texts=3,
                             max_beams=4, max_rows=6)
    with serving(settings) as (url, engine):
        yield url, engine


def run_schemathesis(url: str, folder, config_text: str = CONFIG, examples: int = EXAMPLES,
                     *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """schemathesis' run (its output) and its JSON report."""
    config, report, hooks = folder / "schemathesis.toml", folder / "report.json", folder / "hooks.py"
    config.write_text(config_text)
    hooks.write_text(HOOKS)
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", f"{url}/openapi.json",
           "--checks", "all", *LEFT_OUT, *extra, "--mode", "all", "--phases", "examples,coverage,fuzzing",
           "--max-examples", str(examples), "--generation-deterministic", "--workers", "1", "--request-timeout", "30",
           "--no-color", "--output-sanitize", "false", "--report", "json", "--report-json-path", str(report)]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(hooks)}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return result, json.loads(report.read_text()) if report.exists() else {}


def test_every_answer_is_one_the_schema_documents(server, tmp_path):
    url, engine = server
    before = scrape(url).get("tfm_export_requests_total", {}).get(OK, 0)  # none before the first answer
    result, report = run_schemathesis(url, tmp_path)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert "No issues found" in result.stdout
    # every valid request schemathesis made was answered 2xx (its "rejected" counts the others)
    rates = report["valid_rates"]
    assert set(rates) == OPERATIONS
    # boundary values and random ones on every operation; CTranslate2's routes' schemas have examples
    # (serve.contract_ct2: valid target_prefix, return_alternatives and score requests), each sent and answered
    assert all({"coverage", "fuzzing"} <= set(phases) for phases in rates.values()), rates
    schema = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]
    for operation, name in (("POST /v1/translate", "TranslateRequest"), ("POST /v1/score", "ScoreRequest")):
        given = schema[name]["examples"]
        assert any("target_prefix" in e or "target_ids" in e for e in given), given
        assert rates[operation]["examples"]["accepted"] >= len(given), (operation, rates[operation])
    counts = [phase for phases in rates.values() for phase in phases.values()]
    assert all(phase["rejected"] == 0 and phase["accepted"] > 0 for phase in counts), rates
    translated = scrape(url)["tfm_export_requests_total"][OK] - before
    assert translated >= 100, translated  # and decoded: not a 2xx of some other kind
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok" and engine.active == 0


def test_the_schema_states_this_servers_limits(server):
    url, _ = server
    schema = httpx.get(f"{url}/openapi.json").json()
    request = schema["components"]["schemas"]["TranslateRequest"]
    ids = request["properties"]["ids"]["anyOf"][0]
    assert ids["maxItems"] == 3 and ids["items"]["maxItems"] == 64 and ids["items"]["items"]["maximum"] == 63
    texts = request["properties"]["texts"]["anyOf"][0]["items"]
    assert texts["maxLength"] == 63 and texts["pattern"].startswith("^[")  # 63 digits + EOS = max_len
    assert request["properties"]["num_beams"]["anyOf"][0]["maximum"] == 4
    plain = [b for b in request["allOf"][1]["anyOf"] if b["properties"]["return_alternatives"] == {"const": False}]
    beams = [b for b in plain if b["properties"]["do_sample"]["enum"][0] is False]
    assert [b["properties"].get("texts", {"maxItems": 3})["maxItems"] for b in beams] == [3, 3, 2, 1]  # max_rows 6
    # CTranslate2's: alternatives greedy, n rows per source (max_rows 6: 1-2 for 3 sources, 3 for 2, 4 for 1)
    alternatives = [b["properties"] for b in request["allOf"][1]["anyOf"] if b not in plain]
    assert [(a["num_return_sequences"]["anyOf"][0]["maximum"], a.get("texts", {"maxItems": 3})["maxItems"])
            for a in alternatives] == [(2, 3), (3, 2), (4, 1)]
    assert all(a["num_beams"] == {"enum": [1, None]} for a in alternatives)
    prefix = request["properties"]["target_prefix"]  # one per source, text or ids leaving a token to generate
    assert prefix["maxItems"] == 3 and [p.get("maxLength", p.get("maxItems")) for p in prefix["items"]["anyOf"]] == [63, 63]
    score = schema["components"]["schemas"]["ScoreRequest"]
    assert score["properties"]["texts"]["anyOf"][0]["items"]["minLength"] == 1  # nothing to score against
    assert score["properties"]["target_ids"]["anyOf"][0]["items"]["maxItems"] == 63  # + EOS = max_len
    assert set(schema["paths"]["/v1/score"]["post"]["responses"]) == {"200", "400", "413", "422", "500"}
    assert request["properties"]["source_lang"]["anyOf"] == [{"type": "null"}]  # no language codes
    translate = schema["paths"]["/v1/translate"]["post"]["responses"]
    assert set(translate) == {"200", "400", "413", "422", "429", "500", "503"}
    assert set(translate["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(schema["paths"]["/translate"]["post"]["requestBody"]["content"]) == {
        "application/json", "application/x-www-form-urlencoded"}
    assert "text/plain" in schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]


# A Whisper export's server: a valid form holds any bytes as its `file`, and bytes the schema cannot tell
# from a recording are refused (422 naming `file`), so valid requests are not all accepted
# (positive_data_acceptance and the warnings about valid requests refused are left out); every other
# check holds.
AUDIO_CONFIG = (CONFIG.replace(', "low_valid_rate"]', "]").replace('"validation_mismatch", ', "")
                .replace("[warnings.low_valid_rate]\nthreshold = 0.9\n", ""))
AUDIO_EXAMPLES = 30  # each a multipart upload decoded (or refused) by the server: ~20 s in all


def test_a_whisper_servers_answers_are_ones_its_schema_documents(whisper_export, tmp_path):
    """The audio routes with generated forms, valid and invalid (wrong types, missing and unknown fields,
    bytes that are no audio): each answer is a documented 2xx or 4xx, never a 5xx."""
    settings = ServeSettings(str(whisper_export), max_upload_mb=1, max_audio_seconds=10)
    with serving(settings) as (url, _):
        result, report = run_schemathesis(url, tmp_path, AUDIO_CONFIG, AUDIO_EXAMPLES,
                                          "--exclude-checks", "positive_data_acceptance")
        assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
        assert "No issues found" in result.stdout
        rates = report["valid_rates"]
        assert {"POST /v1/audio/transcriptions", "POST /v1/audio/translations"} <= set(rates)
        assert all({"coverage", "fuzzing"} <= set(rates[op]) for op in rates if "/audio/" in op), rates
        statuses = scrape(url)["tfm_export_requests_total"]
        assert not [labels for labels in statuses if labels[0][1].startswith("5")], statuses
        assert sum(count for labels, count in statuses.items() if labels[0][1].startswith("4")) >= 50
