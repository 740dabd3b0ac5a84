"""A wheel of tfm-export in a fresh venv, run outside the checkout: `demo` and `serve-web` find their files.

Builds the wheel from this checkout, installs it with its dependencies (pinned by constraints.txt) into a
new venv under tmp_path, then runs the console script from another folder, so nothing comes from the
checkout. Takes minutes (torch and onnxruntime are installed afresh). The install without PyTorch is
tests/test_runtime_install.py.
"""

import http.client
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from tfm_export.resources import BUNDLES, DATA

from install_helpers import ROOT, build_wheel, clean_env, install_wheel, run

pytestmark = pytest.mark.slow

HELDOUT = [line.split("\t") for line in (ROOT / "models/num2words-de/heldout.tsv").read_text().splitlines()]


def ort_in_checkout() -> bool:
    """Whether `npm ci` ran in runtimes/web (the wheel then carries onnxruntime-web's files)."""
    ort = BUNDLES["ort"]
    return all((ROOT / ort.checkout / name).is_file() for name in ort.files)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def scripts(wheel, tmp_path_factory) -> Path:
    """The bin folder of a fresh venv with the wheel, its `export` extra (the demo exports) and dependencies."""
    return install_wheel(wheel, tmp_path_factory.mktemp("venv"), extras="export")


@pytest.fixture(scope="module")
def demo(scripts, tmp_path_factory) -> tuple[Path, str]:
    """`tfm-export demo` run from an empty folder: (the export folder, what it printed)."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    out = elsewhere / "demo_onnx"
    done = run([scripts / "tfm-export", "demo", "--out", out, "--samples", "3", "--threads", "1"], cwd=elsewhere)
    return out, done.stdout


def test_wheel_carries_the_page_and_the_model(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name, bundle in BUNDLES.items():
        expected = {f"tfm_export/{DATA}/{bundle.packaged}/{f}" for f in bundle.files}
        shipped = expected <= names
        in_checkout = all((ROOT / bundle.checkout / f).is_file() for f in bundle.files)  # npm's: after `npm ci`
        assert shipped == (not bundle.optional or in_checkout), (name, sorted(expected - names))
    assert not any(n.startswith(("models/", "runtimes/")) for n in names)  # no top-level import packages
    assert wheel.stat().st_size < 30 * 2**20


@pytest.mark.long  # a fresh venv with PyTorch (~90 s); the runtime-only install is in make test
def test_demo_uses_the_installed_model(demo, scripts):
    out, printed = demo
    assert f"export {scripts.parent}" in printed  # the venv's copy, not the checkout's
    assert f"/site-packages/tfm_export/{DATA}/models/num2words-de/model.pt -> {out}" in printed
    for source, expected in HELDOUT[:3]:  # the inputs, their translations, "yes" for ORT==eager and correct
        assert re.search(rf"^{source} +{expected} +yes +yes$", printed, re.MULTILINE), (source, printed)
    assert (out / "manifest.json").is_file()


def get(port: int, path: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, res.getheader("Content-Type", "").split(";")[0], body


@pytest.mark.long  # the same full install
def test_serve_web_serves_the_installed_page(demo, scripts, tmp_path):
    out, _ = demo
    server = subprocess.Popen([str(scripts / "tfm-export"), "serve-web", str(out), "--port", "0"], cwd=tmp_path,
                              env=clean_env(), stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()  # "serving OUT on http://127.0.0.1:PORT/ (Ctrl+C stops)", or the error
        if not ort_in_checkout():
            assert server.wait(timeout=30) == 1 and "onnxruntime-web not found" in line, line
            return
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", line).group(1))
        assert get(port, "/")[:2] == (200, "text/html") and b"<title>tfm-export" in get(port, "/")[2]
        assert get(port, "/app.mjs") == (200, "text/javascript", (ROOT / "runtimes/web/app.mjs").read_bytes())
        assert get(port, "/lib/greedy.mjs")[:2] == (200, "text/javascript")
        for module in ("decode/loop.mjs", "speech/whisper.mjs"):  # the lib bundle's subfolders, kept in the wheel
            assert get(port, f"/lib/{module}") == (200, "text/javascript", (ROOT / "runtimes/node" / module).read_bytes())
        assert get(port, "/ort/ort.wasm.min.mjs")[:2] == (200, "text/javascript")
        assert get(port, "/ort/ort-wasm-simd-threaded.wasm")[:2] == (200, "application/wasm")
        assert get(port, "/export/manifest.json")[:2] == (200, "application/json")
    finally:
        server.terminate()
        server.wait(timeout=30)
