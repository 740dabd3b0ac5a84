"""Opening an export checks its manifest against the graphs' own I/O and stamped config. Torch-free.

The hashes prove the graph files are the ones exported; these checks prove the manifest still
describes them (a manifest edited to stay schema-valid but name another vocabulary, max_len or head
count would otherwise fail deep inside ONNX Runtime, or decode garbage).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ManifestError, shorten
from ..graph_io import CONFIG_METADATA_KEY, GraphEntry
from ..manifest import Manifest

# ORT's type strings for the manifest's dtype names.
ORT_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "int64": "tensor(int64)",
             "bool": "tensor(bool)"}


def check_sessions(manifest: Manifest, sessions: dict[str, Any]) -> None:
    """Each session's I/O and stamped config against the manifest (ManifestError naming the first mismatch)."""
    for name, session in sessions.items():
        entry = manifest.graphs[name]
        problems = _io_problems(entry, session) + _config_problems(manifest, session)
        if problems:
            raise ManifestError(f"manifest.json does not describe {entry.file}: {shorten(problems, 3)}; the manifest "
                                f"was edited or belongs to another export: re-run the export")


def _io_problems(entry: GraphEntry, session: Any) -> list[str]:
    got = [(v.name, v.type, v.shape) for v in (*session.get_inputs(), *session.get_outputs())]
    want = [(t.name, ORT_TYPES[t.dtype], t.shape) for t in (*entry.spec.inputs, *entry.spec.outputs)]
    if [g[0] for g in got] != [w[0] for w in want]:
        return [f"its inputs/outputs are {shorten([g[0] for g in got], 3)}, not the manifest's"]
    problems = []
    for (name, gtype, gshape), (_, wtype, wshape) in zip(got, want):
        if gtype != wtype:
            problems.append(f"{name} is {gtype}, not {wtype}")
        # Only numbers fixed by the config can be compared: symbolic dims are named by the exporter.
        fixed = [(g, w) for g, w in zip(gshape, wshape) if isinstance(g, int) and isinstance(w, int)]
        if len(gshape) != len(wshape) or any(g != w for g, w in fixed):
            problems.append(f"{name} has shape {list(gshape)}, not {list(wshape)}")
    return problems


def _config_problems(manifest: Manifest, session: Any) -> list[str]:
    stamped = session.get_modelmeta().custom_metadata_map.get(CONFIG_METADATA_KEY)
    if stamped is None:  # exports made before the config was stamped into the graphs
        return []
    ours = manifest.config.to_dict()
    try:
        theirs = json.loads(stamped)
    except json.JSONDecodeError:
        return ["its stamped config is not JSON"]
    return [f"{k} {ours.get(k)!r} != {theirs[k]!r}" for k in theirs if ours.get(k) != theirs[k]]
