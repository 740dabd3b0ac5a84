"""Language codes in the server's requests, and LibreTranslate's API: the `libretranslatepy` client (it
posts url-encoded forms) and JSON bodies get the runtime's translations from a real server on a free
loopback port, on a multilingual export (NLLB, 202 codes), a single-pair Marian export, and an export
without codes; errors are LibreTranslate's JSON {"error"} with its statuses (400, 403, 429)."""

from __future__ import annotations

import json
import urllib.error

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
libretranslatepy = pytest.importorskip("libretranslatepy")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from helpers import serving  # noqa: E402

from tfm_export.export.exporter import ExportOptions, export_model  # noqa: E402
from tfm_export.importers import load_model  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

ENG, DEU = "eng_Latn", "deu_Latn"


@pytest.fixture(scope="module")
def nllb(trained_export):
    """The committed NLLB fixture (numbers in digits -> English or German words), exported; its server."""
    out = trained_export("nllb")
    with serving(ServeSettings(str(out), max_texts=4)) as (url, _):
        yield url, open_export(out, "cpu")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A single-pair Marian folder (en -> de, no >>xx<< tokens), exported; its server. test_serve_multi's en -> de
    folder (the same words and seed): the run exports its graphs once."""
    from marian_fixtures import WORDS, pair_folder

    folder = pair_folder(tmp_path_factory.mktemp("pair") / "opus-mt-en-de", WORDS[:4], WORDS[4:], ("en", "de"), 6)
    out = folder.parent / "out"
    export_model(load_model(folder), out, ExportOptions(validate=False))
    with serving(ServeSettings(str(out))) as (url, _):
        yield url, open_export(out, "cpu")


@pytest.fixture(scope="module")
def plain(chars_export):
    """An export without language codes (a character tokenizer); its server."""
    with serving(ServeSettings(str(chars_export), max_texts=4)) as (url, _):
        yield url, open_export(chars_export, "cpu")


def post(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/translate", json=body, timeout=60)


def test_libretranslatepy_gets_the_runtimes_translations(nllb):
    url, model = nllb
    client = libretranslatepy.LibreTranslateAPI(url)
    for source, target in ((ENG, DEU), (ENG, ENG)):
        expected = model.translate(["1234"], source_lang=source, target_lang=target)[0]
        assert client.translate("1234", source, target) == expected
    assert expected == "one thousand two hundred thirty-four"  # the trained fixture spells it
    languages = client.languages()
    assert [entry["code"] for entry in languages] == model.tokenizer.languages.codes("source")
    english = next(entry for entry in languages if entry["code"] == ENG)
    assert DEU in english["targets"] and ENG not in english["targets"] and english["name"] == ENG


def test_json_lists_alternatives_and_auto(nllb):
    url, model = nllb
    texts = ["4718", "77"]
    reply = post(url, q=texts, source="auto", target=DEU, alternatives=2)
    assert reply.status_code == 200, reply.text
    sources = [model.encode(text, ENG, DEU) for text in texts]  # auto: the tokenizer's default source
    hypotheses = model.generate(sources, num_beams=3, num_return_sequences=3, **model.language_options(DEU))
    decoded = [[model.tokenizer.decode(h.ids) for h in hyps] for hyps in hypotheses]
    body = reply.json()
    assert body["translatedText"] == [row[0] for row in decoded]
    assert body["alternatives"] == [[t for t in dict.fromkeys(row[1:]) if t != row[0]] for row in decoded]
    assert body["detectedLanguage"] == [{"confidence": 0.0, "language": ENG}] * 2  # a default, not detected
    single = post(url, q="4718", source=ENG, target=DEU).json()
    assert single == {"translatedText": model.translate(["4718"], source_lang=ENG, target_lang=DEU)[0]}


def test_the_native_request_takes_language_codes(nllb):
    url, model = nllb
    reply = httpx.post(f"{url}/v1/translate", json={"texts": ["4718", "12"], "source_lang": ENG, "target_lang": DEU})
    assert [row["text"] for row in reply.json()["translations"]] == model.translate(
        ["4718", "12"], source_lang=ENG, target_lang=DEU)
    ids = [model.encode("12", ENG)]
    reply = httpx.post(f"{url}/v1/translate", json={"ids": ids, "target_lang": ENG})
    assert reply.json()["translations"][0]["text"] == model.translate(["12"], source_lang=ENG, target_lang=ENG)[0]
    for body, field in (({"texts": ["1"], "target_lang": "xx_Latn"}, "target_lang"),
                        ({"ids": ids, "source_lang": "xx"}, "source_lang")):
        reply = httpx.post(f"{url}/v1/translate", json=body)
        assert reply.status_code == 422 and reply.json()["field"] == field, reply.text
        assert "xx" in reply.json()["error"] and "ace_Arab, ace_Latn" in reply.json()["error"]  # the valid codes
    schema = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]["TranslateRequest"]
    assert DEU in schema["properties"]["target_lang"]["anyOf"][0]["enum"]


@pytest.mark.parametrize("body, status, says", [
    ({"q": "1", "source": ENG, "target": DEU, "format": "pdf"}, 400, "pdf format is not supported"),
    ({"source": ENG, "target": DEU}, 400, "missing q"),
    ({"q": "1", "source": ENG}, 400, "missing target"),
    ({"q": "1", "source": ENG, "target": "xx"}, 400, "xx is not supported"),
    ({"q": "1", "source": "xx", "target": DEU}, 400, "xx is not supported"),
    ({"q": ["1"] * 5, "source": ENG, "target": DEU}, 400, "exceeds text limit (4)"),
    ({"q": "1", "source": ENG, "target": DEU, "alternatives": 8}, 400, "must be <= 7"),
    ({"q": "1", "source": ENG, "target": DEU, "alternatives": "two"}, 400, "not a number"),
    ({"q": [1], "source": ENG, "target": DEU}, 400, "list of texts"),
])
def test_errors_are_libretranslates(nllb, body, status, says):
    reply = post(nllb[0], **body)
    assert reply.status_code == status and says in reply.json()["error"], reply.text
    assert list(reply.json()) == ["error"]


@pytest.mark.parametrize("content, kind, says", [
    (b"{not json", "application/json", "Invalid JSON"),
    (b"[1]", "application/json", "Invalid JSON"),
    (b"--x\r\n", "multipart/form-data; boundary=x", "x-www-form-urlencoded, not multipart"),
])
def test_bodies_that_are_neither_json_nor_a_form_are_a_400(nllb, content, kind, says):
    reply = httpx.post(f"{nllb[0]}/translate", content=content, headers={"content-type": kind})
    assert reply.status_code == 400 and says in reply.json()["error"], reply.text


def test_a_single_pair_model(pair):
    url, model = pair
    client = libretranslatepy.LibreTranslateAPI(url)
    assert client.languages() == [{"code": "de", "name": "de", "targets": []},
                                  {"code": "en", "name": "en", "targets": ["de"]}]
    text = "the house a small cat"
    assert client.translate(text, "en", "de") == model.translate([text])[0]
    auto = post(url, q=text, source="auto", target="de").json()
    assert auto["detectedLanguage"] == {"confidence": 100.0, "language": "en"}  # its one source language
    assert post(url, q=text, source="en", target="fr").status_code == 400
    assert post(url, q=text, source="fr", target="de").status_code == 400


def test_a_model_without_codes_lists_none_and_takes_any(plain):
    url, model = plain
    client = libretranslatepy.LibreTranslateAPI(url)
    assert client.languages() == []
    assert client.translate("4718", "en", "es") == model.translate(["4718"])[0]  # the codes are not checked
    assert post(url, q="12", source="auto", target="de").json()["detectedLanguage"] == {
        "confidence": 0.0, "language": "und"}
    reply = httpx.post(f"{url}/v1/translate", json={"texts": ["12"], "target_lang": "de"})
    assert reply.status_code == 422 and "no language codes" in reply.json()["error"]


def test_the_api_key_in_the_body_or_the_header(chars_export):
    with serving(ServeSettings(str(chars_export), api_key="s3cret")) as (url, _):
        assert libretranslatepy.LibreTranslateAPI(url, api_key="s3cret").translate("12", "en", "de")
        with pytest.raises(urllib.error.HTTPError) as refused:
            libretranslatepy.LibreTranslateAPI(url, api_key="nope").translate("12", "en", "de")
        assert refused.value.code == 403 and json.loads(refused.value.read()) == {"error": "Invalid API key"}
        assert post(url, q="12", source="en", target="de").status_code == 403
        bearer = httpx.post(f"{url}/translate", json={"q": "12", "source": "en", "target": "de"},
                            headers={"Authorization": "Bearer s3cret"})
        assert bearer.status_code == 200
        assert libretranslatepy.LibreTranslateAPI(url).languages() == []  # open, as LibreTranslate's
        assert httpx.post(f"{url}/v1/translate", json={"texts": ["12"], "api_key": "s3cret"}).status_code == 401


def test_a_full_queue_is_429_with_retry_after(chars_export):
    settings = ServeSettings(str(chars_export), engine=EngineConfig(max_batch=1, max_queue=2), max_texts=8)
    with serving(settings) as (url, _):
        reply = post(url, q=["1", "2", "3"], source="en", target="de")
    assert reply.status_code == 429 and reply.headers["Retry-After"] == "1"
    assert reply.json()["error"].startswith("Slowdown:")


@pytest.fixture(scope="module")
def wide(chars_export):
    """A server taking 32 texts per request and 40 decoder rows; its engine and the runtime's model."""
    with serving(ServeSettings(str(chars_export), max_texts=32, max_rows=40)) as (url, engine):
        yield url, engine, open_export(chars_export, "cpu")


def test_empty_texts_are_translated_into_empty_texts_without_decoding(wide, monkeypatch):
    url, engine, model = wide
    submitted = []
    monkeypatch.setattr(engine, "submit", lambda jobs, submit=engine.submit: (submitted.append(jobs), submit(jobs)))
    tokens = engine.tokens_total
    reply = post(url, q=[""] * 31, source="en", target="de")
    assert reply.status_code == 200 and reply.json() == {"translatedText": [""] * 31}, reply.text
    reply = post(url, q=[""] * 3, source="auto", target="de", alternatives=2)
    assert reply.json()["translatedText"] == [""] * 3 and reply.json()["alternatives"] == [[]] * 3, reply.text
    native = httpx.post(f"{url}/v1/translate", json={"texts": ["", ""], "num_beams": 2, "num_return_sequences": 2})
    assert native.json() == {"translations": [{"ids": [], "text": "", "hypotheses": [{"ids": [], "text": ""}] * 2}] * 2}
    streamed = httpx.post(f"{url}/v1/translate", json={"texts": [""], "stream": True}).text
    assert "event: token" not in streamed
    assert 'event: done\ndata: {"translations": [{"ids": [], "text": ""}]}' in streamed
    assert submitted == [] and engine.tokens_total == tokens  # nothing decoded: the engine saw no job
    # with other texts, those are decoded (and equal the runtime's translations), the empty ones not
    reply = post(url, q=["", "4718", ""], source="en", target="de")
    assert reply.json() == {"translatedText": ["", model.translate(["4718"])[0], ""]}
    assert [len(jobs) for jobs in submitted] == [1] and engine.tokens_total > tokens


def test_the_rows_of_a_request_are_bounded(wide):
    url = wide[0]
    assert post(url, q=["12"] * 13, source="en", target="de", alternatives=2).status_code == 200  # 39 rows
    reply = post(url, q=["12"] * 14, source="en", target="de", alternatives=2)  # 14 x 3 beams = 42 rows
    assert reply.status_code == 400 and list(reply.json()) == ["error"], reply.text
    assert "42 decoder rows exceed the limit of 40" in reply.json()["error"] and "--max-rows" in reply.json()["error"]
    reply = httpx.post(f"{url}/v1/translate", json={"texts": ["12"] * 11, "num_beams": 4})
    assert reply.status_code == 413 and reply.json()["limit"] == "max_rows", reply.text
    assert reply.json()["error"].startswith("11 sources x 4 rows each (num_beams, num_return_sequences) = 44 "
                                            "decoder rows exceed the limit of 40 per request (max_rows")
    body = httpx.get(f"{url}/openapi.json").json()["paths"]["/translate"]["post"]["requestBody"]
    caps = {branch["properties"]["alternatives"]["const"]: branch["properties"]["q"]["maxItems"]
            for branch in body["content"]["application/json"]["schema"]["anyOf"]}
    assert caps == {0: 32, 1: 20, 2: 13, 3: 10, 4: 8, 5: 6, 6: 5, 7: 5}  # 40 rows // (alternatives + 1)


def test_texts_are_translated_sentence_by_sentence_as_libretranslate_does(nllb):
    url, model = nllb
    one = lambda s: model.translate([s], source_lang=ENG, target_lang=DEU)[0]  # noqa: E731
    client = libretranslatepy.LibreTranslateAPI(url)
    assert client.translate("4718. 12.\n\n905.", ENG, DEU) == f"{one('4718.')} {one('12.')}\n\n{one('905.')}"
    assert one("4718. 12.") == one("4718.")  # whole, the model drops the second sentence
    # a source over max_len is cut at the limit and translated, not refused
    reply = post(url, q="1 " * 1100, source=ENG, target=DEU)
    assert reply.status_code == 200 and len(reply.json()["translatedText"].split()) >= 3, reply.text
