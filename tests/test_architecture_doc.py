"""docs/architecture.md's module maps stay true: they name every module of tfm_export/ and of the Node runtime
(runtimes/node's .mjs files, its tests and node_modules aside), and every module they name exists.

The Python map is a table `| level | module | torch? | what |` (section "Module map"), the Node one `| level |
module | what |` (its subsection "The Node and browser runtime"): a row's level cell names its folder
(`runtime/decode/`; a blank cell: the row above's folder; a cell with no folder, such as "contract" or "top": the
package's top), and its module cell the files (`loop.py`), a subfolder's files after the subfolder (`families/`
(`registry.py`, ...)). A package's `__init__.py` is covered by its folder's rows.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfm_export"
NODE = ROOT / "runtimes" / "node"
DOC = ROOT / "docs" / "architecture.md"
TICKED = re.compile(r"`([^`]+)`")
NODE_HEADING = "### The Node and browser runtime"


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of its level or above (## or ###)."""
    return re.split(r"\n##+ ", text.split(heading, 1)[1], maxsplit=1)[0]


def table_rows(text: str, heading: str = "## Module map", columns: int = 4) -> list[list[str]]:
    """The cells of a module map's rows (the table under `heading`, header and rule left out)."""
    rows = [line.strip().strip("|").split(" | ") for line in section(text, heading).splitlines()
            if line.startswith("| ")]
    return [cells for cells in rows if len(cells) >= columns and cells[0] != "level"]


def named_modules(text: str, heading: str = "## Module map", suffix: str = ".py", columns: int = 4) -> set[str]:
    """The module paths (relative to the map's package: tfm_export/, runtimes/node/) the map names."""
    named, folder = set(), ""
    for level, modules, *_ in table_rows(text, heading, columns):
        if level.strip():
            folders = [name for name in TICKED.findall(level) if name.endswith("/")]
            folder = folders[0] if folders else ""
        sub = ""
        for name in TICKED.findall(modules):
            if name.endswith("/"):
                sub = name
            elif name.endswith(suffix):
                named.add(folder + sub + name)
    return named


def node_named(text: str) -> set[str]:
    return named_modules(text, NODE_HEADING, ".mjs", columns=3)


def package_modules() -> set[str]:
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and "__pycache__" not in path.parts}


def node_modules() -> set[str]:
    return {path.relative_to(NODE).as_posix() for path in NODE.rglob("*.mjs")
            if not {"node_modules", "test"} & set(path.relative_to(NODE).parts)}


def test_the_map_is_read():
    named = named_modules(DOC.read_text(encoding="utf-8"))
    # one row of each kind: the top, a folder, a blank level cell, a subfolder in the module cell
    assert {"errors.py", "runtime/decode/loop.py", "runtime/decode/beam.py", "importers/families/bart.py"} <= named


def test_every_module_is_named():
    missing = sorted(package_modules() - named_modules(DOC.read_text(encoding="utf-8")))
    assert not missing, f"docs/architecture.md's module map does not name: {missing}"


def test_every_named_module_exists():
    named = named_modules(DOC.read_text(encoding="utf-8"))
    gone = sorted(name for name in named if not (PACKAGE / name).is_file())
    assert not gone, f"docs/architecture.md's module map names modules that do not exist: {gone}"


def test_every_package_folder_has_rows():
    text = DOC.read_text(encoding="utf-8")
    levels = {name for cells in table_rows(text) for name in TICKED.findall(cells[0]) if name.endswith("/")}
    folders = {path.parent.relative_to(PACKAGE).as_posix() + "/" for path in PACKAGE.rglob("__init__.py")
               if path.parent != PACKAGE}
    folders -= {"importers/families/"}  # named in the importers/ rows' module cell
    assert folders <= levels, f"no rows for: {sorted(folders - levels)}"


def test_the_node_map_is_read():
    text = DOC.read_text(encoding="utf-8")
    named = node_named(text)
    # a top row, a folder, a blank level cell; the Python map's rows stop at the Node subsection
    assert {"exported.mjs", "decode/loop.mjs", "decode/beam.mjs", "text/tokenizer.mjs"} <= named
    assert not any(name.endswith(".mjs") for name in named_modules(text, suffix=".mjs"))


def test_every_node_module_is_named():
    missing = sorted(node_modules() - node_named(DOC.read_text(encoding="utf-8")))
    assert not missing, f"docs/architecture.md's Node map does not name: {missing}"


def test_every_named_node_module_exists():
    gone = sorted(name for name in node_named(DOC.read_text(encoding="utf-8")) if not (NODE / name).is_file())
    assert not gone, f"docs/architecture.md's Node map names modules that do not exist: {gone}"
