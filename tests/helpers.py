"""Helpers shared by the test modules (`import helpers`): a free loopback port, the CLI run in-process, live
servers (a `tfm-export` subprocess, uvicorn in a thread, a stdlib HTTP server in a thread), each on a free
loopback port and always stopped, and Node (runtimes/node) run on the trained Whisper fixture's spoken speech.

Heavy or optional imports (the CLI, httpx, uvicorn, the server app) are made where they are used, so that
importing this module costs nothing and skips nothing.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE = ROOT / "runtimes" / "node"
DIGITS = ROOT / "models" / "whisper-digits"  # the trained Whisper fixture (speech.py speaks its held-out set)


def free_port() -> int:
    """A loopback port that nothing listens on now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def one_thread() -> Iterator[None]:
    """PyTorch on one thread for a while: tiny matrices (the seeds' training) only contend on the shared cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# The CLI, in-process (click's CliRunner)


def run_cli(*args, **invoke):
    """`tfm-export ARGS...` in-process: the CLI invoked with str()-ed args (paths, numbers); its click Result.
    Keywords go to CliRunner.invoke (input=, env=, ...)."""
    from click.testing import CliRunner

    from tfm_export.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], **invoke)


def run_cli_ok(*args, **invoke):
    """run_cli, and the command exits 0 (the test fails with the command's output otherwise)."""
    result = run_cli(*args, **invoke)
    assert result.exit_code == 0, result.output
    return result


def export_validated(source, out):
    """`tfm-export SOURCE -o OUT` with the default flags (validation on): exit 0, and the manifest records
    greedy tokens equal to the eager model's (and the default decoding's, where the source has one).
    Returns the click Result."""
    result = run_cli_ok(source, "-o", out)
    validation = json.loads((Path(out) / "manifest.json").read_text())["validation"]
    assert validation["greedy"]["equal"]
    assert validation.get("default", {"equal": True})["equal"]
    return result


# Live servers


@dataclass
class Process:
    """A server subprocess: its base URL, port and Popen (stderr is a text pipe)."""

    url: str
    port: int
    proc: subprocess.Popen


def wait_until_answers(proc: subprocess.Popen, url: str, timeout: float = 60, client=None) -> None:
    """Polls GET url until it answers (any status); fails with the server's stderr if it exits first, or
    after `timeout` seconds. `client`: an httpx.Client to poll with (httpx.get otherwise)."""
    import httpx

    get = client.get if client is not None else httpx.get
    deadline = time.time() + timeout
    while True:
        try:
            get(url)
            return
        except httpx.TransportError:
            if proc.poll() is not None:
                raise AssertionError(f"the server exited {proc.returncode} before it answered:\n"
                                     f"{proc.stderr.read() if proc.stderr else ''}") from None
            if time.time() >= deadline:
                proc.kill()  # so that its stderr can be read to its end
                proc.wait()
                raise AssertionError(f"no answer from {url} in {timeout} s:\n"
                                     f"{proc.stderr.read() if proc.stderr else ''}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM (the server finishes what is in flight), then SIGKILL after `timeout` seconds; nothing
    when it has exited already."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def server_process(*args, wait: str | None = "/healthz", timeout: float = 60, client=None) -> Iterator[Process]:
    """`python -m tfm_export ARGS... --port PORT` (a server: serve, serve-web) on a free loopback port, run
    from the checkout with stderr piped (text). With `wait` (a path), it is polled until it answers
    (wait_until_answers: `timeout`, `client`); wait=None yields at once (the test reads stderr itself).
    Always stopped afterwards (stop: SIGTERM, then SIGKILL after 30 s) unless the test stopped it."""
    port = free_port()
    cmd = [sys.executable, "-m", "tfm_export", *(str(a) for a in args), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        if wait is not None:
            wait_until_answers(proc, url + wait, timeout, client)
        yield Process(url, port, proc)
    finally:
        stop(proc)
        if proc.stderr:
            proc.stderr.close()


@contextmanager
def serving(settings, engine=None, **uvicorn_options):
    """`tfm-export serve`'s app (create_app) run by uvicorn in a thread of this process, on a free loopback
    port; yields its base URL and the engine (opened from `settings` unless given). Stopped afterwards.
    `uvicorn_options`: more of uvicorn.Config's."""
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    from tfm_export.serve.app import create_app
    from tfm_export.serve.engine import open_engine

    engine = engine or open_engine(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, engine), host="127.0.0.1", port=port,
                                           log_level="warning", **uvicorn_options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), f"uvicorn stopped before it started on port {port}"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def serving_forever(server):
    """A socketserver/http.server server (already bound) run in a daemon thread; shut down and closed
    afterwards. Yields the server."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def import_hf(path, options=None):
    """A Hugging Face folder read and checked by the HF importer alone (what `load_any` does for a folder,
    without the detection in front of it): the importer's own errors, as its tests expect them."""
    from pathlib import Path

    from tfm_export.importers.base import run
    from tfm_export.importers.hf import HFImporter
    from tfm_export.importers.source import Source

    return run(HFImporter(), Source(Path(path)), dict(options or {}))


# Node and the spoken fixture


def spoken_marks(browser: bool = False) -> list:
    """The pytestmark of a module that has espeak-ng speak models/whisper-digits' held-out set (its speech.py) and
    runs runtimes/node on it (in headless Chromium too, with `browser`): warnings ignored, skipped (saying why)
    without espeak-ng, node or runtimes/node's packages (npm ci there), or Chromium (test_runtimes.CHROMIUM)."""
    marks = [pytest.mark.filterwarnings("ignore"),
             pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"),
             pytest.mark.skipif(shutil.which("node") is None or not (NODE / "node_modules" / "fft.js").exists(),
                                reason="node or runtimes/node/node_modules missing (npm ci there)")]
    if browser:
        from test_runtimes import CHROMIUM

        marks.append(pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}"))
    return marks


def node(*args, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`node ARGS...` (str()-ed) with `stdin` as its input; stdout and stderr captured as text."""
    return subprocess.run(["node", *map(str, args)], input=stdin, capture_output=True, text=True, timeout=timeout)


def node_module(script: str, *args, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """An ES module given as text, run by `node --input-type=module -e SCRIPT ARGS...` (process.argv[1] is the
    first of ARGS): node()'s result."""
    return node("--input-type=module", "-e", script, *args, stdin=stdin, timeout=timeout)
