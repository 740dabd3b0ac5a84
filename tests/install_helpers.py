"""Building this checkout's wheel and installing it into fresh venvs, for the install tests.

Everything runs with clean_env() and outside the checkout, so nothing is imported from it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """This environment minus what would point Python at the checkout or at the test venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run(cmd: list, cwd: Path, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Runs cmd in cwd with clean_env(); with `check`, fails the test with its output unless it exits 0."""
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert done.returncode == 0, (f"{cmd[:3]} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                                      f"{done.stderr[-3000:]}")
    return done


def build_wheel(out: Path) -> Path:
    """This checkout's wheel (no dependencies) in `out`."""
    if importlib.util.find_spec("pip") is None:
        pytest.skip("cannot build a wheel here: this Python has no pip")
    # With setuptools here already, build without an isolated env: no index needed, and faster.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", out, ROOT], cwd=out)
    (path,) = out.glob("tfm_export-*.whl")
    print(f"\nwheel: {path.name}, {path.stat().st_size / 2**20:.1f} MiB")
    return path


def install_wheel(wheel: Path, env_dir: Path, extras: str = "") -> Path:
    """A fresh venv in env_dir with `wheel[extras]` and its dependencies (constraints.txt); its bin folder."""
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    start = time.perf_counter()
    target = f"{wheel}[{extras}]" if extras else wheel
    run([bin_dir / "python", "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", target], cwd=env_dir)
    print(f"\ninstall {wheel.name}{f'[{extras}]' if extras else ''} into a fresh venv: "
          f"{time.perf_counter() - start:.0f} s, {_size_mib(env_dir):.0f} MiB")
    return bin_dir


def _size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20
