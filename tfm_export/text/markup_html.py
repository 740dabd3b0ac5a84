"""HTML as text.markup's blocks, with the standard library's parser (html.parser: HTML5's tokenising
rules for tags, attributes, comments, character references and <script>/<style> contents; no DOM, so
what it reads is located in the source and written back byte for byte).

Blocks: the text between block-level tags (p, li, td, h1, div, br...), with inline elements (b, i, a,
span, em...) inside them carried. Never translated: tags and attributes, comments, doctypes, the contents
of <pre>, <script>, <style>, <textarea>, <svg>, <math>, and of any element marked translate="no" or
class="notranslate" (HTML's and Google's conventions; argos-translate also skips translate="no"); an
inline <code>, <kbd>, <samp> or <var> inside a sentence is carried verbatim.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser
from typing import Any

from .markup import Atom, Document, finish

INLINE = frozenset("a abbr b bdi bdo cite data del dfn em font i ins label mark q s small span strike strong sub "
                   "sup time u".split())
KEEP_INLINE = frozenset("code kbd samp tt var".split())  # inline, carried verbatim
KEEP_BLOCK = frozenset("pre script style textarea svg math template noscript".split())  # left as it is
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class Events(HTMLParser):
    """The parser's events, each with where it starts in the source (its raw text runs to the next one)."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.lines = [0] + [n + 1 for n, c in enumerate(source) if c == "\n"]
        self.events: list[tuple[int, str, str, Any]] = []

    def at(self) -> int:
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.events.append((self.at(), "start", tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.events.append((self.at(), "startend", tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.events.append((self.at(), "end", tag, None))

    def handle_data(self, data: str) -> None:
        self.events.append((self.at(), "data", "", data))

    def other(self, *_: Any) -> None:
        self.events.append((self.at(), "other", "", None))

    handle_comment = handle_decl = handle_pi = unknown_decl = other


def kept(tag: str, attrs: dict) -> bool:
    """An element whose contents are not translated."""
    classes = (attrs.get("class") or "").split()
    return tag in KEEP_INLINE or tag in KEEP_BLOCK or attrs.get("translate") == "no" or "notranslate" in classes


def parse(source: str) -> Document:
    """`source` (an HTML document or fragment) as a Document."""
    parser = Events(source)
    parser.feed(source)
    parser.close()
    events = parser.events
    ends = [start for start, *_ in events[1:]] + [len(source)]
    blocks, atoms = [], []
    skipping: tuple[str, int, int, list[str]] | None = None  # (tag, depth, start, texts) of a kept element

    def flush() -> None:
        block = finish(atoms, source)
        if block is not None:
            blocks.append(block)
        atoms.clear()

    for (start, kind, tag, value), end in zip(events, ends):
        if skipping is not None:
            name, depth, first, texts = skipping
            depth += (kind == "start" and tag == name) - (kind == "end" and tag == name)
            if kind == "data":
                texts.append(value)
            skipping = (name, depth, first, texts) if depth else None
            if not depth and name in INLINE | KEEP_INLINE:
                atoms.append(Atom("keep", first, end, "".join(texts)))
            continue
        if kind == "data":
            atoms.append(Atom("text", start, end, value))
        elif kind in ("start", "startend") and tag not in VOID and kept(tag, value):
            inline = tag in INLINE | KEEP_INLINE
            if not inline:
                flush()
            if kind == "start":
                skipping = (tag, 1, start, [])
            elif inline:
                atoms.append(Atom("keep", start, end, ""))
        elif kind in ("start", "end") and tag in INLINE:
            atoms.append(Atom("open" if kind == "start" else "close", start, end))
        else:  # block-level and void tags, comments, doctypes: a block ends
            flush()
    if skipping is not None and skipping[0] in INLINE | KEEP_INLINE:  # never closed: kept to the end
        atoms.append(Atom("keep", skipping[2], len(source), "".join(skipping[3])))
    flush()
    return Document(source, blocks, lambda text: html.escape(text, quote=False))
