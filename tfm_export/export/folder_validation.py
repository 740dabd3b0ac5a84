"""Checking an export folder after the fact (`tfm-export validate FOLDER`): the runtime checks, then the eager
comparison when the checkpoint is at hand.

The runtime checks need no PyTorch (runtime.verify); the eager comparison (export.validate) needs the `export`
extra and the checkpoint: the one given, else the one the manifest names (its Hub snapshot in the cache, its
local path while the weights there are the ones exported, or a checkpoint beside the folder). Its report is
stored in the manifest. Torch-free at import: a runtime-only install validates with the runtime alone.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import TfmExportError, ValidationError
from ..manifest import Manifest, load_manifest, write_manifest
from ..runtime.verify import format_verification, verify_export
from .quality import format_quality, format_variant_quality

log = logging.getLogger(__name__)

# How the eager comparison is refused where PyTorch is not installed (`{model}`: the caller's spelling).
NO_TORCH = "PyTorch is not installed (pip install 'tfm-export[export]', then pass {model})"


class EagerMismatch(ValidationError):
    """The export's outputs differ from the eager model's: `report` is export.validate's, whose table says where."""


@dataclass(frozen=True)
class FolderValidation:
    """What `validate_folder` found: the manifest (with the new eager report when one was made), that report,
    or why the eager model was not compared (a library error naming the option to pass)."""

    manifest: Manifest
    eager: dict[str, Any] | None
    skipped: TfmExportError | None


def describe_source(source: Mapping[str, Any]) -> str:
    """Where an export came from (its manifest's source; `origin` from importers.hub), validate's first line."""
    origin = source.get("origin") or {}
    if origin.get("hub"):
        return (f"exported from the Hugging Face Hub model {origin['hub']} at commit {origin.get('commit')} "
                f"(revision {origin.get('revision')})")
    if origin.get("path"):
        hashes = ", ".join(f"{name} sha256 {digest[:12]}" for name, digest in (origin.get("sha256") or {}).items())
        return f"exported from {origin['path']}" + (f" ({hashes})" if hashes else "")
    return f"exported from {source.get('checkpoint') or 'an unrecorded checkpoint'}"


def validate_folder(folder: str | os.PathLike, model: str | os.PathLike | None = None, *, atol: float = 1e-4,
                    load_options: dict[str, Any] | None = None, revision: str | None = None,
                    token: str | None = None, on_section: Callable[[str], None] | None = None,
                    progress: Callable[[str], None] | None = None,
                    on_stage: Callable[[str, float | None], None] | None = None) -> FolderValidation:
    """Check the export in `folder`: the runtime checks, then against the eager `model` (a checkpoint, a Hugging
    Face folder or a Hub id at `revision`, loaded with `load_options`; default: the recorded checkpoint, when
    found). Each report is given to `on_section` as text when it is made (the runtime's before the eager model
    loads); `progress` gets a Hub download's lines, `on_stage` the comparison's stage. Raises the first failure
    (ManifestError, ValidationError carrying the report); the eager report is written into the manifest."""
    folder = Path(folder)
    say = on_section or log.info
    manifest = load_manifest(folder)  # schema and every sha256
    say(f"{folder}: {describe_source(manifest.source)}")
    say(format_verification(verify_export(folder, manifest=manifest)))
    measured = (manifest.validation or {}).get("quality")  # at export (export.quality)
    if manifest.quality is not None:
        say(format_variant_quality(manifest))
    if measured and measured.get("against_references"):
        say(format_quality(measured))
    try:
        path = _checkpoint(folder, manifest, model, revision, token, progress)
    except ValidationError as exc:
        if model is not None:
            raise
        return FolderValidation(manifest, None, exc)
    report = _compare(folder, manifest, path, atol, load_options or {}, on_stage)
    # The quality measured at export stays: this comparison has no float32 graphs or references to repeat it.
    manifest = manifest.replace(validation={**report, **({"quality": measured} if measured else {})})
    write_manifest(folder, manifest)
    return FolderValidation(manifest, report, None)


def _checkpoint(folder: Path, manifest: Manifest, model: Any, revision: str | None, token: str | None,
                progress: Callable[[str], None] | None) -> Path:
    """The checkpoint to compare with: `model` resolved (a Hub id downloaded), else the recorded one; a
    ValidationError saying why there is none (PyTorch is not installed, or no checkpoint was found)."""
    try:
        import torch  # noqa: F401 (the eager comparison's, and the importers')
    except ModuleNotFoundError:
        raise ValidationError(NO_TORCH, options={"model": None}) from None
    from ..importers.hub import cached_snapshot, resolve_model, unchanged_local_origin

    if model is not None:
        resolved = resolve_model(model, revision, token, progress=progress)
        (progress or log.info)(resolved.note)
        return resolved.path
    from .validate import recorded_checkpoint

    return cached_snapshot(manifest.source) or unchanged_local_origin(manifest.source) or \
        recorded_checkpoint(folder, manifest)


def _compare(folder: Path, manifest: Manifest, path: Path, atol: float, load_options: dict[str, Any],
             on_stage: Callable[[str, float | None], None] | None) -> dict[str, Any]:
    from ..importers import load_model
    from .shared import Stages
    from .validate import validate_export

    eager = load_model(path, **load_options).build_model()
    with Stages(on_stage)("validate"):
        try:
            return validate_export(folder, eager, atol=atol, manifest=manifest)
        except ValidationError as exc:
            if not exc.report:  # refused before comparing (another model's checkpoint)
                raise
            raise EagerMismatch(exc.template, exc.report, exc.options) from exc
