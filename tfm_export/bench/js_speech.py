"""`js-speech`'s workers (benchmarks/js_speech.py): js_speech_node.mjs (one Whisper model in a Node process, ours
or transformers.js) and js_speech_browser.mjs (headless Chromium, our page and transformers.js' side by side), beside
this module in tfm_export/bench as the other peers' backends are; each a JSON-lines process (Worker). They run on a
checkout's runtimes/ (node/, web/ and their node_modules: two folders up from here), as the scenario does.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from . import fixtures

WORKERS = Path(__file__).resolve().parent  # js_speech_node.mjs, js_speech_browser.mjs


class Worker:
    """A JSON-lines process (js_speech_node.mjs, js_speech_browser.mjs): its ready line, then request -> reply."""

    def __init__(self, command: list[str]):
        root = str(fixtures.ROOT)  # the checkout's tfm_export for the page's `tfm-export serve-web`
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self.reply()

    def reply(self) -> dict[str, Any]:
        for line in self.proc.stdout:  # a library may print a line of its own: skip what is not JSON
            with contextlib.suppress(ValueError):
                answer = json.loads(line)
                if isinstance(answer, dict):
                    if "error" in answer:
                        raise RuntimeError(answer["error"])
                    return answer
        raise RuntimeError(f"{self.proc.args[:3]} exited ({self.proc.wait()})")

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.reply()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def node_worker(tree: Path) -> Path:
    """A checkout's js_speech_node.mjs: in tfm_export/bench/, or benchmarks/ in checkouts from before it moved."""
    here = [tree / folder / "js_speech_node.mjs" for folder in ("tfm_export/bench", "benchmarks")]
    return next((path for path in here if path.is_file()), here[0])


def versions(tjs: Path, chromium: str) -> dict[str, str | None]:
    """The versions the sides run: Node, Chromium, onnxruntime-node (ours, transformers.js'), onnxruntime-web,
    transformers.js."""

    def package(folder: Path) -> str | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads((folder / "package.json").read_text())["version"]
        return None

    def version(command: list[str]) -> str | None:
        with contextlib.suppress(OSError):
            return (subprocess.run(command, capture_output=True, text=True).stdout.splitlines() or [None])[0]
        return None

    runtimes, theirs = fixtures.ROOT / "runtimes", tjs / "node_modules"
    return {"node": version(["node", "--version"]), "chromium": version([chromium, "--version"]),
            "onnxruntime-node (ours)": package(runtimes / "node/node_modules/onnxruntime-node"),
            "onnxruntime-node (transformers.js)": package(theirs / "onnxruntime-node"),
            "onnxruntime-web (the page, both)": package(runtimes / "web/node_modules/onnxruntime-web"),
            "@huggingface/transformers": package(theirs / "@huggingface/transformers")}
