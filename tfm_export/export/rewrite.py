"""In-memory onnx_ir edits of a written graph file, saved over it: one load and one save for them all."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from .checks import external_files

log = logging.getLogger(__name__)

# an edit of an onnx_ir model in place -> how many things it changed (0: nothing)
Edit = Callable[[Any], int]


def rewrite_graph(path: Path, edits: dict[str, Edit], external: bool = True) -> dict[str, int]:
    """Apply `edits` (name -> edit, in order) to the graph file at `path`, its external data (if any) rewritten
    beside it; the counts by name. Nothing is written when every edit changed nothing. `external=False`: the
    caller knows the graph holds its weights inline (one parse of the file less).
    Only for a graph this export wrote, in its own staging folder (export.exporter's target.tmp): the data files
    the old graph named and the new one does not are deleted, and the rewrite's stage folder is made here
    (mkdir fails on one already there, so a folder of someone else's is never removed)."""
    import onnx_ir as ir

    old = external_files(path) if external else []
    model = ir.load(str(path))  # external weights stay memory-mapped until saved
    counts = {name: edit(model) for name, edit in edits.items()}
    if not any(counts.values()):
        return counts
    stage = path.parent / f".{path.name}.rewrite"
    stage.mkdir()
    try:
        ir.save(model, str(stage / path.name), external_data=path.name + ".data" if old else None)
        del model  # drop the mappings of the old data file before it is replaced
        new = [file.name for file in stage.iterdir()]
        for file in stage.iterdir():
            file.replace(path.parent / file.name)
        for name in set(old) - set(new):
            (path.parent / name).unlink()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log.info("%s: %s", path.name, counts)
    return counts
