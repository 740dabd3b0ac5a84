"""A multipart/form-data upload read as it arrives: its one file spooled to a temporary file on disk that is
always removed, its other fields as text.

Starlette's `request.form()` would keep the file in a SpooledTemporaryFile (memory up to 1 MB) and read the
whole body before the route could look at its size. Here python-multipart's parser (the one Starlette
uses) is fed chunk by chunk: a file over `max_bytes` is refused (413) as soon as it passes the limit, a
body that is not a form or is malformed is a 400, and the file lands in `upload_dir` (the system's
temporary folder by default) under a name the server picks, removed when the request ends, whatever
happened. Torch-free.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from .translation import HTTPFailure

SPOOL_PREFIX = "tfm-export-upload-"  # the spooled files' names start with it (tests look for leftovers)
MAX_FIELDS = 32  # form fields besides the file: OpenAI's API has a dozen
MAX_FIELD_BYTES = 64 * 1024  # one text field (a prompt is a few hundred tokens)
# Boundaries and part headers around the file: a Content-Length this far over max_bytes is refused unread.
FORM_OVERHEAD = 64 * 1024


@dataclass
class Upload:
    """The form: its text fields (each name's values, in order) and its file (None: no file part)."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    path: Path | None = None  # the spooled file, while the request lasts
    file_field: str | None = None  # the form field the file came in
    filename: str | None = None
    size: int = 0  # the file's bytes


def too_large(max_bytes: int) -> HTTPFailure:
    return HTTPFailure(413, f"the upload is larger than this server's limit of {max_bytes / 2**20:g} MB "
                            f"(max_upload_mb, a server setting: tfm-export serve --max-upload-mb); send a "
                            f"shorter or more compressed recording", limit="max_upload_mb")


def boundary_of(request: Request) -> bytes:
    """The form's boundary; a 400 naming what to send for any other body."""
    kind, params = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data" or b"boundary" not in params:
        got = request.headers.get("content-type") or "no Content-Type"
        raise HTTPFailure(400, f"send a multipart/form-data body with the audio as its `file` field (got {got})")
    return params[b"boundary"]


class FormReader:
    """python-multipart's callbacks: text fields collected, file bytes handed to `pending` for writing."""

    def __init__(self, upload: Upload, max_bytes: int):
        self.upload, self.max_bytes = upload, max_bytes
        self.header_name, self.header_value = bytearray(), bytearray()  # the header being read
        self.disposition = b""  # the part's Content-Disposition: its name and filename
        self.name, self.is_file, self.value = "", False, bytearray()
        self.pending: list[bytes] = []  # file bytes parsed and not written yet

    def callbacks(self) -> dict[str, object]:
        return {"on_part_begin": self.begin, "on_header_field": self.header_field,
                "on_header_value": self.header_data, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_done, "on_part_data": self.data, "on_part_end": self.end}

    def begin(self) -> None:
        self.disposition, self.name, self.is_file, self.value = b"", "", False, bytearray()

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def header_data(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def header_end(self) -> None:
        if self.header_name.lower() == b"content-disposition":
            self.disposition = bytes(self.header_value)
        self.header_name, self.header_value = bytearray(), bytearray()

    def headers_done(self) -> None:
        _, options = parse_options_header(self.disposition)
        if b"name" not in options:
            raise HTTPFailure(400, "a form part has no name (its Content-Disposition header); send a "
                                   "multipart/form-data body as HTTP clients write it")
        self.name = options[b"name"].decode("utf-8", "replace")
        self.is_file = b"filename" in options
        if self.is_file:
            if self.upload.file_field is not None:
                raise HTTPFailure(400, "the form holds more than one file; send one recording per request",
                                  field=self.name)
            self.upload.file_field = self.name
            self.upload.filename = options[b"filename"].decode("utf-8", "replace")
        elif sum(map(len, self.upload.fields.values())) >= MAX_FIELDS:
            raise HTTPFailure(400, f"the form has more than {MAX_FIELDS} fields")

    def data(self, data: bytes, start: int, end: int) -> None:
        if self.is_file:
            self.upload.size += end - start
            if self.upload.size > self.max_bytes:
                raise too_large(self.max_bytes)
            self.pending.append(data[start:end])
        else:
            self.value += data[start:end]
            if len(self.value) > MAX_FIELD_BYTES:
                raise HTTPFailure(413, f"the form field {self.name} is longer than {MAX_FIELD_BYTES // 1024} KB",
                                  field=self.name)

    def end(self) -> None:
        if not self.is_file:
            self.upload.fields.setdefault(self.name, []).append(self.value.decode("utf-8", "replace"))


@asynccontextmanager
async def spooled_form(request: Request, max_bytes: int, upload_dir: str | None = None) -> AsyncIterator[Upload]:
    """The request's form, its file spooled to `upload_dir` (removed on the way out, whatever happened);
    HTTPFailure 400 for a body that is not a well-formed form, 413 for a file over `max_bytes`."""
    boundary = boundary_of(request)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes + FORM_OVERHEAD:  # refused before reading it
        raise too_large(max_bytes)
    descriptor, name = tempfile.mkstemp(prefix=SPOOL_PREFIX, dir=upload_dir)
    upload = Upload(path=Path(name))
    try:
        with os.fdopen(descriptor, "wb") as spool:
            await _parse(request, boundary, FormReader(upload, max_bytes), spool)
        yield upload
    finally:
        os.unlink(name)


async def _parse(request: Request, boundary: bytes, reader: FormReader, spool: BinaryIO) -> None:
    parser = MultipartParser(boundary, reader.callbacks())
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if reader.pending:  # the disk write off the event loop
                data, reader.pending = b"".join(reader.pending), []
                await asyncio.to_thread(spool.write, data)
        parser.finalize()
    except FormParserError as exc:
        raise HTTPFailure(400, f"the multipart/form-data body is malformed ({exc}); send it as HTTP clients "
                               f"write it") from None
    except ClientDisconnect:
        raise HTTPFailure(400, "the client went away before the upload ended") from None
