"""Checking an export with the runtime alone: `tfm-export validate FOLDER` without PyTorch. Torch-free.

What can be proven without the eager model: the manifest is schema-valid and every graph file has its
recorded sha256 (manifest.load_manifest); each graph's inputs, outputs and stamped config match the
manifest (checks.py, when the sessions open); the export decodes its recorded sample sources (or
seeded random ids) within max_len; and an export with decoder_static.onnx gives exactly the rows of
decoder.onnx. Whether the numbers equal the eager model's is what export.validate adds (it needs the
checkpoint and the `export` extra); the manifest says whether that ran at export time.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ValidationError
from ..manifest import Manifest, load_manifest
from .device import RuntimeOptions
from .exported import ExportedModel, open_export
from .options.generation import GREEDY
from .sources import example_sources
from .inflight import decode_in_flight
from .states.host_rows import open_rows
from .states.static import StaticCache, static_slots

log = logging.getLogger(__name__)



def verify_export(folder: str | Path, device: str = "cpu", max_new_tokens: int = 32, seed: int = 0,
                  manifest: Manifest | None = None) -> dict[str, Any]:
    """Run the runtime-only checks on `folder`; returns a report, or raises the first failure.

    ManifestError: schema, hashes or a graph that does not match its manifest entry; ValidationError
    (carrying the report): the static-cache decoder's rows differ from the growing cache's.
    """
    folder = Path(folder)
    manifest = manifest or load_manifest(folder)  # schema and every sha256
    # cuda_graph=False: decoder.onnx first, the reference for decoder_static.onnx below.
    runtime = open_export(folder, device, RuntimeOptions(cuda_graph=False), manifest=manifest)
    # The export's sample texts (what the eager validation decoded too), else seeded random sources.
    sources, origin = example_sources(manifest, runtime.tokenizer if manifest.tokenizer else None, seed)
    # At most the static decoder's slots (--static-slots): its rows are compared token for token below.
    steps = min(max_new_tokens, static_slots(manifest) or manifest.config.max_len)
    rows = runtime.generate_ids(sources, config=GREEDY.replace(max_new_tokens=steps))  # never the defaults
    report: dict[str, Any] = {
        "device": runtime.device.name, "files": sum(len(g.files()) for g in manifest.graphs.values()),
        "graphs": list(manifest.graphs), "sources": len(sources), "from": origin, "max_new_tokens": steps,
        "tokens": sum(map(len, rows)), "eager_report": _eager_summary(manifest.validation)}
    if "decoder_static" in manifest.graphs:
        static = open_export(folder, device, RuntimeOptions(cuda_graph=True), manifest=manifest)
        # int8's dynamic activation scales span each batch tensor (int4's int8 head too), and the static
        # cache's tensors are not the growing cache's: a near-tie may flip. Reported, not failed (as the
        # export's check).
        strict = not manifest.variant.quantize
        _same_rows("decoder_static", static.generate_ids(sources, config=GREEDY.replace(max_new_tokens=steps)), rows,
                   report, strict)
        if "decoder_rows" in manifest.graphs:  # the server's in-flight rows on CPU, stepped by its loop
            _same_rows("decoder_rows", greedy_in_rows(static.static_cache, static.source_input(sources), steps), rows,
                       report, strict)
    log.info("runtime checks of %s passed: %d %s sources decoded", folder, len(sources), origin)
    return report


def greedy_in_rows(cache: StaticCache, src: np.ndarray, steps: int) -> list[list[int]]:
    """Greedy ids of `src` (the encoder input of a batch: ExportedModel.source_input) decoded as the server's
    in-flight rows (runtime.states.host_rows.open_rows, stepped by runtime.inflight's loop), trimmed at EOS: how an
    export's checks prove that they decode like decoder.onnx."""
    rows = open_rows(cache, src.shape[0], cache.config.src_len or src.shape[1])
    return decode_in_flight(rows, src, steps, GREEDY, cache.config)


ROW_REPORTS = {"decoder_static": "static_cache_mismatched_rows", "decoder_rows": "rows_mismatched"}


def _same_rows(graph: str, got: list[list[int]], want: list[list[int]], report: dict[str, Any], strict: bool) -> None:
    """Record the rows where `graph` decoded other tokens than decoder.onnx; raise on any when strict."""
    bad = report[ROW_REPORTS[graph]] = [i for i, (a, b) in enumerate(zip(got, want)) if a != b][:10]
    if bad and strict:
        raise ValidationError(f"{graph}.onnx decodes differently from decoder.onnx on rows {bad}; re-run the export",
                              report)


def _eager_summary(validation: dict[str, Any] | None) -> str:
    """What the manifest records of the eager comparison made at export time."""
    if not validation:
        return "none recorded (exported with --no-validate, or validated elsewhere)"
    greedy = validation.get("greedy") or {}
    tokens = "equal" if greedy.get("equal") else f"{greedy.get('token_agreement', 0):.1%} equal"
    return f"{validation.get('mode', 'parity')} on {validation.get('device', 'cpu')}, greedy tokens {tokens}"


def format_verification(report: dict[str, Any]) -> str:
    """The runtime-only report as lines (the CLI prints it)."""
    lines = [f"manifest schema, sha256 of {report['files']} files, I/O and config of "
             f"{', '.join(report['graphs'])} against the manifest: ok",
             f"greedy decoding on {report['device']}: {report['sources']} {report['from']} sources, "
             f"{report['tokens']} tokens ({report['max_new_tokens']} new tokens max per source)"]
    for graph, key in ROW_REPORTS.items():
        if key in report:
            bad = report[key]
            differs = f"differs from decoder.onnx on rows {bad} (quantized: reported, not failed)"
            lines.append(f"{graph}.onnx: " + (differs if bad else "the same rows as decoder.onnx"))
    lines.append(f"eager comparison recorded at export: {report['eager_report']}")
    return "\n".join(lines)
