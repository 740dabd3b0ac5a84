"""tfm_export.serve.web and `tfm-export serve-web`: what the browser page is served (no browser here)."""

import http.client
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfm_export.cli import cli
from tfm_export.errors import InputError, ManifestError
from tfm_export.serve.web import is_loopback, make_server


@pytest.fixture
def web_dir(tmp_path) -> Path:
    """A stand-in for runtimes/web (page + onnxruntime-web's dist) and runtimes/node/greedy.mjs."""
    web = tmp_path / "runtimes" / "web"
    dist = web / "node_modules" / "onnxruntime-web" / "dist"
    dist.mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>t</title>")
    (web / "app.mjs").write_text("export {};")
    (dist / "ort.wasm.min.mjs").write_text("export {};")
    (dist / "ort-wasm-simd-threaded.wasm").write_bytes(b"\0asm")
    (tmp_path / "runtimes" / "node" / "node_modules").mkdir(parents=True)
    (tmp_path / "runtimes" / "node" / "greedy.mjs").write_text("export {};")
    (tmp_path / "runtimes" / "node" / "node_modules" / "x.js").write_text("no")
    (tmp_path / "secret.txt").write_text("no")
    return web


@pytest.fixture
def server(tiny_export, web_dir):
    srv = make_server(tiny_export, port=0, web_dir=web_dir)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


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
    ("/ort/ort.wasm.min.mjs", "text/javascript"),
    ("/ort/ort-wasm-simd-threaded.wasm", "application/wasm"),
    ("/export/manifest.json", "application/json"),
    ("/export/decoder.onnx", "application/octet-stream"),
])
def test_serves_each_mount_with_its_mime_type(server, path, mime):
    status, content_type, cache, _ = get(server, path)
    assert (status, content_type.split(";")[0], cache) == (200, mime, "no-store")


@pytest.mark.parametrize("path", [
    "/export/../../secret.txt", "/export/%2e%2e/%2e%2e/secret.txt", "/lib/../../secret.txt",
    "/lib/node_modules/x.js",
    "/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs",  # only the page's top-level files under /
    "/export/", "/ort/", "/missing.js",
])
def test_nothing_outside_the_mounts_and_no_listings(server, path):
    assert get(server, path)[0] == 404


def test_export_bytes_are_the_files(server, tiny_export):
    assert get(server, "/export/encoder.onnx")[3] == (tiny_export / "encoder.onnx").read_bytes()


def test_missing_pieces_are_clear_errors(tiny_export, web_dir, tmp_path):
    with pytest.raises(ManifestError, match="export folder not found"):
        make_server(tmp_path / "nope", port=0, web_dir=web_dir)
    with pytest.raises(InputError, match="has no index.html"):
        make_server(tiny_export, port=0, web_dir=tmp_path)
    shutil.rmtree(web_dir / "node_modules")
    with pytest.raises(InputError, match="run `npm ci` in"):
        make_server(tiny_export, port=0, web_dir=web_dir)


def test_cli_help_and_errors(tiny_export, tmp_path):
    result = CliRunner().invoke(cli, ["serve-web", "--help"])
    assert result.exit_code == 0 and "--port" in result.output and "--host" in result.output
    result = CliRunner().invoke(cli, ["serve-web", str(tiny_export), "--web-dir", str(tmp_path)])
    assert result.exit_code == 1 and "has no index.html" in result.output
