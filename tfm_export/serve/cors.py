"""Cross-origin requests: web pages on the origins given (`serve --cors-origin`) may call the server.

A page served from another origin (`tfm-export serve-web` on another port, an app's own site) needs
the server's consent before its browser lets it POST JSON with an API key. Starlette's CORSMiddleware
gives it to those origins only: POST (GET /healthz needs no preflight), the headers content-type and
authorization, and Retry-After readable by the page (a 429 says when to try again).
"""

from __future__ import annotations

from typing import Any, Sequence
from urllib.parse import urlsplit

from ..errors import InputError

ALLOW = {"allow_methods": ["POST"], "allow_headers": ["content-type", "authorization"],
         "expose_headers": ["Retry-After"]}


def check_origins(origins: Sequence[str]) -> None:
    """Each origin is `*` or scheme://host[:port] exactly as browsers send it (no path, no slash)."""
    for origin in origins:
        if origin == "*":
            continue
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or origin != f"{parts.scheme}://{parts.netloc}":
            raise InputError(f"{origin!r} is not an origin: give scheme://host[:port] as the browser shows it, "
                             f"without a path or a trailing slash (e.g. http://127.0.0.1:8000)")


def add_cors(app: Any, origins: Sequence[str]) -> None:
    """Answer preflights and mark answers for `origins`; nothing when there are none. Call it after
    every other middleware: it must be the outermost, so a preflight (which carries no API key) is
    answered before the key check, and that check's 401 still reaches the page as readable JSON."""
    if not origins:
        return
    from fastapi.middleware.cors import CORSMiddleware

    check_origins(origins)
    app.add_middleware(CORSMiddleware, allow_origins=list(origins), **ALLOW)
