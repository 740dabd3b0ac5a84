"""One server, several exports (serve.registry, serve.multi): three single-pair Marian exports (fr -> en and
en -> de, two models of their own, and en -> es, a copy of en -> de whose manifest names another target)
behind one app. A request picks its export by `model` or by its languages; a pair without an export of its
own goes through English and equals translating twice by hand; /languages and /v1/models list everything;
engines open on first use and close when idle or beyond --max-loaded, and open again."""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import shutil
import threading
import time
import weakref

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from fastapi.testclient import TestClient  # noqa: E402
from helpers import free_port, run_cli, serving  # noqa: E402

from tfm_export.export.exporter import ExportOptions, export_model  # noqa: E402
from tfm_export.importers import load_model  # noqa: E402
from tfm_export.importers.hub import local_origin  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.catalog import export_folders, serves_several  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402
from tfm_export.serve.multi import create_multi_app  # noqa: E402
from tfm_export.serve.registry import ModelRegistry  # noqa: E402

FRENCH = ["la maison", "un petit chat", "les arbres verts", "nous mangeons du pain"]
ENGLISH = ["the house", "a small cat", "green trees grow", "we eat bread"]
GERMAN = ["das Haus", "eine Katze", "grüne Bäume"]
TEXTS = ["la maison un petit chat", "nous mangeons", "les arbres verts du pain"]
FR_EN, EN_DE, EN_ES = "opus-fr-en", "opus-en-de", "opus-en-es"
STEPS = 6


def marian_export(root, name: str, sources: list[str], targets: list[str], pair: tuple[str, str], seed: int,
                  **options):
    """A single-pair Marian folder (its tokenizer_config names the pair), exported to root/name."""
    from marian_fixtures import pair_folder

    folder = pair_folder(root / f"{name}-hf", sources, targets, pair, seed)
    out = root / name
    export_model(load_model(folder, origin=local_origin(folder)), out, ExportOptions(validate=False, **options))
    return out


def relabelled(folder, out, pair: tuple[str, str]):
    """A copy of the export in `folder` whose manifest names another language pair."""
    shutil.copytree(folder, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["languages"]["pair"]
    manifest["tokenizer"]["languages"]["pair"] = list(pair)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A folder of three exports (request-level batching; test_an_inflight_export_beside_others has in-flight)."""
    root = tmp_path_factory.mktemp("several")
    hub = root / "hub"
    hub.mkdir()
    fr_en = marian_export(root, FR_EN, FRENCH, ENGLISH, ("fr", "en"), seed=5)
    en_de = marian_export(root, EN_DE, ENGLISH, GERMAN, ("en", "de"), seed=6)
    for export in (fr_en, en_de):
        shutil.move(export, hub / export.name)
    relabelled(hub / EN_DE, hub / EN_ES, ("en", "es"))
    return hub


@pytest.fixture(scope="module")
def models(exports):
    return {name: open_export(exports / name, "cpu") for name in (FR_EN, EN_DE, EN_ES)}


def settings_of(exports) -> ServeSettings:
    return ServeSettings(str(exports / FR_EN), engine=EngineConfig(max_batch=4), max_texts=8)


def registry_of(exports, **unloading) -> ModelRegistry:
    return ModelRegistry(settings_of(exports), export_folders([exports]), **unloading)


@pytest.fixture(scope="module")
def server(exports):
    """The three exports on one real server (uvicorn on a free loopback port), for clients over HTTP."""
    registry = registry_of(exports)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_multi_app(settings_of(exports), registry), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped before it started"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", registry
    server.should_exit = True
    thread.join(30)


def native(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/translate", json=body, timeout=120)


def texts_of(reply: httpx.Response) -> list[str]:
    assert reply.status_code == 200, reply.text
    return [row["text"] for row in reply.json()["translations"]]


def libre(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/translate", json=body, timeout=120)


def test_a_folder_of_exports_serves_each_of_them(exports, tmp_path):
    assert serves_several([exports]) and not serves_several([exports / EN_DE])
    assert [p.split("/")[-1] for p in export_folders([exports])] == [EN_DE, EN_ES, FR_EN]
    assert not serves_several([tmp_path])
    reply = run_cli("serve", tmp_path, exports / EN_DE, "--port", free_port())
    assert reply.exit_code == 1 and "neither an export folder nor a folder of exports" in reply.output, reply.output
    assert "Traceback" not in reply.output and len(reply.output.strip().splitlines()) == 1
    reply = run_cli("serve", exports, "--ray")
    assert reply.exit_code == 2 and "--ray and --write-config serve one export" in reply.output


def test_v1_models_lists_every_export(server):
    url, registry = server
    listed = httpx.get(f"{url}/v1/models").json()
    assert [card["id"] for card in listed["data"]] == [EN_DE, EN_ES, FR_EN]
    assert httpx.get(f"{url}/v1/models/{FR_EN}").json()["id"] == FR_EN
    assert httpx.get(f"{url}/v1/models/{FR_EN}-hf").json()["id"] == FR_EN  # the folder it was exported from
    missing = httpx.get(f"{url}/v1/models/opus-xx")
    assert missing.status_code == 404 and "opus-xx" in missing.json()["error"] and FR_EN in missing.json()["error"]


def test_model_picks_the_export(server, models):
    url, _ = server
    for name in (FR_EN, EN_DE):
        assert texts_of(native(url, model=name, texts=TEXTS)) == models[name].translate(TEXTS), name
    assert models[FR_EN].translate(TEXTS) != models[EN_DE].translate(TEXTS)  # two models, two answers
    # streamed from the export named, its engine held to the last event and released after
    events = httpx.post(f"{url}/v1/translate", json={"model": EN_DE, "texts": TEXTS[:1], "stream": True}, timeout=120)
    done = json.loads(events.text.split("event: done\ndata: ")[1].split("\n")[0])
    assert done["translations"][0]["text"] == models[EN_DE].translate(TEXTS[:1])[0]


def test_languages_pick_the_export(server, models):
    url, registry = server
    for (source, target), name in ((("fr", "en"), FR_EN), (("en", "de"), EN_DE), (("en", "es"), EN_ES)):
        expected = models[name].translate(TEXTS)
        assert texts_of(native(url, texts=TEXTS, source_lang=source, target_lang=target)) == expected
        reply = libre(url, q=TEXTS, source=source, target=target)
        assert reply.json() == {"translatedText": expected}, reply.text
    assert all(not slot.users for slot in registry.slots.values())  # every lease ended


def test_a_pivot_equals_translating_twice_by_hand(server, models):
    url, _ = server
    # a random model's long output would be over the second's source limit (a 413): a few tokens per leg
    english = models[FR_EN].translate(TEXTS, max_new_tokens=STEPS)
    expected = models[EN_DE].translate(english, max_new_tokens=STEPS)  # by hand, with the runtime
    reply = native(url, texts=TEXTS, source_lang="fr", target_lang="de", max_new_tokens=STEPS)
    assert texts_of(reply) == expected
    # by hand through the server: each export named
    middle = texts_of(native(url, model=FR_EN, texts=TEXTS, max_new_tokens=STEPS))
    assert middle == english and texts_of(native(url, model=EN_DE, texts=middle, max_new_tokens=STEPS)) == expected
    english, expected = models[FR_EN].translate(TEXTS), models[EN_DE].translate(models[FR_EN].translate(TEXTS))
    # LibreTranslate's route, through the same exports, and twice by hand there
    pivoted = libre(url, q=TEXTS, source="fr", target="de").json()["translatedText"]
    by_hand = libre(url, q=libre(url, q=TEXTS, source="fr", target="en").json()["translatedText"],
                    source="en", target="de").json()["translatedText"]
    assert pivoted == by_hand == expected
    # n-best at the second leg: its best is the pivot's answer
    reply = libre(url, q=TEXTS[0], source="fr", target="es", alternatives=2).json()
    assert reply["translatedText"] == models[EN_ES].translate(english[:1])[0]
    assert isinstance(reply["alternatives"], list)
    # "auto": French detected among the sources that reach de (fr through en, en directly)
    reply = libre(url, q=TEXTS, source="auto", target="de").json()
    assert reply == {"translatedText": expected, "detectedLanguage": [{"confidence": reply["detectedLanguage"][0][
        "confidence"], "language": "fr"}] * len(TEXTS)}, reply
    reply = libre(url, q="the house a small cat", source="auto", target="de").json()
    assert reply["detectedLanguage"]["language"] == "en"
    assert reply["translatedText"] == models[EN_DE].translate(["the house a small cat"])[0]


def test_languages_lists_every_pair_with_pivots(server):
    url, registry = server
    assert httpx.get(f"{url}/languages").json() == [
        {"code": "de", "name": "de", "targets": []},
        {"code": "en", "name": "en", "targets": ["de", "es"]},
        {"code": "es", "name": "es", "targets": []},
        {"code": "fr", "name": "fr", "targets": ["de", "en", "es"]},  # de, es through en
    ]
    for entry in registry.languages():  # each pair it lists is one the server routes
        for target in entry["targets"]:
            assert registry.route(entry["code"], target)


def test_libretranslatepy_against_several_exports(server, models):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    url, _ = server
    client = libretranslatepy.LibreTranslateAPI(url)
    assert client.translate(TEXTS[0], "fr", "es") == models[EN_ES].translate(models[FR_EN].translate(TEXTS[:1]))[0]
    assert client.translate(TEXTS[1], "en", "de") == models[EN_DE].translate(TEXTS[1:2])[0]
    assert [entry["code"] for entry in client.languages()] == ["de", "en", "es", "fr"]


@pytest.mark.parametrize("body, field, says", [
    ({"model": "opus-xx", "texts": ["a"]}, "model", ["opus-xx", FR_EN, EN_DE]),
    ({"texts": ["a"], "source_lang": "de", "target_lang": "fr"}, "target_lang", ["'de'", "'fr'", "GET /languages"]),
    ({"texts": ["a"]}, "model", ["3 exports", "GET /v1/models"]),
    ({"ids": [[5, 6]], "source_lang": "fr", "target_lang": "de"}, "ids", ["through 'en'"]),
    ({"texts": ["a"], "source_lang": "fr", "target_lang": "de", "stream": True}, "stream", ["not streamed"]),
    ({"model": FR_EN, "texts": ["a"], "target_lang": "de"}, "target_lang", ["'de'", "only 'en'"]),
])
def test_what_no_export_serves_is_a_4xx_naming_it(server, body, field, says):
    url, _ = server
    reply = native(url, **body)
    assert reply.status_code == 422, reply.text
    error = reply.json()
    assert field in (error.get("field"), *(error.get("fields") or [])) and all(s in error["error"] for s in says), error


def test_libretranslate_errors_name_the_pair(server):
    url, _ = server
    reply = libre(url, q="la maison", source="de", target="fr")
    assert reply.status_code == 400 and "'de'" in reply.json()["error"] and "'fr'" in reply.json()["error"]
    reply = libre(url, q="la maison", source="fr", target="de", model="opus-xx")
    assert reply.status_code == 400 and "opus-xx" in reply.json()["error"]
    assert libre(url, q="x", target="de").json() == {"error": "Invalid request: missing source parameter"}


def wait_for(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_idle_export_is_closed_and_opens_again(exports, models):
    registry = registry_of(exports, idle_unload=0.3)
    expected = models[EN_DE].translate(TEXTS)
    with TestClient(create_multi_app(settings_of(exports), registry)) as client:
        assert client.get("/healthz").json()["loaded"] == []  # nothing opened before a request needs it
        reply = client.post("/v1/translate", json={"model": EN_DE, "texts": TEXTS})
        assert [row["text"] for row in reply.json()["translations"]] == expected
        slot = registry.slots[EN_DE]
        engine = weakref.ref(slot.engine)
        thread = engine()._thread
        assert client.get("/healthz").json()["loaded"] == [EN_DE] and thread.is_alive()
        wait_for(lambda: client.get("/healthz").json()["loaded"] == [])
        gc.collect()
        assert engine() is None and not thread.is_alive()  # closed and let go: its sessions freed
        reply = client.post("/v1/translate", json={"model": EN_DE, "texts": TEXTS})
        assert [row["text"] for row in reply.json()["translations"]] == expected and slot.loads == 2
        assert "tfm_export_tokens_total" in client.get("/metrics").text
    assert registry.loaded() == []  # the lifespan closed what was open


def test_max_loaded_closes_the_least_recently_used(exports, models):
    registry = registry_of(exports, max_loaded=1)
    with TestClient(create_multi_app(settings_of(exports), registry)) as client:
        client.post("/v1/translate", json={"model": EN_DE, "texts": TEXTS[:1]})
        client.post("/v1/translate", json={"model": FR_EN, "texts": TEXTS[:1]})
        assert registry.loaded() == [FR_EN]
        # a pivot with room for one engine: each leg opens its export in turn
        reply = client.post("/translate", json={"q": TEXTS, "source": "fr", "target": "de"})
        assert reply.json()["translatedText"] == models[EN_DE].translate(models[FR_EN].translate(TEXTS))
        assert registry.loaded() == [EN_DE] and registry.slots[EN_DE].loads == 2


def test_an_inflight_export_beside_others(exports, static_export, serial, models):
    """The session's static-cache export (ids only, no codes: chosen by model) with its in-flight engine, beside a
    request-level one, each answering as alone."""
    registry = ModelRegistry(settings_of(exports), [str(static_export), str(exports / FR_EN)])
    with TestClient(create_multi_app(settings_of(exports), registry)) as client:
        reply = client.post("/v1/translate", json={"model": static_export.name, "ids": [[5, 6, 7]], "max_new_tokens": 8})
        assert reply.json()["translations"][0]["ids"] == serial([5, 6, 7], 8)
        reply = client.post("/v1/translate", json={"model": FR_EN, "texts": TEXTS})
        assert [row["text"] for row in reply.json()["translations"]] == models[FR_EN].translate(TEXTS)
        engines = {name: slot.engine.name for name, slot in registry.slots.items()}
        assert engines == {static_export.name: "inflight", FR_EN: "request"}
        # prompt lookup in its rows: /metrics counts it as the export's own server would, and keeps the count
        # once the engine is closed (a counter never goes down)
        ids = [5, 6, 7, 5, 6, 7, 5, 6]
        reply = client.post("/v1/translate", json={"model": static_export.name, "ids": [ids], "max_new_tokens": 8,
                                                   "prompt_lookup_num_tokens": 3})
        assert reply.json()["translations"][0]["ids"] == serial(ids, 8)
        spec = registry.slots[static_export.name].engine.batch.speculation
        assert spec.calls > 0
        drafted = f"tfm_export_speculative_drafted_total {float(spec.drafted)}"
        assert drafted in client.get("/metrics").text
        assert client.portal.call(registry.unload, registry.slots[static_export.name])
        assert drafted in client.get("/metrics").text
        assert client.get("/languages").json() == [{"code": "en", "name": "en", "targets": []},
                                                   {"code": "fr", "name": "fr", "targets": ["en"]}]


def test_one_exports_server_takes_its_own_name_only(exports, models):
    with serving(ServeSettings(str(exports / EN_DE))) as (url, _):
        assert texts_of(native(url, model=EN_DE, texts=TEXTS)) == models[EN_DE].translate(TEXTS)
        reply = native(url, model=FR_EN, texts=TEXTS)
        assert reply.status_code == 422 and reply.json()["field"] == "model" and EN_DE in reply.json()["error"]
        schema = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]["TranslateRequest"]
        assert schema["properties"]["model"]["anyOf"][0]["enum"] == [EN_DE]


# LibreTranslate's other routes (serve.libretranslate_routes over serve.libretranslate_served.registry_served)
NOTE = "la maison. un petit chat.\n\nnous mangeons du pain les arbres verts.\n"
PAGE = "<html><body><h1>la maison</h1>\n<p>un petit chat. <b>les arbres verts</b></p></body></html>\n"


def by_hand(models, names, text: str, form: str) -> str:
    """`text` through the exports `names` one after the other, with the runtime (a document per leg)."""
    for name in names:
        text = models[name].translate([text], split_sentences=True, format=form)[0]
    return text


def upload(url: str, name: str, data: str, **fields) -> httpx.Response:
    reply = httpx.post(f"{url}/translate_file", data=fields, files={"file": (name, data.encode())}, timeout=120)
    assert reply.status_code == 200 and list(reply.json()) == ["translatedFileUrl"], reply.text
    download = httpx.get(reply.json()["translatedFileUrl"], timeout=30)
    assert download.status_code == 200 and f'filename="{name}"' in download.headers["content-disposition"]
    return download


def test_detect_among_every_exports_sources(server):
    pytest.importorskip("py3langid")
    libretranslatepy = pytest.importorskip("libretranslatepy")
    url, _ = server
    client = libretranslatepy.LibreTranslateAPI(url)
    found = client.detect("nous mangeons du pain avec les enfants dans la maison")
    assert found[0]["language"] == "fr" and found[0]["confidence"] > 50, found
    assert client.detect("the house is small and we eat bread with the children")[0]["language"] == "en"
    # only the codes some export translates from: German is a target only here
    assert {entry["language"] for entry in client.detect("das Haus ist sehr schön und der Garten auch")} <= {"en", "fr"}
    assert client.detect("12345") == [{"confidence": 0.0, "language": "en"}]  # nothing tells: the pivot's code
    reply = httpx.post(f"{url}/detect", json={"q": ""})
    assert reply.status_code == 400 and reply.json() == {"error": "Invalid request: missing q parameter"}


@pytest.mark.parametrize("name, form", [("notes.txt", "text"), ("page.html", "html")])
def test_a_file_is_translated_through_the_pivot(server, models, name, form):
    url, registry = server
    data = {"text": NOTE, "html": PAGE}[form]
    expected = by_hand(models, [FR_EN, EN_DE], data, form)
    assert expected != by_hand(models, [EN_DE], data, form) and expected.strip()  # the two legs, not one
    assert upload(url, name, data, source="fr", target="de").content.decode() == expected
    assert upload(url, name, data, source="auto", target="de").content.decode() == expected  # French detected
    assert upload(url, name, data, source="en", target="es", model=EN_ES).content.decode() == \
        by_hand(models, [EN_ES], data, form)
    assert all(not slot.users for slot in registry.slots.values())  # every lease ended


def test_translate_file_errors_name_the_pair(server):
    url, _ = server
    for fields, says in (({"source": "de", "target": "fr"}, ["'de'", "'fr'"]), ({"source": "fr"}, ["missing target"]),
                         ({"source": "fr", "target": "de", "model": "opus-xx"}, ["opus-xx", FR_EN]),
                         ({"source": "auto", "target": "fr"}, ["'fr'", "GET /languages"])):
        reply = httpx.post(f"{url}/translate_file", data=fields, files={"file": ("a.txt", b"la maison")}, timeout=60)
        assert reply.status_code == 400 and all(s in reply.json()["error"] for s in says), (fields, reply.text)


def test_frontend_settings_list_what_the_server_has(server):
    url, _ = server
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "de", "name": "de"}}  # the first target not the pivot
    assert {".txt", ".html", ".md"} <= set(settings["supportedFilesFormat"]) and settings["filesTranslation"]
    assert settings["keyRequired"] is False and settings["charLimit"] == -1
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {"/detect", "/translate_file", "/frontend/settings"} <= set(paths)


def test_the_key_guards_the_other_routes_too(exports):
    pytest.importorskip("py3langid")
    settings = dataclasses.replace(settings_of(exports), api_key="s3cret")
    with TestClient(create_multi_app(settings, registry_of(exports))) as client:
        text = {"q": "nous mangeons du pain avec les enfants"}
        assert client.post("/detect", data=text).json() == {"error": "Missing API key: send api_key or "
                                                                     "Authorization: Bearer KEY"}
        assert client.post("/detect", data={**text, "api_key": "s3cret"}).json()[0]["language"] == "fr"
        refused = client.post("/translate_file", data={"source": "fr", "target": "de", "api_key": "nope"},
                              files={"file": ("a.txt", b"la maison")})
        assert refused.status_code == 403 and refused.json() == {"error": "Invalid API key"}
        assert client.get("/frontend/settings").json()["keyRequired"] is True


def test_a_word_document_through_the_pivot_equals_two_uploads(server):
    docx = pytest.importorskip("docx")
    url, _ = server
    document = docx.Document()
    document.add_paragraph("la maison. ").add_run("un petit chat.").bold = True
    data = io.BytesIO()
    document.save(data)

    def sent(data: bytes, source: str, target: str) -> bytes:
        reply = httpx.post(f"{url}/translate_file", data={"source": source, "target": target},
                           files={"file": ("report.docx", data)}, timeout=120)
        assert reply.status_code == 200, reply.text
        return httpx.get(reply.json()["translatedFileUrl"], timeout=30).content

    def runs(data: bytes) -> list[tuple[str, bool | None]]:
        return [(run.text, run.bold) for p in docx.Document(io.BytesIO(data)).paragraphs for run in p.runs]

    pivoted, by_hand = sent(data.getvalue(), "fr", "de"), sent(sent(data.getvalue(), "fr", "en"), "en", "de")
    assert runs(pivoted) == runs(by_hand) and runs(pivoted)[-1][1] is True  # the bold run carried through both
    assert runs(pivoted) != runs(sent(data.getvalue(), "en", "de"))


def test_ctranslate2_routes_pick_their_export(server, models):
    """/v1/score and /v1/translate's target_prefix on a server of several exports: the contract of one export's
    server (in /openapi.json, `model` naming every export), each request on the export its languages or `model`
    pick, answering what that export's Python API does; a pivot's prefix is the second leg's."""
    url, _ = server
    schema = httpx.get(f"{url}/openapi.json").json()
    assert "/v1/score" in schema["paths"]
    components = schema["components"]["schemas"]
    assert {"target_prefix", "return_alternatives"} <= set(components["TranslateRequest"]["properties"])
    assert set(components["ScoreRequest"]["properties"]["model"]["anyOf"][0]["enum"]) >= {FR_EN, EN_DE, EN_ES}
    reply = httpx.post(f"{url}/v1/score", json={"texts": FRENCH[:2], "targets": ENGLISH[:2], "source_lang": "fr",
                                                "target_lang": "en"}, timeout=120)
    assert reply.status_code == 200, reply.text
    want = models[FR_EN].score(FRENCH[:2], ENGLISH[:2])
    assert [s["tokens"] for s in reply.json()["scores"]] == [w.tokens for w in want]
    assert [s["score"] for s in reply.json()["scores"]] == pytest.approx([w.score for w in want])
    reply = httpx.post(f"{url}/v1/score", json={"model": EN_DE, "texts": ENGLISH[:1], "targets": GERMAN[:1]})
    assert reply.json()["scores"][0]["tokens"] == models[EN_DE].score(ENGLISH[:1], GERMAN[:1])[0].tokens
    reply = httpx.post(f"{url}/v1/score", json={"texts": FRENCH[:1], "targets": GERMAN[:1], "source_lang": "fr",
                                                "target_lang": "de"})
    assert reply.status_code == 422 and reply.json()["field"] == "target_lang", reply.text
    prefix = ["das", ""]
    direct = models[EN_DE].translate(ENGLISH[:2], target_prefix=prefix, max_new_tokens=STEPS)
    assert texts_of(native(url, texts=ENGLISH[:2], source_lang="en", target_lang="de", target_prefix=prefix,
                           max_new_tokens=STEPS)) == direct
    middle = models[FR_EN].translate(FRENCH[:2], max_new_tokens=STEPS)
    pivoted = models[EN_DE].translate(middle, target_prefix=prefix, max_new_tokens=STEPS)
    assert texts_of(native(url, texts=FRENCH[:2], source_lang="fr", target_lang="de", target_prefix=prefix,
                           max_new_tokens=STEPS)) == pivoted
