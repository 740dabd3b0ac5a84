"""docs/architecture.md's module map stays true: it names every module of tfm_export/, and every module it names exists.

The map is a table `| level | module | torch? | what |`: a row's level cell names its folder (`runtime/decode/`; a
blank cell: the row above's folder; a cell with no folder, such as "contract" or "top": the package's top), and its
module cell the files (`loop.py`), a subfolder's files after the subfolder (`families/` (`registry.py`, ...)). A
package's `__init__.py` is covered by its folder's rows.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfm_export"
DOC = ROOT / "docs" / "architecture.md"
TICKED = re.compile(r"`([^`]+)`")


def table_rows(text: str) -> list[list[str]]:
    """The cells of the module map's rows (the section "Module map", header and rule left out)."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return [cells for cells in rows if len(cells) >= 4 and cells[0] != "level"]


def named_modules(text: str) -> set[str]:
    """The module paths (relative to tfm_export/) the map names."""
    named, folder = set(), ""
    for level, modules, *_ in table_rows(text):
        if level.strip():
            folders = [name for name in TICKED.findall(level) if name.endswith("/")]
            folder = folders[0] if folders else ""
        sub = ""
        for name in TICKED.findall(modules):
            if name.endswith("/"):
                sub = name
            elif name.endswith(".py"):
                named.add(folder + sub + name)
    return named


def package_modules() -> set[str]:
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and "__pycache__" not in path.parts}


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
