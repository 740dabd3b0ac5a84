"""`generate`'s sources from its flags: --text, --ids, --input (a file or standard input, a source per line) or
--features, each with a label for messages; --split-sentences' documents; text encoded, ids given EOS, feature
files read by the export's declared encoder input. Bad input is one ClickException naming the source."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from .common import parse_int_list


def read_sources(text: tuple[str, ...], ids: tuple[str, ...], input_file: Path | None, input_format: str,
             features: tuple[Path, ...]) -> tuple[str, list[Any], list[str]]:
    """(kind, sources, a label per source for messages: "source N", or "FILE line N" for --input)."""
    given = sum(bool(x) for x in (text, ids, input_file, features))
    if given != 1:
        raise click.UsageError("give exactly one of --text, --ids, --input (- for standard input) or --features")
    if features:  # read once the export says what its encoder takes (feature_sources)
        return "features", list(features), []
    if text or ids:
        kind = "text" if text else "ids"
        sources = list(text) if text else [parse_int_list(i, "--ids") for i in ids]
        labels = [f"source {n}" for n in range(1, len(sources) + 1)]
    else:
        where = "standard input" if str(input_file) == "-" else str(input_file)
        numbered = [(n, ln) for n, ln in enumerate(read_text(input_file).splitlines(), 1) if ln.strip()]
        kind, labels = input_format, [f"{where} line {n}" for n, _ in numbered]
        sources = [parse_int_list(ln, label) if kind == "ids" else ln for label, (_, ln) in zip(labels, numbered)]
    # One rule for text and ids: an empty source has nothing to translate.
    empty = next((label for label, s in zip(labels, sources) if not s), None)
    if empty is not None:
        raise click.ClickException(f"{empty} is empty; give at least one character or token id")
    return kind, sources, labels


# --input's extension -> its markup (generate --format's default)
MARKUP_EXTENSIONS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown"}


def markup_of(path: Path | None) -> str:
    return MARKUP_EXTENSIONS.get(path.suffix.lower(), "text") if path is not None and str(path) != "-" else "text"


def read_documents(text: tuple[str, ...], ids: tuple[str, ...], input_file: Path | None, input_format: str,
               features: tuple[Path, ...], per_source_output: bool) -> list[str]:
    """--split-sentences' documents: each --text, or the --input file whole."""
    if ids or features or input_format != "text" or per_source_output:
        raise click.UsageError("--split-sentences translates text documents (--text or --input); it takes no --ids, "
                               "--features, --input-format ids, --json or --stream")
    if bool(text) == bool(input_file):
        raise click.UsageError("give --text or --input (- for standard input) with --split-sentences")
    return list(text) if text else [read_text(input_file)]


def encode_texts(model: Any, texts: list[str], labels: list[str], source_lang: str | None, target_lang: str | None
            ) -> list[list[int]]:
    """Every text encoded before any is decoded; a text the tokenizer cannot encode is named by its label."""
    encoded = []
    for label, text in zip(labels, texts):
        try:
            encoded.append(model.encode(text, source_lang, target_lang))
        except InputError as exc:
            raise InputError(f"{label}: {exc.template}", exc.options) from None
    return encoded


def read_text(path: Path) -> str:
    try:
        if str(path) == "-":
            return sys.stdin.buffer.read().decode("utf-8-sig")
        return path.read_text(encoding="utf-8-sig")  # -sig: a byte order mark (Windows editors) is not text
    except UnicodeDecodeError as exc:
        where = "standard input" if str(path) == "-" else path
        raise click.ClickException(f"{where} is not UTF-8 text (byte {exc.start}); pass a text file, one "
                                   f"source per line") from None


def feature_sources(model: Any, paths: list[Path]) -> tuple[list[str], list[Any]]:
    """--features files -> (a label per source: the file, with [i] for the sources of a batch file; the
    arrays), read by the export's declared encoder input (runtime.sources.read_feature_file)."""
    from ..runtime.sources import read_feature_file

    labels, arrays = [], []
    for path in paths:
        rows = read_feature_file(path, model.manifest.encoder_input)
        labels += [f"{path}[{i}]" if len(rows) > 1 else str(path) for i in range(len(rows))]
        arrays += rows
    return labels, arrays


def with_eos(sources: list[list[int]], tokenizer: Any) -> list[list[int]]:
    """--ids follow the tokenizer's convention: when encoding appends only EOS, append it if missing
    (ids for a language-marking template are taken as given)."""
    suffix = tokenizer.encode("")  # [eos] for tokenizers that end every source with it
    if len(suffix) != 1:
        return sources
    return [s if s[-1:] == suffix else s + suffix for s in sources]
