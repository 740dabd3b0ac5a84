"""The docs stay true: every fenced block marked ```sh tested in README.md and docs/*.md runs, in
order, as one bash script from the repository root (`set -e`: any failing command fails the test).
Blocks use the bundled model and quick commands only; what they write goes to a temporary copy of
the folders they name, never to the checkout (the script runs in a temporary directory holding
links to models/ and a scratch space for outputs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The README first: it makes quick_onnx, which the pages' blocks use (one export keeps the test short).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```sh tested\n(.*?)^```", re.S | re.M)


def blocks_of(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_the_pages_have_tested_blocks():
    counted = {page.name: len(blocks_of(page)) for page in PAGES}
    assert counted["README.md"] >= 1 and sum(counted.values()) >= 3, counted


@pytest.mark.slow
@pytest.mark.long  # a minute: every tested block of the docs, run in `make test-long`
def test_tested_commands_run(tmp_path):
    """All blocks of all pages in one script, in page order: later pages may use what earlier ones export."""
    (tmp_path / "models").symlink_to(ROOT / "models")
    script = "\n".join(block for page in PAGES for block in blocks_of(page))
    # Background jobs (a server) end with the script, whatever happens; a request the server refuses (an HTTP
    # error status) fails the script, as a command's exit status does (curl itself exits 0 on a 4xx).
    prelude = ("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
               'curl() { command curl --fail-with-body "$@"; }\n')
    bin_dir = Path(sys.executable).parent  # tfm-export and python of this environment first
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(["bash", "-c", prelude + script], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
