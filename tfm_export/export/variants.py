"""Transforms of the exported float32 graphs: ORT fusions (`--optimize`), float16 weights and compute
(`--dtype float16`, for CUDA), int8 weights (`--quantize int8`, for CPU) and 4-bit weights
(`--quantize int4`: MatMulNBits, for CPU).

Each transform rewrites the graph files in the temporary export folder before validation and
reports what it did (the exporter records it as the manifest's Variant); the graphs' input and output names never change
(float16 changes the cache tensors' dtype, as its specs say). `validation_settings` tells
validate.py how each variant is checked.
"""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from ..errors import ExportError, first_line
from ..graph_io import GraphSpec
from ..manifest import Variant
from .checks import check_graph, external_files
from .float16 import FLOAT32_OPS, float16_graph
from .folding import fold_in_memory, transposed_initializers
from .int4 import Int4Settings, quantize_int4
from .int8 import quantize_int8
from .options import QUANTIZE

log = logging.getLogger(__name__)

# How a variant is validated against the float32 eager model:
#   parity     every output within atol, greedy tokens equal (float32, optimised or not);
#   tolerance  every output within atol + rtol * max|eager| (float16 rounding), greedy agreement reported;
#   agreement  differences and greedy agreement reported, nothing fails (int8, int4: near-tie argmaxes flip).
FLOAT16_ATOL, FLOAT16_RTOL = 1e-2, 1e-2
# float32 parity: atol plus atol * this of the output's largest magnitude (1e-5 at the default atol):
# rounding grows with the scale of the sums behind an output (a deep model whose keys reach 10 differs
# from eager by ~1e-4 in float32); a tighter --atol tightens both.
FLOAT32_RTOL_PER_ATOL = 0.1


def optimize_graph(src: Path, dst: Path, spec: GraphSpec, external: bool) -> dict[str, int]:
    """Fuse a graph for ONNX Runtime with onnxscript's ORT fusion rules; returns fusion counts."""
    import onnx_ir as ir
    from onnxscript.rewriter import ort_fusions

    model = ir.load(str(src))  # external weights stay memory-mapped from src's data file
    before = sum(1 for _ in model.graph)
    model, counts = ort_fusions.optimize_for_ort(model)
    counts["cross_kv_bnsh"] = _cross_kv_as_bnsh(model)
    counts["shared_masks"] = _share_masks(model)
    ir.save(model, str(dst), external_data=_data_name(dst) if external else None)
    fused = {name: count for name, count in counts.items() if count}
    fused["nodes_before"], fused["nodes_after"] = before, sum(1 for _ in model.graph)
    return fused


def _cross_kv_as_bnsh(model: Any) -> int:
    """Feed precomputed cross keys/values to MultiHeadAttention as they are, (batch, heads, src_len, head_dim).

    onnxscript's rule turns them back into (batch, src_len, d_model) with a Transpose and a Reshape,
    which the decoder would repeat at every step; MultiHeadAttention takes the 4-D layout directly.
    Returns how many attention nodes were rewired.
    """
    from onnxscript import optimizer

    rewired = 0
    for node in model.graph:
        has_past = len(node.inputs) > 6 and node.inputs[6] is not None
        if node.op_type != "MultiHeadAttention" or has_past:
            continue  # self attention with past keeps its (batch, tgt_len, d_model) keys
        sources = [_untransposed(node.inputs[i]) for i in (1, 2)]
        if all(v is not None for v in sources):
            node.replace_input_with(1, sources[0])
            node.replace_input_with(2, sources[1])
            rewired += 1
    optimizer.remove_unused_nodes(model)
    return rewired


def _share_masks(model: Any) -> int:
    """One expanded attention mask for all the layers instead of one per attention node.

    onnxscript's MultiHeadAttention rule broadcasts the mask with Expand(mask, [1, 1, S, 1]), S read by a
    Shape node from that layer's query, so every layer computed the same mask again (three nodes each,
    a tenth of the fused decoder's nodes). Each Shape that reads one symbolic dimension is pointed at
    the first value in the graph with that dimension; the chains are then identical and common
    subexpression elimination keeps one. Only where the nodes read from changes: the values are equal.
    Returns how many Shape nodes were repointed.
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as common_passes

    first: dict[str, tuple[Any, int]] = {}

    def note(value: Any) -> None:
        for axis, dim in enumerate(value.shape or ()):
            if isinstance(dim, ir.SymbolicDim) and dim.value is not None:
                first.setdefault(dim.value, (value, axis))

    for value in model.graph.inputs:
        note(value)
    repointed = 0
    for node in list(model.graph):
        start, end = node.attributes.get_int("start", 0), node.attributes.get_int("end", None)
        source = node.inputs[0] if node.op_type == "Shape" and node.domain == "" and node.inputs else None
        one_dim = source is not None and source.shape and 0 <= start and end == start + 1
        dim = source.shape[start] if one_dim else None
        if isinstance(dim, ir.SymbolicDim) and dim.value in first and first[dim.value] != (source, start):
            value, axis = first[dim.value]
            node.replace_input_with(0, value)
            node.attributes["start"] = ir.AttrInt64("start", axis)
            node.attributes["end"] = ir.AttrInt64("end", axis + 1)
            repointed += 1
        for output in node.outputs:
            note(output)
    common_passes.CommonSubexpressionEliminationPass()(model)
    common_passes.RemoveUnusedNodesPass()(model)
    return repointed


def _untransposed(value: Any) -> Any:
    """X when `value` is Reshape(Transpose(X, perm=[0, 2, 1, 3])) with X 4-D, else None."""
    reshape = value.producer() if value is not None else None
    if reshape is None or reshape.op_type != "Reshape":
        return None
    transpose = reshape.inputs[0].producer()
    if transpose is None or transpose.op_type != "Transpose":
        return None
    perm = transpose.attributes.get("perm")
    source = transpose.inputs[0]
    if perm is None or list(perm.value) != [0, 2, 1, 3] or source.shape is None or source.shape.rank() != 4:
        return None
    return source


def fold_graph(src: Path, dst: Path, spec: GraphSpec, external: bool) -> dict[str, int]:
    """Transposes of weights stored transposed (export.folding), before --optimize and the quantisers: a tied
    head is MatMul(x, Transpose(embedding)), which the fusions would make a FusedMatMul and the quantisers
    would leave float32 (they take MatMuls of initializers); the float copy goes once quantised."""
    import onnx_ir as ir

    if not transposed_initializers(src):
        return {"transposes": 0}  # nothing written: the graph stays as it is (see _run)
    model = ir.load(str(src))
    folded = fold_in_memory(model)
    ir.save(model, str(dst), external_data=_data_name(dst) if external else None)
    return {"transposes": folded}


def quantize_graph_int8(src: Path, dst: Path, spec: GraphSpec, external: bool) -> dict[str, int]:
    """Dynamic int8 quantisation of MatMul weights (activations quantised on the fly), for CPU: ORT's
    quantize_dynamic graph and weights, made one weight at a time (export.int8)."""
    return {"quantized_matmuls": quantize_int8(src, dst, external)}


def quantize_graph_int4(src: Path, dst: Path, spec: GraphSpec, external: bool,
                        settings: Int4Settings = Int4Settings(), hessians: dict[str, Any] | None = None
                        ) -> dict[str, int]:
    """Weight-only 4-bit MatMuls (ORT's MatMulNBits) for CPU, the vocabulary head as settings.head says:
    made one weight at a time (export.int4); `hessians`: GPTQ's calibration (export.calibration). The encoder
    graph is made int8 instead when settings.encoder says so."""
    if spec.name == "encoder" and settings.encoder == "int8":
        return quantize_graph_int8(src, dst, spec, external)
    return quantize_int4(src, dst, external, settings, hessians)


def _data_name(path: Path) -> str:
    """The one external-data file of a transformed graph: `decoder.onnx` -> `decoder.onnx.data`."""
    return path.name + ".data"


# (graph file, where to write the result, its spec, weights in external data?) -> counts
Transform = Callable[[Path, Path, GraphSpec, bool], dict[str, int]]
# Applied in this order: weights stored transposed for the quantisers, fusions on the float32 graph, then the
# dtype, then quantisation.
TRANSFORMS: dict[str, Transform] = {"fold": fold_graph, "optimize": optimize_graph, "float16": float16_graph,
                                    "int8": quantize_graph_int8, "int4": quantize_graph_int4}
# A transform's settings beyond the Transform signature, read from ExportOptions and the calibration (GPTQ's
# Hessians, or None), bound when it runs.
SETTINGS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "int4": lambda options, calibration: {"settings": int4_settings(options), "hessians": calibration}}


def requested(options: Any) -> list[str]:
    """The transform names an ExportOptions asks for."""
    # The impossible mixes were refused when the options were made (export.options.RULES).
    wanted = {"fold": options.quantize is not None, "optimize": options.optimize,
              "float16": options.dtype == "float16", **{name: options.quantize == name for name in QUANTIZE}}
    return [name for name in TRANSFORMS if wanted[name]]


def int4_settings(options: Any) -> Int4Settings:
    """ExportOptions.int4, or the defaults when none were given."""
    return options.int4 or Int4Settings()


def transform_graphs(folder: Path, specs: dict[str, GraphSpec], options: Any, calibration: Any = None
                     ) -> dict[str, dict[str, dict[str, int]]]:
    """Rewrite each graph file in `folder`; `specs` are the graphs' final specs (in `options.dtype`);
    `calibration`: what the transforms that calibrate read (GPTQ's Hessians, export.calibration).
    Returns transform -> graph -> counts; each result is checked against its spec. A graph whose weights
    are in external data (a model over 2 GB) keeps them there, in the variant's own file."""
    names = requested(options)
    report: dict[str, dict[str, dict[str, int]]] = {}
    for graph_name, spec in specs.items():
        path = folder / spec.file
        for name in names:
            report.setdefault(name, {})[graph_name] = _run(name, path, spec, options, calibration)
        check_graph(path, spec)
        log.info("%s: %s", graph_name, {n: report[n][graph_name] for n in names})
    return report


def variant_of(options: Any, transforms: dict[str, Any] | None = None) -> Variant:
    """The manifest's Variant for these options; `extra.io` says which graph I/O is float16 and why."""
    extra: dict[str, Any] = {}
    if options.dtype == "float16":
        extra["io"] = {"float16": ["cross.*", "past.*", "present.*"], "float32": ["logits"],
                       "why": "caches stay on the GPU between steps: float16 halves their traffic and "
                              "needs no Casts; logits stay float32 for apps that read them"}
        extra["float32_ops"] = list(FLOAT32_OPS)
    if options.quantize == "int4":
        extra["int4"] = int4_settings(options).to_dict()
        if options.calibration_file:
            extra["int4"]["calibration_file"] = Path(options.calibration_file).name
    return Variant(options.dtype, options.dtype, options.optimize, options.quantize, dict(transforms or {}), extra)


def _run(name: str, path: Path, spec: GraphSpec, options: Any, calibration: Any = None) -> dict[str, int]:
    """One transform of the graph at `path`, written beside it in a staging folder, then moved over it
    with its own external data; the files it replaces are the exporter's own, in its temporary folder."""
    old = external_files(path)
    stage = path.parent / f".{path.name}.{name}"
    stage.mkdir()
    try:
        transform = TRANSFORMS[name]
        if name in SETTINGS:
            transform = functools.partial(transform, **SETTINGS[name](options, calibration))
        counts = transform(path, stage / path.name, spec, bool(old))
        if not (stage / path.name).exists():  # a transform with nothing to change writes nothing
            return counts
        for file in old:
            (path.parent / file).unlink()
        for file in (path.name, *external_files(stage / path.name)):
            (stage / file).replace(path.parent / file)
        return counts
    except ExportError:
        raise
    except Exception as exc:  # the tools raise many types; keep the first line
        raise ExportError(f"{name} failed on {path.name}: {first_line(exc, 200)}") from exc
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def validation_settings(variant: Variant, atol: float = 1e-4) -> dict[str, Any]:
    """How validate.py checks an export with this manifest variant: mode, atol, rtol."""
    if variant.quantize:
        return {"mode": "agreement", "atol": atol, "rtol": 0.0, "device": "cpu"}
    if variant.dtype == "float16":
        # On the GPU it is built for when one is usable. ORT's CPU provider runs float16 graphs too,
        # but computes most nodes in float32 behind inserted Casts, so a CPU run checks the graph,
        # the float16 weights and I/O, not the CUDA kernels' float16 arithmetic.
        return {"mode": "tolerance", "atol": max(atol, FLOAT16_ATOL), "rtol": FLOAT16_RTOL, "device": "auto"}
    return {"mode": "parity", "atol": atol, "rtol": atol * FLOAT32_RTOL_PER_ATOL, "device": "cpu"}
