"""Markdown as text.markup's blocks, with markdown-it-py (CommonMark, plus GFM tables and strikethrough).

markdown-it's block tokens say which source lines an inline run (a paragraph, a heading, a list item's
text, a table cell) comes from, not where its words are; its inline children (text, emphasis, links,
code spans) carry their text unescaped and no positions. So each run's content is found line by line in
the source (it is the line less its container markers: `> `, `- `, `# `, indentation), and each child is
matched there in order (a text through its backslash escapes and entities), giving located atoms; a run
that cannot be located is left as it is (logged), never guessed. Translated: the text of paragraphs,
headings, list items and table cells, with emphasis, strikethrough and links carried (their URLs and
titles kept); kept: code spans (carried verbatim), code blocks, fences, HTML blocks, images, link
reference definitions, front matter-like lines that are not paragraphs. An image or a hard line break
inside a paragraph ends a block there.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

from .markup import Atom, Document, finish

log = logging.getLogger(__name__)

ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
ESCAPED = re.compile(r"([\\`*_\[\]<])")  # written with a backslash in a translation: markup characters
WINDOW = 8  # how far past the cursor a child's markup or text may start (spaces markdown-it dropped)
BREAKS = {"hardbreak", "image"}  # end a block
VOID_HTML = re.compile(r"<(?:br|img|hr|wbr|input)\b|<!--|<\?|<!", re.I)


class Unlocated(Exception):
    """A child of an inline run was not found where its predecessors end."""


def parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def parse(source: str) -> Document:
    """`source` (a Markdown document) as a Document."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    blocks, cursors = [], {}  # cursors: per source line, where the last located content ended (table cells)
    for token in parser().parse(source):
        if token.type != "inline" or not token.map or not token.children:
            continue
        try:
            offsets = locate_lines(token.content, token.map[0], lines, starts, cursors)
            runs = atoms_of(token.children, token.content, offsets)
        except Unlocated as exc:
            log.info("left untranslated: a Markdown run at line %d (%s)", token.map[0] + 1, exc)
            continue
        blocks += [block for run in runs if (block := finish(run, source)) is not None]
    return Document(source, blocks, lambda text: ESCAPED.sub(r"\\\1", text))


def locate_lines(content: str, first: int, lines: list[str], starts: list[int], cursors: dict) -> list[int]:
    """For each line of an inline run's content, where it starts in the source."""
    offsets = []
    for k, piece in enumerate(content.split("\n")):
        if first + k >= len(lines):
            raise Unlocated("past the last line")
        line = lines[first + k].rstrip("\r\n")
        least = cursors.get(first + k, 0)
        column = -1
        for candidate in (line, line.rstrip()):
            if candidate.endswith(piece) and len(candidate) - len(piece) >= least:
                column = len(candidate) - len(piece)
                break
        if column < 0:
            column = line.find(piece, least)
        if column < 0:
            raise Unlocated(f"line {first + k + 1} does not hold {piece[:30]!r}")
        cursors[first + k] = column + len(piece)
        offsets.append(starts[first + k] + column)
    return offsets


class Cursor:
    """A position in an inline run's content, and the mapping of content positions to the source."""

    def __init__(self, content: str, offsets: list[int]):
        self.content, self.at = content, 0
        self.line_starts = [0] + [n + 1 for n, c in enumerate(content) if c == "\n"]
        self.offsets = offsets

    def source(self, position: int) -> int:
        line = max(k for k, start in enumerate(self.line_starts) if start <= position)
        return self.offsets[line] + position - self.line_starts[line]

    def take(self, markup: str) -> tuple[int, int]:
        """The next `markup` (within WINDOW), as content positions; the cursor moves past it."""
        start = self.content.find(markup, self.at, self.at + WINDOW + len(markup))
        if not markup or start < 0:
            raise Unlocated(f"no {markup!r} near {self.content[self.at:self.at + 20]!r}")
        self.at = start + len(markup)
        return start, self.at

    def text(self, text: str) -> tuple[int, int]:
        """The next raw form of `text` (backslash escapes, entities)."""
        for start in range(self.at, min(len(self.content), self.at + WINDOW) + 1):
            end = match_text(self.content, start, text)
            if end is not None:
                self.at = end
                return start, end
        raise Unlocated(f"text {text[:30]!r} not found")

    def code(self, fence: str) -> tuple[int, int]:
        """A code span from its opening run of backticks to the closing run of the same length."""
        start, at = self.take(fence)
        closing = re.compile(f"(?<!`){fence}(?!`)")
        found = closing.search(self.content, at)
        if found is None:
            raise Unlocated("a code span's closing backticks")
        self.at = found.end()
        return start, self.at

    def link_end(self) -> tuple[int, int]:
        """A link's `]` with its destination: `](url "title")`, `][ref]` or `]` alone."""
        start, at = self.take("]")
        content = self.content
        if content.startswith("(", at):
            depth, at = 0, at
            while at < len(content):
                char = content[at]
                at += 2 if char == "\\" else 1
                depth += (char == "(") - (char == ")")
                if depth == 0:
                    break
        elif content.startswith("[", at):
            at = content.find("]", at) + 1 or len(content)
        self.at = at
        return start, at

    def image(self) -> None:
        """Past an image: `![alt](src)` (its alt may hold brackets)."""
        start, at = self.take("![")
        depth = 1
        while at < len(self.content) and depth:
            char = self.content[at]
            at += 2 if char == "\\" else 1
            depth += (char == "[") - (char == "]")
        self.at = at - 1
        self.link_end()


def match_text(raw: str, start: int, text: str) -> int | None:
    """Where `text` (unescaped) ends when its raw form starts at `start`, or None."""
    at, j = start, 0
    while j < len(text):
        entity = ENTITY.match(raw, at)
        if entity and html.unescape(entity.group()) != entity.group() and \
                text.startswith(html.unescape(entity.group()), j):
            at, j = entity.end(), j + len(html.unescape(entity.group()))
        elif raw.startswith("\\", at) and raw.startswith(text[j], at + 1):
            at, j = at + 2, j + 1
        elif raw.startswith(text[j], at):
            at, j = at + 1, j + 1
        else:
            return None
    return at


def atoms_of(children: list[Any], content: str, offsets: list[int]) -> list[list[Atom]]:
    """An inline run's children as runs of located atoms (an image or a hard break ends one)."""
    cursor = Cursor(content, offsets)
    runs: list[list[Atom]] = [[]]

    def add(kind: str, span: tuple[int, int], text: str = "") -> None:
        runs[-1].append(Atom(kind, cursor.source(span[0]), cursor.source(span[1]), text))

    autolink = False
    for child in children:
        kind = child.type
        if autolink:  # <https://...>: kept whole, its text is the address
            autolink = kind != "link_close"
            continue
        if kind == "text":
            add("text", cursor.text(child.content), child.content)
        elif kind == "softbreak":
            add("text", cursor.take("\n"), " ")
        elif kind == "code_inline":
            add("keep", cursor.code(child.markup), child.content)
        elif kind == "link_open" and child.markup == "autolink":
            start, end = cursor.take("<")[0], content.find(">", cursor.at) + 1
            if not end:
                raise Unlocated("an autolink's >")
            cursor.at = end
            add("keep", (start, end), "")
            autolink = True
        elif kind == "link_open":
            add("open", cursor.take("["))
        elif kind == "link_close":
            add("close", cursor.link_end())
        elif kind.endswith("_open") or kind.endswith("_close"):  # em, strong, s
            add("open" if kind.endswith("_open") else "close", cursor.take(child.markup))
        elif kind == "html_inline" and not VOID_HTML.match(child.content):
            add("close" if child.content.startswith("</") else "open", cursor.take(child.content))
        elif kind in BREAKS or kind == "html_inline":
            if kind == "image":
                cursor.image()
            elif kind == "hardbreak":
                cursor.take("\n")
            else:
                cursor.take(child.content)
            runs.append([])
        else:
            raise Unlocated(f"a {kind} token")
    return runs
