"""A tiny static server for runtimes/web: the page, onnxruntime-web's files and one export folder.

Standard library only; binds to 127.0.0.1 by default. For local demos and tests, not production.

    /            runtimes/web/index.html and app.mjs (top-level files only)
    /lib/        runtimes/node/greedy.mjs (the decoding loop shared with Node; top-level files only)
    /ort/        runtimes/web/node_modules/onnxruntime-web/dist/ (after `npm ci` there)
    /export/     the export folder (manifest.json, encoder.onnx, decoder.onnx)
"""

from __future__ import annotations

import functools
import http.server
import ipaddress
import logging
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import InputError
from ..manifest import load_manifest

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
WEB_DIR = REPO / "runtimes" / "web"
FLAT = ("/", "/lib/")  # mounts that serve only their folder's top-level files (not node_modules/)
MIME = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
        ".onnx": "application/octet-stream", ".data": "application/octet-stream",
        ".spm": "application/octet-stream", ".json": "application/json", ".map": "application/json"}


def routes(export_dir: Path, web_dir: Path = WEB_DIR) -> dict[str, Path]:
    """URL prefix -> folder (longest prefixes first); checks that everything needed is there."""
    ort_dist = web_dir / "node_modules" / "onnxruntime-web" / "dist"
    if not (web_dir / "index.html").exists():
        raise InputError(f"{web_dir} has no index.html; run from a tfm-export checkout or pass --web-dir")
    if not ort_dist.is_dir():
        raise InputError(f"{ort_dist} is missing; run `npm ci` in {web_dir}")
    load_manifest(export_dir)  # a clear error now rather than a broken page later
    return {"/export/": export_dir.resolve(), "/ort/": ort_dist.resolve(),
            "/lib/": (web_dir.parent / "node").resolve(), "/": web_dir.resolve()}


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves each URL prefix from its folder, never outside it, without directory listings."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME}

    def __init__(self, *args, mounts: dict[str, Path], **kwargs):
        self.mounts = mounts
        super().__init__(*args, directory=str(mounts["/"]), **kwargs)

    def translate_path(self, path: str) -> str:
        url_path = unquote(urlparse(path).path)
        if url_path == "/":
            return str(self.mounts["/"] / "index.html")
        for prefix, folder in self.mounts.items():
            if url_path.startswith(prefix):
                target = (folder / url_path[len(prefix):]).resolve()
                inside = target.parent == folder if prefix in FLAT else folder in target.parents
                return str(target if inside and target.is_file() else folder / "__not_found__")
        return str(self.mounts["/"] / "__not_found__")

    def list_directory(self, path):  # noqa: ANN001 (the base class's signature)
        self.send_error(404, "directory listings are off")
        return None

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")  # a re-export shows up on reload
        super().end_headers()

    def log_message(self, fmt: str, *args) -> None:
        log.debug(fmt, *args)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.1, ::1 and localhost."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000,
                web_dir: str | os.PathLike = WEB_DIR) -> http.server.ThreadingHTTPServer:
    """A server ready to `serve_forever()`; port 0 picks a free port (see `server_address`)."""
    mounts = routes(Path(export_dir), Path(web_dir))
    if not is_loopback(host):
        log.warning("serving on %s: other machines can reach this demo server", host)
    try:
        return http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, mounts=mounts))
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port") from None
