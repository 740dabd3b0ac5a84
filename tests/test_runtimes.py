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


def run_node_tests(folder: Path, export_dir: Path) -> str:
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test runtimes/")
    if not (folder / "node_modules").exists():
        pytest.skip(f"SKIPPED: {folder}/node_modules missing; run `npm ci` there (make test does)")
    env = {**os.environ, "TFM_EXPORT_DIR": str(export_dir), "TFM_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["node", "--test", "test/"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # A skipped suite is not counted in node 20's "# skipped" total: look for any SKIP directive.
    assert "# fail 0" in done.stdout and "# SKIP" not in done.stdout, done.stdout[-2000:]
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
    run_node_tests(RUNTIMES / "web", bundled_export)
    assert screenshot.exists()
