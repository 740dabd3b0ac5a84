"""Documents with markup (HTML, Markdown) as the texts to translate and a template to put them back in.
Torch-free, pure: no model here, a translator is a function from texts to texts that the caller runs.

A parser (text.markup_html: the standard library's html.parser; text.markup_md: markdown-it-py's tokens)
cuts the source into blocks, each a run of atoms located in the source: text (translated), the markup of
an inline element (`<b>`, `**`, `[`...`](url)`: its open and close) and kept pieces (`<code>`, a code
span: carried verbatim). Everything outside the blocks (tags between blocks, attributes, comments,
<pre>/<script>/<style>, code blocks) is never touched, so the output is byte-identical to the source there.

A block is translated whole, as one text (the model sees the sentence, not its fragments), and its inline
elements are carried to the translation as argos-translate's translate_html does (LibreTranslate's
format=html): each element's own text is translated alone and found in the block's translation, where
the element's markup is put around it; a kept piece is found as it was. When one is not found (the model
rephrased it) or elements overlap, the block falls back to translating each text atom alone between its
markup: the markup stays where it was and nothing is lost. A text whose translation is itself (an identity
translator, a name) is written back as its source bytes (entities and line breaks as they were).

The protocol is a generator (`steps`): it yields the texts to translate, is sent their translations,
yields the fallbacks' texts, is sent theirs and returns the document, so a synchronous caller (the
library, `translate_markup`) and an asynchronous one (the server) drive the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence

from ..errors import InputError

FORMATS = ("text", "html", "markdown")
PARSERS = {"html": ".markup_html", "markdown": ".markup_md"}  # a format's parser module
SPACES = re.compile(r"[ \t\n\r\f]+")  # HTML's and Markdown's whitespace (a no-break space is text)
# Punctuation a model adds to a lone fragment's translation ("Paris." for "Paris"), tried without.
FRAGMENT_EDGES = ".!?;:,\"'«»“”„ "


@dataclass(frozen=True)
class Atom:
    """A located piece of a block: source[start:end] is its raw text or markup."""

    kind: str  # "text": translated; "open"/"close": an inline element's markup; "keep": carried verbatim
    start: int
    end: int
    text: str = ""  # text: what the model reads (unescaped); keep: what must reappear in the translation


@dataclass
class Block:
    """A run of atoms translated as one text (a paragraph, a heading, a table cell)."""

    atoms: list[Atom] = field(default_factory=list)

    def text(self) -> str:
        return SPACES.sub(" ", "".join(a.text for a in self.atoms if a.kind in ("text", "keep"))).strip()

    def spans(self) -> list[tuple[int, int]] | None:
        """The top-level inline elements and kept pieces as (first atom, last atom) index pairs; None when
        an element is unbalanced or holds markup between its texts (not carried: the fallback)."""
        spans, depth, first = [], 0, 0
        for n, atom in enumerate(self.atoms):
            if atom.kind == "keep" and depth == 0:
                spans.append((n, n))
            elif atom.kind == "open":
                first, depth = (n if depth == 0 else first), depth + 1
            elif atom.kind == "close":
                depth -= 1
                if depth < 0:
                    return None
                if depth == 0:
                    spans.append((first, n))
        if depth:
            return None
        return spans if all(self.simple(a, b) for a, b in spans) else None

    def simple(self, first: int, last: int) -> bool:
        """An element whose markup is all around its text: `<b><i>x</i></b>`, not `<a>x <code>y</code></a>`."""
        inner = [n for n in range(first, last + 1) if self.atoms[n].kind in ("text", "keep")]
        if not inner:
            return False
        if first == last:
            return True
        kinds = {self.atoms[n].kind for n in inner}
        return kinds == {"text"} and all(self.atoms[n].kind == "text" for n in range(inner[0], inner[-1] + 1))


@dataclass
class Document:
    """A parsed source: its blocks, and how a translated text is written in its syntax."""

    source: str
    blocks: list[Block]
    escape: Callable[[str], str]


def span_text(block: Block, first: int, last: int) -> str:
    return SPACES.sub(" ", "".join(block.atoms[n].text for n in range(first, last + 1)
                                   if block.atoms[n].kind in ("text", "keep"))).strip()


def steps(document: Document) -> Generator[list[str], list[str], str]:
    """Yields the texts to translate (each block's, each carried element's), is sent their translations,
    yields the texts of the blocks that fell back (each text atom's), is sent theirs; returns the output."""
    wanted: list[str] = []
    for block in document.blocks:
        wanted.append(block.text())
        for first, last in block.spans() or []:
            if block.atoms[first].kind != "keep":
                wanted.append(span_text(block, first, last))
    translated = dict(zip(unique(wanted), (yield unique(wanted))))
    placed = [carry(document, block, translated) for block in document.blocks]
    fallback = [atom.text.strip() for block, out in zip(document.blocks, placed) if out is None
                for atom in block.atoms if atom.kind == "text" and atom.text.strip()]
    again = dict(zip(unique(fallback), (yield unique(fallback)) if fallback else []))
    out, at = [], 0
    for block, text in zip(document.blocks, placed):
        start, end = block.atoms[0].start, block.atoms[-1].end
        out += [document.source[at:start], text if text is not None else atom_by_atom(document, block, again)]
        at = end
    return "".join(out) + document.source[at:]


def unique(texts: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def carry(document: Document, block: Block, translated: dict[str, str]) -> str | None:
    """The block's translation with its inline elements put around their words; None when one is not
    found (the fallback)."""
    source_text, spans = block.text(), block.spans()
    whole = translated[source_text]
    if whole == source_text:
        return document.source[block.atoms[0].start:block.atoms[-1].end]
    if spans is None:
        return None
    placed: list[tuple[int, int, int, int]] = []  # (start, end in the translation, first atom, last atom)
    for first, last in spans:
        kept = block.atoms[first].kind == "keep"
        found = find(whole, span_text(block, first, last) if kept else translated[span_text(block, first, last)],
                     placed, exact=kept)
        if found is None:
            return None
        placed.append((*found, first, last))
    out, at = [], 0
    for start, end, first, last in sorted(placed):
        out += [document.escape(whole[at:start]), element(document, block, first, last, whole[start:end])]
        at = end
    return "".join(out) + document.escape(whole[at:])


def find(text: str, wanted: str, taken: list[tuple[int, ...]], exact: bool) -> tuple[int, int] | None:
    """Where `wanted` is in `text` outside the places taken: as it is, else (a translated fragment) in
    another case or without the punctuation a lone fragment gets."""
    candidates = [wanted] if exact else unique([wanted, wanted.strip(FRAGMENT_EDGES)])
    for candidate in (c for c in candidates if c):
        for haystack, needle in ((text, candidate), *(() if exact else ((text.casefold(), candidate.casefold()),))):
            if len(haystack) != len(text):
                continue  # a case fold that changes lengths would misplace the cut
            start = haystack.find(needle)
            while start != -1:
                end = start + len(needle)
                if all(end <= a or start >= b for a, b, *_ in taken):
                    return start, end
                start = haystack.find(needle, start + 1)
    return None


def element(document: Document, block: Block, first: int, last: int, words: str) -> str:
    """An inline element around its translated words: its markup before and after them, as it was."""
    atoms = block.atoms
    if atoms[first].kind == "keep":
        return document.source[atoms[first].start:atoms[first].end]
    inner = [n for n in range(first, last + 1) if atoms[n].kind == "text"]
    source = document.source
    return source[atoms[first].start:atoms[inner[0]].start] + document.escape(words) + \
        source[atoms[inner[-1]].end:atoms[last].end]


def atom_by_atom(document: Document, block: Block, translated: dict[str, str]) -> str:
    """The fallback: each text atom translated alone, its whitespace and all markup kept in place."""
    source, out = document.source, []
    at = block.atoms[0].start
    for atom in block.atoms:
        if atom.kind != "text" or not atom.text.strip():
            continue
        raw = source[atom.start:atom.end]
        core = atom.text.strip()
        translation = translated[core]
        lead = raw[:len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()):]
        out += [source[at:atom.start], raw if translation == core else lead + document.escape(translation) + trail]
        at = atom.end
    return "".join(out) + source[at:block.atoms[-1].end]


def finish(atoms: Sequence[Atom], source: str) -> Block | None:
    """A parser's block: whitespace at its ends left out (it stays as it was, between blocks); None for a
    run with no text to translate (whitespace, a lone code span)."""
    atoms = list(atoms)
    while atoms and atoms[0].kind == "text" and not atoms[0].text.strip():
        atoms.pop(0)
    while atoms and atoms[-1].kind == "text" and not atoms[-1].text.strip():
        atoms.pop()
    if not any(a.kind == "text" and a.text.strip() for a in atoms):
        return None
    atoms[0] = trimmed(atoms[0], source, "left")
    atoms[-1] = trimmed(atoms[-1], source, "right")
    return Block(atoms)


def trimmed(atom: Atom, source: str, side: str) -> Atom:
    """A text atom without its raw whitespace on one side (when its text has the same whitespace there)."""
    if atom.kind != "text":
        return atom
    raw = source[atom.start:atom.end]
    if side == "left":
        cut = len(raw) - len(raw.lstrip())
        if cut and atom.text.startswith(raw[:cut]):
            return Atom("text", atom.start + cut, atom.end, atom.text[cut:])
    else:
        cut = len(raw) - len(raw.rstrip())
        if cut and atom.text.endswith(raw[len(raw) - cut:]):
            return Atom("text", atom.start, atom.end - cut, atom.text[:len(atom.text) - cut])
    return atom


def parse(source: str, format: str) -> Document:
    """`source` as a Document of `format` ("html" or "markdown")."""
    import importlib

    if format not in PARSERS:
        raise InputError(f"format {format!r} is not one of {', '.join(FORMATS)}")
    return importlib.import_module(PARSERS[format], __package__).parse(source)


def plain_text(source: str, format: str) -> str:
    """The text a reader sees (each block's, one a line): what a language identifier should read."""
    return "\n".join(block.text() for block in parse(source, format).blocks)


def steps_many(documents: Sequence[Document]) -> Generator[list[str], list[str], list[str]]:
    """`steps` for several documents at once: each round's texts of all of them in one list (each text
    once), so a caller translates a request's documents in one batch per round; returns the outputs."""
    runs = [steps(document) for document in documents]
    pending = [next(run) for run in runs]
    results: list[str | None] = [None] * len(runs)
    while True:
        active = [n for n, done in enumerate(results) if done is None]
        if not active:
            return results  # type: ignore[return-value]
        wanted = unique([text for n in active for text in pending[n]])
        translated = dict(zip(wanted, (yield wanted) if wanted else []))
        for n in active:
            try:
                pending[n] = runs[n].send([translated[text] for text in pending[n]])
            except StopIteration as done:
                results[n] = done.value


def drive(run: Generator[list[str], list[str], object], translate: Callable[[list[str]], list[str]]) -> object:
    """Run a `steps` protocol with a synchronous `translate` (texts -> their translations, in order)."""
    try:
        texts = next(run)
        while True:
            texts = run.send(translate(texts) if texts else [])
    except StopIteration as done:
        return done.value


def translate_markup(sources: Sequence[str], format: str, translate: Callable[[list[str]], list[str]]) -> list[str]:
    """`sources` translated with `translate` (texts -> their translations, in order), their markup kept."""
    return drive(steps_many([parse(source, format) for source in sources]), translate)  # type: ignore[return-value]
