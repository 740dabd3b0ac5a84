"""runtimes/: Node.js and the browser decode the bundled model exactly like the Python runtime.

The committed fixture (runtimes/fixtures/expected.json) is checked against the Python runtime here;
then the Node and headless-Chromium tests compare themselves with it. They skip, saying why, when
node, the npm packages or chromium are missing (`make test` installs the npm packages).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "runtimes"
sys.path.insert(0, str(RUNTIMES))

import make_fixture  # noqa: E402


def test_committed_fixture_matches_the_python_runtime(bundled_export):
    committed = json.loads(make_fixture.FIXTURE.read_text(encoding="utf-8"))
    assert make_fixture.build(bundled_export) == committed, (
        "runtimes/fixtures/expected.json is stale: run `.venv/bin/python runtimes/make_fixture.py EXPORT_DIR`")


def run_node_tests(folder: Path, export_dir: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test runtimes/")
    if not (folder / "node_modules").exists():
        pytest.skip(f"SKIPPED: {folder}/node_modules missing; run `npm ci` there (make test does)")
    env = {**os.environ, "TFM_EXPORT_DIR": str(export_dir), "TFM_PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["node", "--test", "test/"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]


def test_node_runtime(bundled_export):
    run_node_tests(RUNTIMES / "node", bundled_export)


def test_browser_runtime(bundled_export):
    if not Path(os.environ.get("CHROMIUM", "/usr/bin/chromium")).exists():
        pytest.skip("SKIPPED: chromium not found; `apt-get install chromium` to run the browser test")
    run_node_tests(RUNTIMES / "web", bundled_export)
    assert (RUNTIMES / "web" / "test-output" / "screenshot.png").exists()
