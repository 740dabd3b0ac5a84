"""tfm_export.serve.web and `tfm-export serve-web`: what the browser page is served (no browser here)."""

import http.client
import json
import posixpath
import re
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import pytest

from helpers import run_cli, serving_forever
from tfm_export.errors import InputError, ManifestError
from tfm_export.serve.web import is_loopback, make_server


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def web_dir(tmp_path) -> Path:
    """A stand-in for runtimes/web (page, onnxruntime-web's and @huggingface/tokenizers' dist) and
    runtimes/node's greedy.mjs, decode/loop.mjs (the page's) and exported.mjs (Node's alone)."""
    web = tmp_path / "runtimes" / "web"
    dist = web / "node_modules" / "onnxruntime-web" / "dist"
    dist.mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>t</title>")
    (web / "app.mjs").write_text("export {};")
    (dist / "ort.wasm.min.mjs").write_text("export {};")
    (dist / "ort-wasm-simd-threaded.wasm").write_bytes(b"\0asm")
    tokenizers = web / "node_modules" / "@huggingface" / "tokenizers"
    (tokenizers / "dist").mkdir(parents=True)
    (tokenizers / "dist" / "tokenizers.min.mjs").write_text("export {};")
    (tokenizers / "package.json").write_text("{}")
    (tmp_path / "runtimes" / "node" / "node_modules").mkdir(parents=True)
    (tmp_path / "runtimes" / "node" / "greedy.mjs").write_text("export {};")
    (tmp_path / "runtimes" / "node" / "exported.mjs").write_text("export {};")
    (tmp_path / "runtimes" / "node" / "decode").mkdir()
    (tmp_path / "runtimes" / "node" / "decode" / "loop.mjs").write_text("export {};")
    (tmp_path / "runtimes" / "node" / "node_modules" / "x.js").write_text("no")
    for lib, dist, name in (("fft.js", "lib", "fft.js"), ("wavefile", "dist", "wavefile.js"),  # Whisper's libraries
                            ("pako", "dist", "pako.esm.mjs")):
        (tmp_path / "runtimes" / "node" / "node_modules" / lib / dist).mkdir(parents=True)
        (tmp_path / "runtimes" / "node" / "node_modules" / lib / dist / name).write_text("module.exports = 1;")
        (tmp_path / "runtimes" / "node" / "node_modules" / lib / "package.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("no")
    return web


@contextmanager
def serving(export: Path, web_dir: Path):
    with serving_forever(make_server(export, port=0, web_dir=web_dir)) as srv:
        yield srv


@pytest.fixture
def server(tiny_export, web_dir):
    with serving(tiny_export, web_dir) as srv:
        yield srv


def get(server, path):
    conn = http.client.HTTPConnection(*server.server_address, timeout=10)
    conn.request("GET", path)
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, res.getheader("Content-Type", ""), res.getheader("Cache-Control"), body


def test_binds_loopback_by_default(server):
    assert server.server_address[0] == "127.0.0.1"
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


@pytest.mark.parametrize("path, mime", [
    ("/", "text/html"),
    ("/app.mjs", "text/javascript"),
    ("/lib/greedy.mjs", "text/javascript"),
    ("/lib/decode/loop.mjs", "text/javascript"),  # a bundled module in a subfolder
    ("/ort/ort.wasm.min.mjs", "text/javascript"),
    ("/ort/ort-wasm-simd-threaded.wasm", "application/wasm"),
    ("/tokenizers/tokenizers.min.mjs", "text/javascript"),
    ("/npm/fft.js/fft.js", "text/javascript"),
    ("/npm/wavefile/wavefile.js", "text/javascript"),
    ("/npm/pako/pako.esm.mjs", "text/javascript"),
    ("/export/manifest.json", "application/json"),
    ("/export/decoder.onnx", "application/octet-stream"),
])
def test_serves_each_mount_with_its_mime_type(server, path, mime):
    status, content_type, cache, _ = get(server, path)
    assert (status, content_type.split(";")[0], cache) == (200, mime, "no-store")


@pytest.mark.parametrize("path", [
    "/export/../../secret.txt", "/export/%2e%2e/%2e%2e/secret.txt", "/lib/../../secret.txt",
    "/lib/node_modules/x.js", "/lib/exported.mjs", "/lib/decode/", "/lib/decode/../../secret.txt",  # the bundle's files only
    "/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs",  # only the page's top-level files under /
    "/tokenizers/../package.json", "/tokenizers/%2e%2e/package.json", "/tokenizers/../../../app.mjs",
    "/export/", "/ort/", "/tokenizers/", "/missing.js",
    "/npm/fft.js/../package.json", "/npm/fft.js/%2e%2e/package.json", "/npm/x.js", "/npm/wavefile/../../x.js", "/npm/",
])
def test_nothing_outside_the_mounts_and_no_listings(server, path):
    assert get(server, path)[0] == 404


def test_export_bytes_are_the_files(server, tiny_export):
    assert get(server, "/export/encoder.onnx")[3] == (tiny_export / "encoder.onnx").read_bytes()


def test_speech_libraries_are_optional(tiny_export, web_dir):
    """A text export's page needs neither fft.js nor wavefile: without `npm ci` in runtimes/node the
    server starts, and the page says what is missing when it opens a Whisper export."""
    shutil.rmtree(web_dir.parent / "node" / "node_modules" / "fft.js")
    with serving(tiny_export, web_dir) as srv:
        assert get(srv, "/npm/fft.js/fft.js")[0] == 404
        assert get(srv, "/npm/wavefile/wavefile.js")[0] == 200


def test_the_wheel_bundles_every_module_the_page_imports():
    """Each /lib/ and page module's imports are in its bundle (a wheel ships only the listed files): relative
    ones ('./x.mjs', '../decode/loop.mjs') resolved from the module's folder, and the page's '/lib/...'."""
    from tfm_export.resources import BUNDLES
    for name in ("lib", "web"):
        bundle = BUNDLES[name]
        for file in (f for f in bundle.files if f.endswith(".mjs")):
            text = (ROOT / bundle.checkout / file).read_text()
            here = PurePosixPath(file).parent
            relative = {posixpath.normpath(str(here / path)) for path in re.findall(r"'(\.\.?/[\w./-]+)'", text)}
            imports = ((name, relative), ("lib", set(re.findall(r"'/lib/([\w./-]+)'", text))),
                       ("web", set(re.findall(r"'/([\w.-]+\.m?js)'", text))))
            for folder, found in imports:
                missing = found - set(BUNDLES[folder].files)
                assert not missing, (file, folder, missing)
    index = (ROOT / "runtimes" / "web" / "index.html").read_text()
    assert '"fft.js": "/fft-shim.mjs", "wavefile": "/wavefile-shim.mjs", "pako": "/npm/pako/pako.esm.mjs"' in index


def test_serves_the_export_tokenizer_json(tiny_export, web_dir, tmp_path):
    """An export with an hf tokenizer: the page fetches its tokenizer.json from /export/."""
    export = tmp_path / "hf_export"
    shutil.copytree(tiny_export, export)
    (export / "tokenizer.json").write_text('{"model": {}}')
    with serving(export, web_dir) as srv:
        status, content_type, _, body = get(srv, "/export/tokenizer.json")
    assert (status, content_type.split(";")[0], body) == (200, "application/json", b'{"model": {}}')


def test_missing_pieces_are_clear_errors(tiny_export, web_dir, tmp_path):
    with pytest.raises(ManifestError, match="export folder not found"):
        make_server(tmp_path / "nope", port=0, web_dir=web_dir)
    with pytest.raises(InputError, match="has no index.html"):
        make_server(tiny_export, port=0, web_dir=tmp_path)
    shutil.rmtree(web_dir / "node_modules" / "@huggingface")
    with pytest.raises(InputError, match=r"@huggingface/tokenizers not found in .*; run `npm ci` in"):
        make_server(tiny_export, port=0, web_dir=web_dir)
    shutil.rmtree(web_dir / "node_modules")
    with pytest.raises(InputError, match="onnxruntime-web not found in .*; run `npm ci` in"):
        make_server(tiny_export, port=0, web_dir=web_dir)


def test_the_page_and_node_pin_one_tokenizer_library():
    """The page imports runtimes/node/text/tokenizer.mjs, which Node runs with its own copy: the same version."""
    def pinned(folder: str) -> str:
        lock = json.loads((ROOT / "runtimes" / folder / "package-lock.json").read_text())
        return lock["packages"]["node_modules/@huggingface/tokenizers"]["version"]
    assert pinned("web") == pinned("node")
    index = (ROOT / "runtimes" / "web" / "index.html").read_text()
    assert '"@huggingface/tokenizers": "/tokenizers/tokenizers.min.mjs"' in index


def test_cli_help_and_errors(tiny_export, tmp_path):
    result = run_cli("serve-web", "--help")
    assert result.exit_code == 0 and "--port" in result.output and "--host" in result.output
    result = run_cli("serve-web", tiny_export, "--web-dir", tmp_path)
    assert result.exit_code == 1 and "has no index.html" in result.output


def test_cli_refuses_a_taken_port_in_one_line(tiny_export, web_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve-web", tiny_export, "--web-dir", web_dir, "--port", port)
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: port {port} on 127.0.0.1 is in use; pick another --port"
