"""A tiny static server for runtimes/web: the page, onnxruntime-web's files and one export folder.

Standard library only; binds to 127.0.0.1 by default. For local demos and tests, not production.
"""

from __future__ import annotations

import functools
import http.server
import logging
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from .errors import InputError
from .manifest import load_manifest

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
WEB_DIR = REPO / "runtimes" / "web"
MIME = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
        ".onnx": "application/octet-stream", ".spm": "application/octet-stream", ".json": "application/json"}


def routes(export_dir: Path, web_dir: Path = WEB_DIR) -> dict[str, Path]:
    """URL prefix -> folder; checks that everything needed is there."""
    ort_dist = web_dir / "node_modules" / "onnxruntime-web" / "dist"
    if not (web_dir / "index.html").exists():
        raise InputError(f"{web_dir} has no index.html; run from a tfm-export checkout or pass --web-dir")
    if not ort_dist.exists():
        raise InputError(f"{ort_dist} is missing; run `npm ci` in {web_dir}")
    load_manifest(export_dir)
    return {"/export/": export_dir, "/ort/": ort_dist, "/core/": web_dir.parent / "core", "/": web_dir}


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves each URL prefix from its folder; never outside it."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME}

    def __init__(self, *args, mounts: dict[str, Path], **kwargs):
        self.mounts = mounts
        super().__init__(*args, directory=str(mounts["/"]), **kwargs)

    def translate_path(self, path: str) -> str:
        url_path = unquote(urlparse(path).path)
        for prefix, folder in self.mounts.items():
            if url_path.startswith(prefix):
                target = (folder / url_path[len(prefix):]).resolve()
                if target == folder.resolve() or folder.resolve() in target.parents:
                    return str(target)
                return str(folder / "__forbidden__")
        return str(self.mounts["/"] / "__missing__")

    def log_message(self, fmt: str, *args) -> None:
        log.debug(fmt, *args)


def make_server(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000,
                web_dir: str | os.PathLike = WEB_DIR) -> http.server.ThreadingHTTPServer:
    """A server ready to `serve_forever()`; port 0 picks a free port (see `server_address`)."""
    mounts = routes(Path(export_dir), Path(web_dir))
    return http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, mounts=mounts))
