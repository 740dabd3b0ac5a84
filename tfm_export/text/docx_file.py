"""Word documents (.docx) in text.markup's protocol: each paragraph's text translated, its runs' formatting
carried, everything else (styles, tables, images, fields, headers' layout) kept. Torch-free; needs
python-docx (the `docx` extra).

A paragraph is written as an HTML fragment for text.markup_html: its runs of the paragraph's main
formatting as text, each run of another formatting (bold, a colour, a link's style) as a <span> naming
the run, so the paragraph is translated as one sentence and the runs are carried to their words as inline
tags are; the translation's pieces become copies of those runs. A paragraph holding more than text runs
(a hyperlink, a field, a tab, an image in a run) keeps its structure: each text-only run is translated
alone, in place.
"""

from __future__ import annotations

import copy
import html
import io
import re
from typing import Any, Callable, Generator, Iterator

from ..errors import InputError
from . import markup, markup_html

SPAN = re.compile(r'<span data-r="([0-9]+)">(.*?)</span>', re.S)
TEXT_RUN_PARTS = {"rPr", "t"}  # a run holding only text (no tab, break, drawing, field)
PLAIN_PARAGRAPH_PARTS = {"pPr", "r", "proofErr", "bookmarkStart", "bookmarkEnd"}


def local(element: Any) -> str:
    return element.tag.rsplit("}", 1)[-1]


def open_docx(data: bytes) -> Any:
    try:
        import docx
    except ImportError:
        raise InputError("translating .docx files needs python-docx: pip install 'tfm-export[docx]'") from None
    try:
        return docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises what zipfile and lxml raise for a file of another kind
        raise InputError(f"the file is not a Word document (.docx): {type(exc).__name__}") from None


def paragraphs(document: Any) -> Iterator[Any]:
    """Every paragraph once: the body's, its tables' cells' (nested tables too), the sections' headers' and
    footers'."""
    seen: set[int] = set()

    def of(container: Any) -> Iterator[Any]:
        for paragraph in container.paragraphs:
            if id(paragraph._p) not in seen:
                seen.add(id(paragraph._p))
                yield paragraph
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:  # a merged cell comes once per row it spans: `seen`
                    yield from of(cell)

    yield from of(document)
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from of(part)


def text_runs(element: Any) -> list[Any]:
    return [r for r in element.iter() if local(r) == "r" and {local(c) for c in r} <= TEXT_RUN_PARTS]


def formatting(run: Any) -> bytes:
    from lxml import etree

    properties = run.find(run.tag.replace("}r", "}rPr"))
    return b"" if properties is None else etree.tostring(properties)


def paragraph_jobs(paragraph: Any) -> list[tuple[str, Callable[[str], None]]]:
    """(an HTML fragment to translate, what writes its translation back) for one paragraph."""
    element = paragraph._p
    runs = [r for r in element if local(r) == "r"]
    if not paragraph.text.strip():
        return []
    if {local(c) for c in element} <= PLAIN_PARAGRAPH_PARTS and runs == text_runs(element):
        return [runs_job(element, runs)]
    return [(html.escape(run_text(r), quote=False), lambda out, r=r: set_text(r, html.unescape(out)))
            for r in text_runs(element) if run_text(r).strip()]


def run_text(run: Any) -> str:
    return "".join(t.text or "" for t in run if local(t) == "t")


def set_text(run: Any, text: str) -> None:
    """A text-only run's text (its formatting kept): in its first w:t, the others dropped."""
    parts = [t for t in run if local(t) == "t"]
    for extra in parts[1:]:
        run.remove(extra)
    parts[0].text = text
    parts[0].set("{http://www.w3.org/XML/1998/namespace}space", "preserve")


def runs_job(element: Any, runs: list[Any]) -> tuple[str, Callable[[str], None]]:
    """A plain paragraph: runs of the main formatting as text, the others as spans naming their run."""
    keys = [formatting(r) for r in runs]
    weight: dict[bytes, int] = {}
    for key, run in zip(keys, runs):
        weight[key] = weight.get(key, 0) + len(run_text(run))
    main = max(weight, key=weight.get)
    base = runs[keys.index(main)]
    pieces, n = [], 0
    while n < len(runs):  # neighbours of one formatting are one piece
        end = n
        while end + 1 < len(runs) and keys[end + 1] == keys[n]:
            end += 1
        text = html.escape("".join(run_text(r) for r in runs[n:end + 1]), quote=False)
        pieces.append(text if keys[n] == main else f'<span data-r="{n}">{text}</span>')
        n = end + 1

    def write(out: str) -> None:
        made, at = [], 0
        for found in SPAN.finditer(out):
            made += [(base, html.unescape(out[at:found.start()])), (runs[int(found.group(1))],
                                                                    html.unescape(found.group(2)))]
            at = found.end()
        made.append((base, html.unescape(out[at:])))
        anchor = runs[0]
        for model, text in made:
            if text:
                run = copy.deepcopy(model)
                set_text(run, text)
                anchor.addprevious(run)
        for run in runs:
            element.remove(run)

    return "".join(pieces), write


def docx_steps(data: bytes) -> Generator[list[str], list[str], bytes]:
    """text.markup's protocol for a .docx file's bytes: yields texts, is sent their translations, returns
    the translated file's bytes. InputError for a file that is not a Word document."""
    document = open_docx(data)
    jobs = [job for paragraph in paragraphs(document) for job in paragraph_jobs(paragraph)]
    outputs = yield from markup.steps_many([markup_html.parse(fragment) for fragment, _ in jobs])
    for (_, write), out in zip(jobs, outputs):
        write(out)
    saved = io.BytesIO()
    document.save(saved)
    return saved.getvalue()


def docx_text(data: bytes) -> str:
    """A .docx file's text, a paragraph a line (for language detection)."""
    return "\n".join(p.text for p in paragraphs(open_docx(data)) if p.text.strip())
