"""The client side of optimum_worker.py: its process under Optimum's venv's python, JSON lines both ways
(one request a line on its stdin, one reply a line on its stdout), and the versions of that venv's packages.

optimum_worker.py runs in Optimum's virtual environment (transformers < 4.58) and imports neither tfm_export
nor the benchmarks; this module runs in the project's, imports nothing of Optimum, and is what `families`
(seq2seq mode), the Whisper benchmarks (whisper mode) and `js-speech` (tjs mode) talk to it through. Both live in
the package, beside the harness, as the benchmarks' thin peer backends (python -m benchmarks runs the scenarios)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
import json
import subprocess

WORKER = Path(__file__).resolve().parent / "optimum_worker.py"


class OptimumProcess:
    """optimum_worker.py in `mode` on `arguments` and `--threads`: it exports (or reuses) its cache, prints a
    ready line ({"export_s": seconds or null when reused}, read here as `export_s`), then answers requests.
    `seconds`: the last reply's, the worker's own time of the call (0 when it gave none)."""

    def __init__(self, python: Path, mode: str, arguments: list[str], threads: int):
        # stderr is this process's: Optimum's export messages, and why the worker failed if it does
        self.process = subprocess.Popen([str(python), str(WORKER), mode, *arguments, "--threads", str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin and self.process.stdout
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.seconds = 0.0
        self.export_s: float | None = self.ask(None)["export_s"]

    def ask(self, request: dict[str, Any] | None) -> dict[str, Any]:
        """Send `request` (None: only read, the ready line) and read the reply; its seconds kept."""
        if request is not None:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"{WORKER.name} exited with status {self.process.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{WORKER.name}: {reply['error']}")
        self.seconds = reply.get("seconds", 0.0)
        return reply

    def close(self) -> None:
        self.requests.close()  # end of input ends the worker
        self.process.wait(timeout=60)


def optimum_versions(python: Path | None) -> dict[str, str | None]:
    """The packages of Optimum's venv (none without --optimum-python, or where it cannot say)."""
    packages = {"optimum": "optimum", "optimum_onnx": "optimum-onnx", "optimum_transformers": "transformers",
                "optimum_onnxruntime": "onnxruntime"}
    found: dict[str, str | None] = dict.fromkeys(packages)
    if python:
        script = ("import importlib.metadata as m, json, sys\n"
                  "print(json.dumps({k: m.version(p) for k, p in json.loads(sys.argv[1]).items()}))")
        try:
            found |= json.loads(subprocess.run([str(python), "-c", script, json.dumps(packages)], check=True,
                                               capture_output=True, text=True).stdout)
        except (OSError, subprocess.CalledProcessError, ValueError):
            pass
    return found


def tjs_folder(python: Path, folder: Path, out: Path) -> Path:
    """optimum_worker.py's tjs mode: Optimum's export of the Whisper `folder` laid out as transformers.js loads
    it, in `out` (reused when there)."""
    done = subprocess.run([str(python), str(WORKER), "tjs", str(folder), str(out)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"Optimum's export of {folder} failed:\n{done.stderr[-3000:]}")
    return out
