"""The API key check, the request counter and the body size limit, as plain ASGI middleware around the app.

Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) pipes every response body through an
extra task and memory stream. A streamed translation sends one chunk per decoder step, so that hop
ran for every token of every stream; here each ASGI message is looked at once and passed on.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

# Answered without the API key: probes, the schema, and LibreTranslate's language list, front-end settings and
# translated files' downloads (open there too: a file's address is an unguessable name).
OPEN_PATHS = ("/healthz", "/docs", "/openapi.json", "/languages", "/frontend/settings")
OPEN_PREFIXES = ("/download_file/",)
# Checked by the route itself: LibreTranslate clients may send the key as `api_key` in the body (or the form).
SELF_CHECKED = ("/translate", "/detect", "/translate_file")
COUNTED = ("/v1/", "/translate")  # requests on these paths are counted by status (tfm_export_requests_total)
# A body over the limit is answered with this status: LibreTranslate's route answers every limit with 400.
OVER_LIMIT = {"/translate": 400, "/detect": 400}
# Bytes a source token may take in a request (a long subword, escaped in JSON, with its separators): the body
# limit is this per token of max_texts sources of the longest length, and room for the options.
BYTES_PER_TOKEN, OPTIONS_BYTES = 256, 64 * 1024


def body_limit(max_texts: int, max_src_len: int) -> int:
    """The largest request body a valid text request can need: larger ones are refused before they are read
    (a 30 MB body was read and tokenised before its 413)."""
    return OPTIONS_BYTES + max_texts * max_src_len * BYTES_PER_TOKEN


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a body without Content-Length passes the limit: an HTTPException, so that
    FastAPI's body parsing passes it on and the app answers it as JSON (serve.app)."""

Scope = dict[str, Any]
Message = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def authorized(scope: Scope, key: str) -> bool:
    """The request carries `Authorization: Bearer KEY` (compared in constant time)."""
    given = Headers(scope=scope).get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())


class Guard:
    """Refuses requests without the API key (401, except OPEN_PATHS and SELF_CHECKED) and counts the
    translation answers by status."""

    def __init__(self, app: ASGIApp, api_key: str | None, count: Callable[[int], None], max_body: int | None = None):
        self.app, self.api_key, self.count, self.max_body = app, api_key, count, max_body

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan, and websockets (serve.realtime checks the key itself)
            await self.app(scope, receive, send)
            return
        path = scope["path"]

        async def send_counted(message: Message) -> None:
            if message["type"] == "http.response.start" and path.startswith(COUNTED):
                self.count(message["status"])
            await send(message)

        checked = path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or path in SELF_CHECKED
        if self.api_key and not checked and not authorized(scope, self.api_key):
            refused = JSONResponse({"error": "missing or wrong API key; send Authorization: Bearer KEY"}, 401,
                                   {"WWW-Authenticate": "Bearer"})
            await refused(scope, receive, send_counted)
            return
        if self.max_body is not None and _limited(scope):
            status, why = OVER_LIMIT.get(path, 413), self._over(scope)
            if why:
                await JSONResponse({"error": why, "limit": "max_body_bytes"}, status)(scope, receive, send_counted)
                return
            receive = self._counting(receive, status)
        await self.app(scope, receive, send_counted)

    def _over(self, scope: Scope) -> str | None:
        """Why the declared Content-Length is refused (None: it is not, or there is none)."""
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return (f"the request body is {int(length)} bytes, over this server's limit of {self.max_body} "
                    f"(max_texts sources of the longest length); send fewer or shorter texts")
        return None

    def _counting(self, receive: Any, status: int) -> Any:
        """`receive` that stops a body without Content-Length (chunked) once it passes the limit."""
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise BodyTooLarge(status, f"the request body passed this server's limit of {self.max_body} bytes "
                                           f"(max_texts sources of the longest length); send fewer or shorter texts")
            return message
        return counted


def _limited(scope: Scope) -> bool:
    """A body the limit applies to: not an upload (multipart, which serve.upload spools under its own limit)."""
    kind = Headers(scope=scope).get("content-type", "")
    return scope["method"] in ("POST", "PUT", "PATCH") and not kind.lower().startswith("multipart/")
