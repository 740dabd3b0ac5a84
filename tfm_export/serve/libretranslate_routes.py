"""LibreTranslate's other routes, which its clients and front end call besides /translate and /languages:

    POST /detect                  q -> [{"language", "confidence"}] (text.detect, among the sources served)
    GET  /frontend/settings       the front end's settings (limits, key, file formats, default languages)
    POST /translate_file          multipart: file (.txt, .html/.htm, .md, .docx with python-docx), source, target,
                                  api_key -> {"translatedFileUrl"}
    GET  /download_file/{name}    the translated file, as an attachment named as the upload was

The routes take what they serve (serve.libretranslate_served.Served: the languages, and a translator for a
pair), so one export's server and a server of several exports register the same ones; on the latter a file
goes to the export that translates its source into its target (or `model`'s), through the pivot language
when none does (each leg's translated file is the next one's upload). Shapes and messages as
LibreTranslate's (its app.py). A translated file is kept FILE_LIFETIME seconds in a
temporary folder of the server's (removed at exit) under an unguessable name, as LibreTranslate keeps its
own; the download is open, as there.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse

from ..text import detect, markup
from .documents import run_steps, translate_texts
from .engine import ServeSettings
from .libretranslate_params import check_key, codes_of, keyed_params, libretranslate_errors, require
from .libretranslate_served import Served, Translator
from .schemas import error_responses
from .translation import HTTPFailure
from .upload import spooled_form

FILE_LIFETIME = 30 * 60  # seconds a translated file can be downloaded (LibreTranslate removes its after 30 min)
# An upload's extension -> how it is translated: as a document, as markup, or a Word file.
FILE_FORMATS = {".txt": "text", ".html": "html", ".htm": "html", ".md": "markdown", ".docx": "docx"}
STORED = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9._-]+")  # a stored file's name: uuid4 hex, the upload's name
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
DETECTIONS = {"type": "array", "items": {"type": "object", "required": ["confidence", "language"], "properties": {
    "confidence": {"type": "number", "minimum": 0, "maximum": 100}, "language": {"type": "string"}}}}
FILE_ANSWER = {"type": "object", "required": ["translatedFileUrl"],
               "properties": {"translatedFileUrl": {"type": "string", "description": "Where to download it."}}}


def docx_available() -> bool:
    try:
        import docx  # noqa: F401
    except ImportError:
        return False
    return True


def add_routes(app: FastAPI, settings: ServeSettings, state: dict[str, Any], served: Served) -> None:
    """/detect, /frontend/settings, /translate_file and /download_file/{name} on `app`, over what `served`
    serves (serve.libretranslate_served: one export's engine, or a server of several exports)."""
    keyed = (403,) if settings.api_key else ()
    formats = [ext for ext, kind in FILE_FORMATS.items() if kind != "docx" or docx_available()]
    files = tempfile.TemporaryDirectory(prefix="tfm-export-files-", dir=settings.upload_dir)
    state["translated_files"] = files  # removed with the app's state (and at exit)

    @app.post("/detect", response_model=None, openapi_extra=detect_body(), responses={
        200: {"description": "The text's likeliest languages, best first.",
              "content": {"application/json": {"schema": DETECTIONS}}}, **error_responses(400, *keyed)})
    async def detect_route(request: Request) -> Any:
        """LibreTranslate's detect: the language of `q` among the source languages served."""
        params = await keyed_params(request, settings.api_key)
        require(params, "q")
        if not isinstance(params["q"], str):
            raise HTTPFailure(400, "Invalid request: q must be a text")
        return await asyncio.to_thread(detect.detect, params["q"], served.sources, served.default)

    @app.get("/frontend/settings", responses={200: {"description": "LibreTranslate's front-end settings."}})
    async def frontend_settings() -> dict[str, Any]:
        """LibreTranslate's front-end settings: no character limit (long texts are split), the key, the files."""
        target = next((code for code in served.targets if code != served.default),
                      served.targets[0] if served.targets else "")
        return {"charLimit": -1, "frontendTimeout": 500, "apiKeys": bool(settings.api_key),
                "keyRequired": bool(settings.api_key), "suggestions": False, "filesTranslation": True,
                "supportedFilesFormat": formats,
                "language": {"source": {"code": "auto", "name": "Auto Detect"},
                             "target": {"code": target, "name": target}}}

    @app.post("/translate_file", response_model=None, openapi_extra=file_body(formats), responses={
        200: {"description": "Where the translated file is.", "content": {"application/json": {"schema": FILE_ANSWER}}},
        **error_responses(400, *keyed, 429, 500, 503)})
    async def translate_file(request: Request) -> Any:
        """LibreTranslate's translate_file: `file` from `source` into `target`; GET its translatedFileUrl."""
        name, data, params = await read_upload(request, settings, formats)
        kind = FILE_FORMATS[Path(name).suffix.lower()]
        with libretranslate_errors():
            translator = await choose(served, params, kind, data)

            async def leg(leg_state: dict[str, Any], value: bytes, source: str | None, target: str | None) -> Any:
                return await translate_upload(leg_state, settings, kind, value, source, target, request)

            translated = await translator.run(leg, data)
        if translated is None:
            return {}  # the client went away
        stored = f"{uuid.uuid4().hex}.{UNSAFE.sub('_', Path(name).name)}"
        await asyncio.to_thread(store, Path(files.name), stored, translated)
        return {"translatedFileUrl": str(request.url_for("download_file", filename=stored))}

    @app.get("/download_file/{filename}", include_in_schema=False)
    async def download_file(filename: str) -> Any:
        """A translated file (LibreTranslate's download_file: not in its spec either)."""
        path = Path(files.name) / filename
        if not STORED.fullmatch(filename):
            raise HTTPFailure(400, "Invalid filename")
        if not path.is_file():
            raise HTTPFailure(404, f"no translated file {filename} (files are kept {FILE_LIFETIME // 60} minutes)")
        return FileResponse(path, filename=filename.split(".", 1)[1])


async def choose(served: Served, params: dict[str, Any], kind: str, data: bytes) -> Translator:
    """The translator for the upload's source (for "auto" the file's language, detected among the codes that
    reach the target) and target, or the export `model` names (a server of several exports)."""
    source, target = codes_of(params)
    model = params.get("model") or None
    if source == "auto":
        codes = served.candidates(target, model)
        source = None
        if codes:
            text = await asyncio.to_thread(file_text, kind, data)
            default = served.default if served.default in codes else codes[0]
            source = (await asyncio.to_thread(detect.detect, text, codes, default))[0]["language"]
    return served.translator(source, target, model)


async def read_upload(request: Request, settings: ServeSettings, formats: list[str]) -> tuple[str, bytes, dict]:
    """(the file's name, its bytes, the other fields), checked as LibreTranslate checks them (400, 403)."""
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise HTTPFailure(400, "Invalid request: send a multipart/form-data body with the file as its `file` field")
    limit = int(settings.max_upload_mb * 2**20)
    try:
        async with spooled_form(request, limit, settings.upload_dir) as upload:
            params = {name: values[0] for name, values in upload.fields.items()}
            check_key(request, params, settings.api_key)
            codes_of(params)
            if upload.file_field != "file":
                raise HTTPFailure(400, "Invalid request: missing file parameter")
            if not upload.filename:
                raise HTTPFailure(400, "Invalid request: empty file")
            if Path(upload.filename).suffix.lower() not in formats:
                raise HTTPFailure(400, f"Invalid request: file format not supported (send {', '.join(formats)})")
            return upload.filename, await asyncio.to_thread(upload.path.read_bytes), params
    except HTTPFailure as exc:
        if exc.status == 413:
            raise HTTPFailure(400, f"Invalid request: the file is larger than this server's limit of "
                                   f"{settings.max_upload_mb:g} MB (tfm-export serve --max-upload-mb)") from None
        raise


def decoded(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise HTTPFailure(400, "Invalid request: the file is not UTF-8 text") from None


def file_text(kind: str, data: bytes) -> str:
    """What a file says (for detecting its language)."""
    if kind == "docx":
        from ..text.docx_file import docx_text

        return docx_text(data)
    text = decoded(data)
    return text if kind == "text" else markup.plain_text(text, kind)


async def translate_upload(state: dict[str, Any], settings: ServeSettings, kind: str, data: bytes,
                           source: str | None, target: str | None, request: Request) -> bytes | None:
    """A file's translation (its bytes); None when the client went away."""
    if kind == "docx":
        from ..text.docx_file import docx_steps

        return await run_steps(state, settings, docx_steps(data), {}, source, target, request)
    text = decoded(data)
    if kind == "text":
        out = await translate_texts(state, settings, [text], {}, source, target, request)
    else:
        out = await run_steps(state, settings, markup.steps_many([markup.parse(text, kind)]), {}, source, target,
                              request)
    return None if out is None else out[0].encode("utf-8")


def store(folder: Path, name: str, data: bytes) -> None:
    """The translated file, where download_file finds it; files older than FILE_LIFETIME removed (only names
    this server stored, in the server's own temporary folder)."""
    now = time.time()
    for old in folder.iterdir():
        if STORED.fullmatch(old.name) and old.is_file() and now - old.stat().st_mtime > FILE_LIFETIME:
            old.unlink(missing_ok=True)
    (folder / name).write_bytes(data)


def detect_body() -> dict[str, Any]:
    fields = {"type": "object", "required": ["q"], "properties": {
        "q": {"type": "string", "minLength": 1, "description": "The text whose language is wanted."},
        "api_key": {"type": "string", "description": "The API key (or Authorization: Bearer KEY)."}}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": fields},
                                                          "application/x-www-form-urlencoded": {"schema": fields}}}}


def file_body(formats: list[str]) -> dict[str, Any]:
    fields = {"type": "object", "required": ["file", "source", "target"], "properties": {
        "file": {"type": "string", "format": "binary", "description": f"The file: {', '.join(formats)}."},
        "source": {"type": "string", "description": 'Its language, or "auto".'},
        "target": {"type": "string", "description": "The language to translate it into."},
        "api_key": {"type": "string", "description": "The API key (or Authorization: Bearer KEY)."}}}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": fields}}}}
