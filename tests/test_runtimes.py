"""runtimes/: Node.js and headless Chromium decode the bundled model exactly like the Python runtime.

Both compare themselves with runtimes/fixtures/expected.json (kept current by
tests/test_runtimes_fixture.py). They skip, saying why, when node, the npm packages or chromium are
missing (`make test` runs `npm ci`; `.ci/run` installs chromium). runtimes/run-tests.sh runs the same
Node tests without pytest.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.export.exporter import ExportOptions, export_model

from conftest import BUNDLED

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "runtimes"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def run_node_tests(folder: Path, export_dir: Path | None, files: tuple[str, ...] = ("test/",),
                   env: dict[str, str] | None = None, skips: str | None = None) -> str:
    """`node --test FILES` in `folder` with TFM_EXPORT_DIR (unset when None) and `env`; every test must
    pass, and none may skip unless its reason contains `skips` (the tests another env var enables)."""
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test runtimes/")
    if not (folder / "node_modules").exists():
        pytest.skip(f"SKIPPED: {folder}/node_modules missing; run `npm ci` there (make test does)")
    env = {**os.environ, "TFM_PYTHON": sys.executable, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TFM_EXPORT_DIR", None)
    if export_dir is not None:
        env["TFM_EXPORT_DIR"] = str(export_dir)
    done = subprocess.run(["node", "--test", *files], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # A skipped suite is not counted in node 20's "# skipped" total: look for any SKIP directive.
    skipped = [line for line in done.stdout.splitlines() if "# SKIP" in line and not (skips and skips in line)]
    assert "# fail 0" in done.stdout and not skipped, done.stdout[-2000:]
    return done.stdout


def test_node_runtime(bundled_export):
    run_node_tests(RUNTIMES / "node", bundled_export)


def test_node_runtime_runs_the_fused_export(tmp_path):
    """--optimize graphs use com.microsoft ops (MultiHeadAttention, SkipLayerNormalization): Node has them too."""
    out = tmp_path / "opt"
    manifest = export_model(load_checkpoint(BUNDLED / "model.pt"), out, ExportOptions(optimize=True)).to_dict()
    assert manifest["variant"]["transforms"]["optimize"]["decoder"]["mha1"] > 0
    run_node_tests(RUNTIMES / "node", out)


def test_browser_runtime(bundled_export):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"SKIPPED: chromium not found at {CHROMIUM}; `apt-get install chromium` to run the browser test")
    screenshot = RUNTIMES / "web" / "test-output" / "screenshot.png"
    screenshot.unlink(missing_ok=True)
    # the page on an export with tokenizer.json and languages: tests/test_runtimes_families.py
    # browser.test.mjs only: test/module.test.mjs is tests/test_runtimes_nocache.py's (module exports)
    run_node_tests(RUNTIMES / "web", bundled_export, files=("test/browser.test.mjs",),
                   skips="TFM_FAMILY_EXPORT_DIR is not set")
    assert screenshot.exists()
