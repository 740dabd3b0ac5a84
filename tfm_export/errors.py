"""Typed errors. Each message is one line: what is wrong and what to do.

The CLI turns any TfmExportError into a click.ClickException (no traceback). Torch-free.
"""

from __future__ import annotations

import re
from typing import Any, Callable


class TfmExportError(Exception):
    """Base class of every error this library raises on purpose.

    A message that names options the caller passed keeps them as data: `{name}` fields in the
    template and `options={name: value}` (value None: the option in general). `str()` names them
    in the library's terms (`options["heads"]`); the CLI renders its own flags (`--heads N`).
    Only `{name}` fields of the given options are replaced, so other braces in the message (a path,
    an exception's text) need no escaping.
    """

    def __init__(self, message: str = "", options: dict[str, Any] | None = None):
        self.template, self.options = message, dict(options or {})
        super().__init__(self.render(api_option) if self.options else message)

    def render(self, name_option: Callable[[str, Any], str]) -> str:
        """The message with each option named by `name_option(key, value)`."""
        if not self.options:
            return str(self)
        return OPTION_FIELD.sub(lambda m: name_option(m[1], self.options[m[1]]) if m[1] in self.options else m[0],
                                self.template)


OPTION_FIELD = re.compile(r"\{(\w+)\}")  # `{name}` in a message template


# Options that are keyword arguments or fields in the Python API rather than keys of load_any's `options`.
API_NAMES = {"trust_pickle": "trust_pickle=True", "opset": "ExportOptions.opset", "model": "the model argument",
             "revision": "the revision argument", "token": "the token argument"}


def api_option(key: str, value: Any = None) -> str:
    """How the Python API names an option: mostly the `options` dict of `importers.load_any`."""
    if key in API_NAMES:
        return API_NAMES[key] if value is None else f"{API_NAMES[key]} {value!r}"
    return f'options["{key}"]' if value is None else f'options["{key}"]={value!r}'


class CheckpointError(TfmExportError):
    """A checkpoint cannot be read or does not fit the model."""


class ConfigError(TfmExportError):
    """A model configuration is invalid or incomplete."""


class ExportError(TfmExportError):
    """Exporting a graph to ONNX failed."""


class ManifestError(TfmExportError):
    """An export folder is incomplete, corrupt or inconsistent with its manifest."""


class InputError(TfmExportError):
    """Inputs do not fit the model (token ids out of range, sequences too long, ...)."""


class AudioTooLong(InputError):
    """A recording longer than the caller's max_seconds (a server answers it with 413, naming its limit)."""


class OutputError(TfmExportError):
    """An output folder or file cannot (or must not) be written: it holds user files, no space, ..."""


class DeviceError(TfmExportError):
    """The requested device is not available."""


class ValidationError(TfmExportError):
    """ONNX outputs differ from the eager model; `report` holds the per-output rows."""

    def __init__(self, message: str, report: dict | None = None, options: dict[str, Any] | None = None):
        super().__init__(message, options)
        self.report = report or {}


def shorten(names: list[str], limit: int = 5) -> str:
    """`a, b, c, ... (+7 more)`: long key lists stay on one readable line."""
    names = list(names)
    head = ", ".join(names[:limit])
    return head if len(names) <= limit else f"{head}, ... (+{len(names) - limit} more)"


def load_object(reference: str, error: type[TfmExportError], what: str):
    """Import `module:attribute` lazily (optional dependencies load only when used)."""
    import importlib

    module_name, _, attribute = reference.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        raise error(f"the {what} is not available ({exc})") from None


def problem_list(*groups: tuple[str, list[str], int]) -> str:
    """`label: a, b, ...` for each non-empty (label, names, limit) group, joined by '; '."""
    return "; ".join(f"{label}: {shorten(names, limit)}" for label, names, limit in groups if names)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (the tools raise pages of text)."""
    if isinstance(exc, TfmExportError):
        return str(exc)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:limit]
