"""Documents on LibreTranslate's API: format=html and markdown on /translate (the markup kept, the text nodes
translated as the library translates them), /detect and source "auto" (py3langid among the model's codes),
/translate_file with its download (.txt, .html, .md, .docx), /frontend/settings; LibreTranslate's shapes,
its client (libretranslatepy) and its errors ({"error"}, 400). Also the library's translate(format=...) and
`generate --input page.html`. On the trained NLLB fixture (numbers in digits -> English or German words)."""

from __future__ import annotations

import io
import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
libretranslatepy = pytest.importorskip("libretranslatepy")
pytest.importorskip("py3langid")

from helpers import run_cli, serving  # noqa: E402

from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402
from tfm_export.text import markup  # noqa: E402
from tfm_export.text.markup_html import Events  # noqa: E402

ENG, DEU = "eng_Latn", "deu_Latn"
PAGE = ('<!DOCTYPE html>\n<html><head><title>12</title><style>p { margin: 0 }</style></head>\n<body class="b">\n'
        '  <!-- 345 stays -->\n  <h1 id="h">4718</h1>\n  <p title="77">905. <b>12.</b></p>\n'
        '  <pre>  33 </pre><p>Run <code>7</code></p>\n  <ul><li>21</li><li>8</li></ul>\n</body></html>\n')
MARKDOWN = "# 4718\n\n**12.** 905. [21.](http://x.org/77)\n\n```\n33\n```\n\n| 21 | 8 |\n|---|---|\n| 5 | 6 |\n"


@pytest.fixture(scope="module")
def nllb(trained_export, tmp_path_factory):
    out = trained_export("nllb")
    settings = ServeSettings(str(out), max_texts=4, upload_dir=str(tmp_path_factory.mktemp("uploads")))
    with serving(settings) as (url, _):
        yield url, open_export(out, "cpu")


def expected(model, sources, form):
    """The library's translation, as the server should give it."""
    return model.translate(sources, source_lang=ENG, target_lang=DEU, format=form)


def tags(source: str) -> list[str]:
    parser = Events(source)
    parser.feed(source)
    parser.close()
    starts = [start for start, *_ in parser.events] + [len(source)]
    return [source[a:b] for (a, kind, *_), b in zip(parser.events, starts[1:]) if kind != "data"]


def test_html_is_translated_with_its_markup_kept(nllb):
    url, model = nllb
    one = lambda text: model.translate([text], source_lang=ENG, target_lang=DEU)[0]  # noqa: E731
    reply = httpx.post(f"{url}/translate", json={"q": PAGE, "source": ENG, "target": DEU, "format": "html"})
    assert reply.status_code == 200, reply.text
    got = reply.json()["translatedText"]
    assert got == expected(model, [PAGE], "html")[0]
    assert tags(got) == tags(PAGE)  # every tag, attribute, comment and the doctype, byte for byte
    for kept in ("<pre>  33 </pre>", "<code>7</code>", "<style>p { margin: 0 }</style>", 'title="77"'):
        assert kept in got
    for text in ("4718", "21", "8", "12"):  # every text node translated, the title's too
        assert f">{one(text)}<" in got, (text, got)
    # the bold sentence carried to its words (the sentences of a block are translated one by one, so a
    # sentence's translation is in its block's)
    assert f"<p title=\"77\">{one('905.')} <b>{one('12.')}</b></p>" in got
    # a form (libretranslatepy's way of posting), a batch, and markdown
    form = httpx.post(f"{url}/translate", data={"q": PAGE, "source": ENG, "target": DEU, "format": "html"})
    assert form.json() == reply.json()
    batch = httpx.post(f"{url}/translate", json={"q": [PAGE, MARKDOWN], "source": ENG, "target": DEU,
                                                 "format": "markdown", "alternatives": 2}).json()
    assert batch["translatedText"] == expected(model, [PAGE, MARKDOWN], "markdown")
    assert batch["alternatives"] == [[], []]  # as LibreTranslate's html: no alternatives for markup
    md = batch["translatedText"][1]
    assert f"**{one('12.')}** {one('905.')} [{one('21.')}](http://x.org/77)" in md
    assert "```\n33\n```" in md and "|---|---|" in md


def test_detect_answers_libretranslates_shape_among_the_models_codes(nllb):
    url, _ = nllb
    client = libretranslatepy.LibreTranslateAPI(url)
    found = client.detect("Bonjour tout le monde, comment allez-vous aujourd'hui ?")
    assert found[0]["language"] == "fra_Latn" and found[0]["confidence"] > 90, found
    assert all(set(entry) == {"language", "confidence"} for entry in found) and len(found) <= 3
    german = httpx.post(f"{url}/detect", json={"q": "Das Haus ist sehr schön und der Garten auch."}).json()
    assert german[0]["language"] == DEU
    assert httpx.post(f"{url}/detect", json={"q": "12345"}).json() == [{"confidence": 0.0, "language": ENG}]
    for body, says in (({}, "missing q"), ({"q": ""}, "missing q"), ({"q": ["a"]}, "must be a text")):
        reply = httpx.post(f"{url}/detect", json=body)
        assert reply.status_code == 400 and says in reply.json()["error"], reply.text


def test_source_auto_detects_the_language(nllb):
    url, model = nllb
    text = "Das Haus ist sehr schön und der Garten auch."
    reply = httpx.post(f"{url}/translate", json={"q": text, "source": "auto", "target": ENG}).json()
    assert reply["detectedLanguage"]["language"] == DEU and reply["detectedLanguage"]["confidence"] > 90
    assert reply["translatedText"] == model.translate([text], source_lang=DEU, target_lang=ENG, split_sentences=True)[0]
    html = httpx.post(f"{url}/translate", json={"q": f"<p>{text}</p>", "source": "auto", "target": ENG,
                                                "format": "html"}).json()
    assert html["detectedLanguage"]["language"] == DEU  # the text nodes are read, not the tags


def test_frontend_settings_are_libretranslates(nllb):
    settings = httpx.get(f"{nllb[0]}/frontend/settings").json()
    assert set(settings) == {"charLimit", "frontendTimeout", "apiKeys", "keyRequired", "suggestions",
                             "filesTranslation", "supportedFilesFormat", "language"}
    assert settings["charLimit"] == -1 and settings["keyRequired"] is False and settings["filesTranslation"]
    assert {".txt", ".html", ".md", ".docx"} <= set(settings["supportedFilesFormat"])
    assert settings["language"]["source"] == {"code": "auto", "name": "Auto Detect"}
    assert settings["language"]["target"]["code"] in [entry["code"] for entry in httpx.get(f"{nllb[0]}/languages").json()]


def translate_file(url, name, data, **fields):
    fields = {"source": ENG, "target": DEU, **fields}
    return httpx.post(f"{url}/translate_file", data=fields, files={"file": (name, data)}, timeout=60)


@pytest.mark.parametrize("name, form", [("notes.txt", "text"), ("page.html", "html"), ("README.md", "markdown")])
def test_a_file_is_translated_and_downloaded(nllb, name, form):
    url, model = nllb
    source = {"text": "4718. 12.\n\n905.\n", "html": PAGE, "markdown": MARKDOWN}[form]
    reply = translate_file(url, name, source.encode())
    assert reply.status_code == 200 and list(reply.json()) == ["translatedFileUrl"], reply.text
    download = httpx.get(reply.json()["translatedFileUrl"])
    assert download.status_code == 200
    assert f'filename="{name}"' in download.headers["content-disposition"]  # the upload's name, as LibreTranslate's
    if form == "text":
        assert download.text == model.translate([source], source_lang=ENG, target_lang=DEU, split_sentences=True)[0]
    else:
        assert download.text == expected(model, [source], form)[0]


def test_a_word_document_keeps_its_formatting(nllb):
    docx = pytest.importorskip("docx")
    url, model = nllb
    one = lambda text: model.translate([text], source_lang=ENG, target_lang=DEU)[0]  # noqa: E731
    document = docx.Document()
    paragraph = document.add_paragraph("905. ")
    paragraph.add_run("12.").bold = True
    document.add_paragraph("4718", style="Heading 1")
    document.add_table(rows=1, cols=2).cell(0, 1).text = "21"
    data = io.BytesIO()
    document.save(data)
    reply = translate_file(url, "report.docx", data.getvalue())
    assert reply.status_code == 200, reply.text
    translated = docx.Document(io.BytesIO(httpx.get(reply.json()["translatedFileUrl"]).content))
    first, heading = translated.paragraphs[:2]
    assert [(run.text, run.bold) for run in first.runs] == [(f"{one('905.')} ", None), (one("12."), True)]
    assert heading.text == one("4718") and heading.style.name == "Heading 1"
    assert translated.tables[0].cell(0, 1).text == one("21")


@pytest.mark.parametrize("send, says", [
    ({"name": "slides.pdf", "data": b"%PDF"}, "file format not supported"),
    ({"name": "broken.docx", "data": b"not a zip"}, "not a Word document"),
    ({"name": "latin.txt", "data": "caf\xe9".encode("latin-1")}, "not UTF-8"),
    ({"name": "a.txt", "data": b"1", "source": ""}, "missing source"),
    ({"name": "a.txt", "data": b"1", "target": "xx"}, "xx is not supported"),
])
def test_bad_files_are_libretranslates_400s(nllb, send, says):
    fields = {k: v for k, v in send.items() if k in ("source", "target")}
    reply = translate_file(nllb[0], send["name"], send["data"], **fields)
    assert reply.status_code == 400 and says in reply.json()["error"], reply.text
    assert list(reply.json()) == ["error"]


def test_bad_uploads_and_downloads_are_4xx(nllb):
    url, _ = nllb
    reply = httpx.post(f"{url}/translate_file", json={"source": ENG, "target": DEU})
    assert reply.status_code == 400 and "multipart/form-data" in reply.json()["error"]
    reply = httpx.post(f"{url}/translate_file", data={"source": ENG, "target": DEU}, files={"other": ("a.txt", b"1")})
    assert reply.status_code == 400 and "missing file" in reply.json()["error"]
    assert httpx.get(f"{url}/download_file/..%2F..%2Fetc%2Fpasswd").status_code in (400, 404)
    assert httpx.get(f"{url}/download_file/not-a-stored-name.txt").status_code == 400
    missing = httpx.get(f"{url}/download_file/{'0' * 32}.gone.txt")
    assert missing.status_code == 404 and "error" in missing.json()


def test_the_library_and_the_cli_translate_markup(nllb, tmp_path):
    _, model = nllb
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    result = run_cli("generate", str(model.folder), "--input", str(page), "--source-lang", ENG, "--target-lang", DEU)
    assert result.exit_code == 0, result.output
    assert result.stdout == expected(model, [PAGE], "html")[0]
    forced = run_cli("generate", str(model.folder), "--input", str(page), "--format", "text", "--source-lang", ENG,
                     "--target-lang", DEU)
    assert forced.stdout.count("\n") == len([line for line in PAGE.splitlines() if line.strip()])  # a source a line
    with pytest.raises(Exception, match="format 'pdf' is not one of"):
        model.translate(["x"], format="pdf")


def test_the_schema_documents_the_new_routes(nllb):
    schema = httpx.get(f"{nllb[0]}/openapi.json").json()["paths"]
    assert {"/detect", "/translate_file", "/frontend/settings"} <= set(schema)
    body = schema["/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]["format"]["enum"]) == {"text", "html", "markdown", "", None}
    assert json.dumps(schema["/translate_file"]["post"]["requestBody"]).count("binary") == 1
