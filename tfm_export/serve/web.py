"""A tiny static server for runtimes/web: the page, onnxruntime-web's files and one export folder.

Standard library only; binds to 127.0.0.1 by default. For local demos and tests, not production.

    /            runtimes/web/index.html and app.mjs (top-level files only)
    /lib/        runtimes/node's modules that the page imports, shared with Node (api.mjs, decode/, states/,
                 options/, speech/, text/, audio/, ...: exactly the files tfm_export.resources' "lib" bundle lists)
    /ort/        runtimes/web/node_modules/onnxruntime-web/dist/ (after `npm ci` there)
    /tokenizers/ runtimes/web/node_modules/@huggingface/tokenizers/dist/ (top-level files only): the
                 tokenizer.json library that /lib/text/tokenizer.mjs imports (index.html's import map)
    /npm/fft.js/, /npm/wavefile/, /npm/pako/
                 runtimes/node/node_modules/fft.js/lib/, wavefile/dist/ and pako/dist/ (top-level files
                 only): the libraries of Whisper transcription (/lib/audio/spectrum.mjs, /lib/audio/io.mjs,
                 /lib/speech/longform.mjs); the CommonJS two through the page's shims (fft-shim.mjs,
                 wavefile-shim.mjs), pako's ES module directly; optional (text exports need none: without
                 them the page says so when it opens a Whisper export)
    /vad/        models/silero-vad (top-level files only): Silero VAD's ONNX file, which the page's "skip silence"
                 runs (/lib/speech/silero.mjs, vad.mjs), when the install has it
    /export/     the export folder (manifest.json, encoder.onnx, decoder.onnx, tokenizer.json)

Without --web-dir these come from the installed package (tfm_export.resources: a wheel's copies, or
the checkout's folders); with it, from that runtimes/web folder and its ../node.
"""

from __future__ import annotations

import errno
import functools
import http.server
import ipaddress
import logging
import os
import socket
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import InputError
from ..manifest import load_manifest
from ..resources import BUNDLES, bundled

log = logging.getLogger(__name__)

ORT_DIST = Path("node_modules", "onnxruntime-web", "dist")  # inside a runtimes/web folder, after `npm ci`
TOKENIZERS_DIST = Path("node_modules", "@huggingface", "tokenizers", "dist")  # likewise
NO_COPY = "this install has no copy; run `npm ci` in a checkout's runtimes/web and pass it as --web-dir"
# Node's copies of the speech libraries (runtimes/node's package-lock.json pins them): one version for both
SPEECH_DISTS = {"/npm/fft.js/": ("fft", Path("node_modules", "fft.js", "lib")),
                "/npm/wavefile/": ("wavefile", Path("node_modules", "wavefile", "dist")),
                "/npm/pako/": ("pako", Path("node_modules", "pako", "dist"))}
# mounts that serve only their folder's top-level files (not node_modules/)
FLAT = ("/", "/tokenizers/", "/vad/", *SPEECH_DISTS)
# mounts that serve only the files their bundle lists, subfolders included (runtimes/node's modules, not its
# node_modules/ or its Node-only files): what the page may import is what a wheel ships
LISTED = {"/lib/": frozenset(BUNDLES["lib"].files)}
MIME = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
        ".onnx": "application/octet-stream", ".data": "application/octet-stream",
        ".spm": "application/octet-stream", ".json": "application/json", ".map": "application/json"}


def _tokenizers_dist() -> Path:
    """The installed tokenizer library: its own bundle once tfm_export.resources lists one, else the
    page's node_modules (a checkout after `npm ci`; a wheel without the bundle has no copy)."""
    try:
        return bundled("tokenizers")
    except KeyError:
        return bundled("web") / TOKENIZERS_DIST


def asset_folders(web_dir: Path | None) -> tuple[Path, Path, Path, Path]:
    """(page, lib, ort, tokenizers) folders: the installed package's, or those of the runtimes/web folder given."""
    if web_dir is None:
        return bundled("web"), bundled("lib"), bundled("ort"), _tokenizers_dist()
    return web_dir, web_dir.parent / "node", web_dir / ORT_DIST, web_dir / TOKENIZERS_DIST


def speech_folders(web_dir: Path | None) -> dict[str, Path]:
    """URL prefix -> folder of the speech libraries that exist (the installed package's, or the checkout's
    runtimes/node/node_modules after `npm ci` there); missing ones are the page's one-line error."""
    found = {prefix: bundled(bundle) if web_dir is None else web_dir.parent / "node" / dist
             for prefix, (bundle, dist) in SPEECH_DISTS.items()}
    # Silero VAD: the package's model (a checkout's models/silero-vad, a wheel's copy) whatever --web-dir says
    found["/vad/"] = bundled("silero-vad")
    return {prefix: path.resolve() for prefix, path in found.items() if path.is_dir()}


def _require(folder: Path, package: str, page: Path) -> None:
    """npm's files are not in git: a checkout needs `npm ci`, a wheel built without it has no copy."""
    if not folder.is_dir():
        fix = f"run `npm ci` in {page}" if (page / "package.json").exists() else NO_COPY
        raise InputError(f"{package} not found in {folder}; {fix}")


def routes(export_dir: Path, web_dir: Path | None = None) -> dict[str, Path]:
    """URL prefix -> folder (longest prefixes first); checks that everything needed is there."""
    page, lib, ort_dist, tokenizers_dist = asset_folders(web_dir)
    if not (page / "index.html").exists():
        raise InputError(f"{page} has no index.html; pass a tfm-export checkout's runtimes/web as --web-dir")
    _require(ort_dist, "onnxruntime-web", page)
    _require(tokenizers_dist, "@huggingface/tokenizers", page)  # lib/text/tokenizer.mjs imports it on every page
    load_manifest(export_dir)  # a clear error now rather than a broken page later
    return {"/export/": export_dir.resolve(), "/ort/": ort_dist.resolve(), "/tokenizers/": tokenizers_dist.resolve(),
            **speech_folders(web_dir), "/lib/": lib.resolve(), "/": page.resolve()}


def _inside(prefix: str, folder: Path, target: Path, relative: str) -> bool:
    """Whether `target` (the resolved `relative` path under mount `prefix`) is one of the files it serves."""
    if prefix in LISTED:
        return relative in LISTED[prefix] and folder in target.parents
    return target.parent == folder if prefix in FLAT else folder in target.parents


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
                inside = _inside(prefix, folder, target, url_path[len(prefix):])
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
                web_dir: str | os.PathLike | None = None) -> http.server.ThreadingHTTPServer:
    """A server ready to `serve_forever()`; port 0 picks a free port (see `server_address`)."""
    mounts = routes(Path(export_dir), None if web_dir is None else Path(web_dir))
    if not is_loopback(host):
        log.warning("serving on %s: other machines can reach this demo server", host)
    try:
        return http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, mounts=mounts))
    except OSError as exc:
        raise listen_error(host, port, exc) from None


def listen_error(host: str, port: int, exc: OSError) -> InputError:
    """One line for a port that cannot be bound: a taken one said plainly, anything else with its reason."""
    if exc.errno == errno.EADDRINUSE:
        return InputError(f"port {port} on {host} is in use; pick another --port")
    return InputError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port")


def check_port(host: str, port: int) -> None:
    """Bind every address of host:port as asyncio's create_server (uvicorn) will, then let go: a taken port
    is one line before a model loads, not uvicorn's log line and exit 3 after it. (Another process may
    still take the port in between; uvicorn's own error covers that rare case.)"""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(f"cannot resolve --host {host} ({exc.strerror}); pass an address such as 127.0.0.1") \
            from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            if os.name == "posix":  # as asyncio does: a port in TIME_WAIT is free to a server, not in use
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):  # asyncio binds v4 and v6 apart
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise listen_error(host, port, exc) from None
