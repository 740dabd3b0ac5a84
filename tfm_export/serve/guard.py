"""The API key check and the request counter, as plain ASGI middleware around the app.

Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) pipes every response body through an
extra task and memory stream. A streamed translation sends one chunk per decoder step, so that hop
ran for every token of every stream; here each ASGI message is looked at once and passed on.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

# Answered without the API key: probes, the schema, and LibreTranslate's language list (open there too).
OPEN_PATHS = ("/healthz", "/docs", "/openapi.json", "/languages")
# Checked by the route itself: LibreTranslate clients may send the key as `api_key` in the body.
SELF_CHECKED = ("/translate",)
COUNTED = ("/v1/", "/translate")  # requests on these paths are counted by status (tfm_export_requests_total)

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

    def __init__(self, app: ASGIApp, api_key: str | None, count: Callable[[int], None]):
        self.app, self.api_key, self.count = app, api_key, count

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan (and websockets, which the app has none of)
            await self.app(scope, receive, send)
            return
        path = scope["path"]

        async def send_counted(message: Message) -> None:
            if message["type"] == "http.response.start" and path.startswith(COUNTED):
                self.count(message["status"])
            await send(message)

        checked = path in OPEN_PATHS or path in SELF_CHECKED
        if self.api_key and not checked and not authorized(scope, self.api_key):
            refused = JSONResponse({"error": "missing or wrong API key; send Authorization: Bearer KEY"}, 401,
                                   {"WWW-Authenticate": "Bearer"})
            await refused(scope, receive, send_counted)
            return
        await self.app(scope, receive, send_counted)
