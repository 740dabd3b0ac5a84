"""Transforms of the exported float32 graphs: ORT fusions (`--optimize`) and int8 weights (`--quantize`).

Each transform rewrites the graph files in the temporary export folder before validation and
records what it did in `manifest["variant"]`; the graphs' inputs and outputs never change.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import onnx

from .errors import ExportError
from .manifest import sha256_file

log = logging.getLogger(__name__)


def optimize_graph(path: Path) -> dict[str, int]:
    """Fuse a graph for ONNX Runtime with onnxscript's ORT fusion rules; returns fusion counts."""
    import onnx_ir as ir
    from onnxscript.rewriter import ort_fusions

    model = ir.load(str(path))
    before = sum(1 for _ in model.graph)
    model, counts = ort_fusions.optimize_for_ort(model)
    ir.save(model, str(path))
    fused = {name: count for name, count in counts.items() if count}
    fused["nodes_before"], fused["nodes_after"] = before, sum(1 for _ in model.graph)
    return fused


def quantize_graph_int8(path: Path) -> dict[str, int]:
    """Dynamic int8 quantisation of MatMul weights (activations quantised on the fly), for CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = path.with_name(path.stem + ".int8.onnx")
    quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=False, extra_options={"MatMulConstBOnly": True})
    tmp.replace(path)
    nodes = onnx.load(str(path), load_external_data=False).graph.node
    return {"quantized_matmuls": sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in nodes)}


# Applied in this order: fusions on the float graph first, then quantisation.
TRANSFORMS: dict[str, Callable[[Path], dict[str, int]]] = {"optimize": optimize_graph, "int8": quantize_graph_int8}


def requested(options: Any) -> list[str]:
    """The transform names an ExportOptions asks for."""
    if options.dtype != "float32":
        raise ExportError(f"--dtype {options.dtype} is not supported yet; export float32 (see BENCHMARKS.md)")
    if options.quantize not in (None, "int8"):
        raise ExportError(f"--quantize {options.quantize} is not supported; use int8")
    return [name for name, wanted in (("optimize", options.optimize), ("int8", options.quantize == "int8"))
            if wanted]


def apply_variants(folder: Path, manifest: dict[str, Any], model: Any, options: Any) -> None:
    """Rewrite every graph in `folder` and update its manifest entry (hash) and `variant`."""
    names = requested(options)
    report: dict[str, dict[str, dict[str, int]]] = {}
    for graph_name, entry in manifest["graphs"].items():
        if entry.get("external_data"):
            raise ExportError("--optimize/--quantize do not support models over 2 GB yet")
        path = folder / entry["file"]
        for name in names:
            try:
                report.setdefault(name, {})[graph_name] = TRANSFORMS[name](path)
            except ExportError:
                raise
            except Exception as exc:  # the tools raise many types; keep the first line
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise ExportError(f"{name} failed on {entry['file']}: {first}") from exc
        onnx.checker.check_model(str(path), full_check=True)
        entry["sha256"] = sha256_file(path)
        log.info("%s: %s", graph_name, {n: report[n][graph_name] for n in names})
    manifest["variant"].update({"optimized": options.optimize, "quantize": options.quantize,
                                "transforms": report})
