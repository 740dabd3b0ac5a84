"""manifest.json: the contract between an export folder and the apps that use it. Torch-free.

Writing happens in export.py; loading here checks the JSON Schema (manifest.schema.json, shipped
in the package), that every graph file exists, and (by default) that its sha256 matches.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from .config import TransformerConfig
from .errors import ManifestError
from .export.specs import GraphSpec

FORMAT = "tfm-export-manifest/1"
MANIFEST_NAME = "manifest.json"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (graphs can be gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def schema() -> dict[str, Any]:
    """The JSON Schema of manifest.json (also published in the package)."""
    text = resources.files("tfm_export").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def graph_entry(spec: GraphSpec, folder: Path, opset: int, extra_files: list[str] | None = None) -> dict:
    """The manifest entry of one exported graph (hashes of the graph and its external data)."""
    files = [spec.file, *(extra_files or [])]
    return {
        "file": spec.file,
        "sha256": sha256_file(folder / spec.file),
        "external_data": {name: sha256_file(folder / name) for name in files[1:]},
        "opset": opset,
        "inputs": [t.to_dict() for t in spec.inputs],
        "outputs": [t.to_dict() for t in spec.outputs],
    }


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """Validate against the schema, then write `folder/manifest.json`."""
    _check_schema(manifest, folder)
    path = folder / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def load_manifest(folder: str | os.PathLike, verify_hashes: bool = True) -> dict[str, Any]:
    """Read and check an export folder's manifest; raises ManifestError with the fix."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise ManifestError(f"export folder not found: {folder}; run `tfm-export MODEL.pt -o {folder}` first")
    if not path.exists():
        raise ManifestError(f"{folder} has no {MANIFEST_NAME}; it is not a (complete) tfm-export folder — "
                            f"re-run the export")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); re-run the export") from None
    _check_schema(manifest, folder)
    try:
        TransformerConfig.from_dict(manifest["config"])
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{path} has an invalid config: {exc}") from None
    for name, graph in manifest["graphs"].items():
        _check_graph_files(folder, name, graph, verify_hashes)
    return manifest


def manifest_config(manifest: dict[str, Any]) -> TransformerConfig:
    """The model config recorded in a manifest."""
    return TransformerConfig.from_dict(manifest["config"])


def _check_graph_files(folder: Path, name: str, graph: dict, verify_hashes: bool) -> None:
    files = {graph["file"]: graph["sha256"], **graph.get("external_data", {})}
    for file, expected in files.items():
        path = folder / file
        if not path.exists():
            raise ManifestError(f"{name} graph file {path} is missing; re-run the export")
        if verify_hashes and sha256_file(path) != expected:
            raise ManifestError(f"{path} does not match the sha256 in {MANIFEST_NAME} (changed, corrupt, or "
                                f"from another export); re-run the export or restore the file")


def _check_schema(manifest: Any, folder: Path) -> None:
    import jsonschema  # imported here: only loading and writing need it

    try:
        jsonschema.validate(manifest, schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ManifestError(f"{folder / MANIFEST_NAME} does not follow the manifest schema at {where}: "
                            f"{exc.message}") from None
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{folder / MANIFEST_NAME} has format {manifest.get('format')!r}; this version "
                            f"reads {FORMAT!r} — re-export with this version of tfm-export")
