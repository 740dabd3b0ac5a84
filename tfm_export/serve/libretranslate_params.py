"""A LibreTranslate request's side that all its routes share (serve.libretranslate, serve.libretranslate_routes,
serve.multi): its parameters (a JSON body or a url-encoded form), its API key (`api_key` or `Authorization:
Bearer KEY`), the parameters it must have, and failures in LibreTranslate's statuses (400 for limits and bad
values, 403 for the key, 429 "Slowdown").
"""

from __future__ import annotations

import hmac
import json
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import parse_qsl

from fastapi import Request

from ..errors import TfmExportError
from .guard import authorized
from .translation import HTTPFailure, failure_from

FORM = "application/x-www-form-urlencoded"


async def read_params(request: Request) -> dict[str, Any]:
    """The parameters of a JSON body or a url-encoded form (the first value of a repeated field, as
    LibreTranslate's Flask reads them); 400 for anything else."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if kind == "application/json" or kind.endswith("+json"):
        try:
            params = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise HTTPFailure(400, "Invalid JSON format") from None
        if not isinstance(params, dict):
            raise HTTPFailure(400, "Invalid JSON format: send an object, e.g. {\"q\": \"...\", ...}")
        return params
    if kind in ("", FORM):
        try:
            fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except (ValueError, UnicodeDecodeError):
            raise HTTPFailure(400, "Invalid form: send UTF-8 text url-encoded") from None
        params: dict[str, Any] = {}
        for name, value in fields:
            params.setdefault(name, value)
        return params
    raise HTTPFailure(400, f"send the parameters as JSON or as {FORM}, not {kind}")


async def keyed_params(request: Request, key: str | None) -> dict[str, Any]:
    """A LibreTranslate request's parameters (read_params), its key checked (check_key)."""
    params = await read_params(request)
    check_key(request, params, key)
    return params


def check_key(request: Request, params: dict[str, Any], key: str | None) -> None:
    """LibreTranslate's key check (403): `api_key`, or this server's Bearer header."""
    given = params.get("api_key")
    if "api_key" in params and not isinstance(given, str):
        raise HTTPFailure(400, "Invalid request: api_key must be a text")
    if not key or authorized(request.scope, key):
        return
    if not isinstance(given, str) or not given:
        raise HTTPFailure(403, "Missing API key: send api_key or Authorization: Bearer KEY")
    if not hmac.compare_digest(given.encode(), key.encode()):
        raise HTTPFailure(403, "Invalid API key")


def require(params: dict[str, Any], *names: str) -> None:
    """LibreTranslate's 400 for the first of `names` that is missing (absent, empty)."""
    for name in names:
        if params.get(name) in (None, "", []):
            raise HTTPFailure(400, f"Invalid request: missing {name} parameter")


def codes_of(params: dict[str, Any]) -> tuple[str, str]:
    """(source, target) of a request, given and texts (400 otherwise)."""
    require(params, "source", "target")
    source, target = params["source"], params["target"]
    if not isinstance(source, str) or not isinstance(target, str):
        raise HTTPFailure(400, "Invalid request: source and target must be language codes")
    return source, target


def as_libretranslate(failure: HTTPFailure) -> HTTPFailure:
    """A native failure in LibreTranslate's statuses: limits and bad values are its 400s."""
    message = failure.body["error"]
    if failure.status == 429:
        return HTTPFailure(429, f"Slowdown: {message}", failure.headers)
    if failure.status in (413, 422):
        return HTTPFailure(400, f"Invalid request: {message}")
    return HTTPFailure(failure.status, message, failure.headers)


@contextmanager
def libretranslate_errors() -> Iterator[None]:
    """Library errors and native failures raised in the block, in LibreTranslate's statuses (as_libretranslate)."""
    try:
        yield
    except TfmExportError as exc:
        raise as_libretranslate(failure_from(exc)) from None
    except HTTPFailure as exc:
        raise as_libretranslate(exc) from None
