"""Transforms of the exported float32 graphs: ORT fusions (`--optimize`), float16 weights and compute
(`--dtype float16`, for CUDA) and int8 weights (`--quantize int8`, for CPU).

Each transform rewrites the graph files in the temporary export folder before validation and
records what it did in `manifest["variant"]`; the graphs' input and output names never change
(float16 changes the cache tensors' dtype, as its specs say). `validation_settings` tells
validate.py how each variant is checked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import onnx

from ..errors import ExportError
from ..manifest import manifest_config, sha256_file
from .specs import ALL_GRAPH_SPECS, GraphSpec

log = logging.getLogger(__name__)

# Kept in float32 inside float16 graphs: the softmax and every layer norm (Casts around them), so
# large attention scores and the mean/variance of the residual stream cannot overflow float16.
FLOAT32_OPS = ("Softmax", "LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization")

# How a variant is validated against the float32 eager model:
#   parity     every output within atol, greedy tokens equal (float32, optimised or not);
#   tolerance  every output within atol + rtol * max|eager| (float16 rounding), greedy agreement reported;
#   agreement  differences and greedy agreement reported, nothing fails (int8: near-tie argmaxes flip).
FLOAT16_ATOL, FLOAT16_RTOL = 1e-2, 1e-2
FLOAT16_CLIP = 2.0**15  # largest constant magnitude in a float16 graph (see float16_graph)


def optimize_graph(path: Path, spec: GraphSpec) -> dict[str, int]:
    """Fuse a graph for ONNX Runtime with onnxscript's ORT fusion rules; returns fusion counts."""
    import onnx_ir as ir
    from onnxscript.rewriter import ort_fusions

    model = ir.load(str(path))
    before = sum(1 for _ in model.graph)
    model, counts = ort_fusions.optimize_for_ort(model)
    counts["cross_kv_bnsh"] = _cross_kv_as_bnsh(model)
    ir.save(model, str(path))
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


def float16_graph(path: Path, spec: GraphSpec) -> dict[str, int]:
    """Weights and compute in float16 (ORT's converter); I/O the spec keeps float32 stays float32."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.load(str(path))
    keep = [t.name for t in (*spec.inputs, *spec.outputs) if t.dtype == "float32"]
    # Constants beyond FLOAT16_CLIP (the -3.4e38 attention mask floor) are clipped to it: far below any
    # real score, so masked weights stay 0, and half float16's range, so `score + floor` (the mask is
    # added in float16) cannot overflow to -inf, which would make a fully masked row NaN.
    model = convert_float_to_float16(model, keep_io_types=keep, max_finite_val=FLOAT16_CLIP,
                                     op_block_list=[*DEFAULT_OP_BLOCK_LIST, *FLOAT32_OPS])
    _repair(model)
    onnx.save(model, str(path))
    nodes = model.graph.node
    return {"casts": sum(n.op_type == "Cast" for n in nodes),
            "float32_nodes": sum(n.op_type in FLOAT32_OPS for n in nodes),
            "float16_initializers": sum(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)}


def _repair(model: onnx.ModelProto) -> None:
    """Undo three quirks of ORT's float16 converter so onnx.checker accepts the result.

    It adds one Cast per (blocked node, input), so an initializer shared by several layer norms
    (the exporter deduplicates equal weights) gets identical Cast nodes; it appends its Casts at the
    end of the node list; and it leaves value_info with the old element types.
    """
    import onnx_ir as ir

    seen, unique = set(), []
    for node in model.graph.node:
        key = (node.op_type, tuple(node.input), tuple(node.output))
        if key not in seen:
            seen.add(key)
            unique.append(node)
    del model.graph.node[:]
    model.graph.node.extend(unique)
    del model.graph.value_info[:]
    graph = ir.serde.deserialize_model(model)
    graph.graph.sort()
    model.CopyFrom(ir.serde.serialize_model(graph))


def quantize_graph_int8(path: Path, spec: GraphSpec) -> dict[str, int]:
    """Dynamic int8 quantisation of MatMul weights (activations quantised on the fly), for CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = path.with_name(path.stem + ".int8.onnx")
    quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=False, extra_options={"MatMulConstBOnly": True})
    tmp.replace(path)
    nodes = onnx.load(str(path), load_external_data=False).graph.node
    return {"quantized_matmuls": sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in nodes)}


Transform = Callable[[Path, GraphSpec], dict[str, int]]
# Applied in this order: fusions on the float32 graph first, then the dtype, then quantisation.
TRANSFORMS: dict[str, Transform] = {"optimize": optimize_graph, "float16": float16_graph, "int8": quantize_graph_int8}
DTYPES = ("float32", "float16")
QUANTIZE = ("int8",)


def requested(options: Any) -> list[str]:
    """The transform names an ExportOptions asks for (ExportError for unsupported combinations)."""
    if options.dtype not in DTYPES:
        raise ExportError(f"--dtype {options.dtype} is not supported; use {' or '.join(DTYPES)}")
    if options.quantize not in (None, *QUANTIZE):
        raise ExportError(f"--quantize {options.quantize} is not supported; use {', '.join(QUANTIZE)}")
    if options.dtype == "float16" and options.quantize:
        raise ExportError("--dtype float16 (CUDA) and --quantize int8 (CPU) cannot be combined; pick one")
    wanted = {"optimize": options.optimize, "float16": options.dtype == "float16", "int8": options.quantize == "int8"}
    return [name for name in TRANSFORMS if wanted[name]]


def apply_variants(folder: Path, manifest: dict[str, Any], model: Any, options: Any) -> None:
    """Rewrite every graph in `folder`; update its manifest entry (I/O dtypes, hash) and `variant`."""
    names = requested(options)
    config = manifest_config(manifest)
    report: dict[str, dict[str, dict[str, int]]] = {}
    for graph_name, entry in manifest["graphs"].items():
        if entry.get("external_data"):
            raise ExportError("--optimize/--quantize/--dtype do not support models over 2 GB yet")
        path = folder / entry["file"]
        spec = ALL_GRAPH_SPECS[graph_name](config, options.dtype)
        for name in names:
            report.setdefault(name, {})[graph_name] = _run(name, path, spec)
        check_io(path, spec)
        entry.update(sha256=sha256_file(path), inputs=[t.to_dict() for t in spec.inputs],
                     outputs=[t.to_dict() for t in spec.outputs])
        log.info("%s: %s", graph_name, {n: report[n][graph_name] for n in names})
    manifest["variant"].update(variant_fields(options), transforms=report)


def variant_fields(options: Any) -> dict[str, Any]:
    """manifest["variant"] for these options; `io` says which graph I/O is float16 and why."""
    fields: dict[str, Any] = {"dtype": options.dtype, "io_dtype": options.dtype, "optimized": options.optimize,
                              "quantize": options.quantize}
    if options.dtype == "float16":
        fields["io"] = {"float16": ["cross.*", "past.*", "present.*"], "float32": ["logits"],
                        "why": "caches stay on the GPU between steps: float16 halves their traffic and "
                               "needs no Casts; logits stay float32 for apps that read them"}
        fields["float32_ops"] = list(FLOAT32_OPS)
    return fields


def _run(name: str, path: Path, spec: GraphSpec) -> dict[str, int]:
    try:
        return TRANSFORMS[name](path, spec)
    except ExportError:
        raise
    except Exception as exc:  # the tools raise many types; keep the first line
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"{name} failed on {path.name}: {first}") from exc


_ELEM_TYPES = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
               "int64": onnx.TensorProto.INT64, "bool": onnx.TensorProto.BOOL}


def check_io(path: Path, spec: GraphSpec) -> None:
    """onnx.checker, and the graph's I/O names and element types exactly as the spec says."""
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path), load_external_data=False).graph
    got = [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output)]
    want = [(t.name, _ELEM_TYPES[t.dtype]) for t in (*spec.inputs, *spec.outputs)]
    if got != want:
        first = next((f"{g} != {w}" for g, w in zip(got, want) if g != w), f"{len(got)} != {len(want)} values")
        raise ExportError(f"{path.name} I/O (name, ONNX type) changed by a transform: {first}; this is a bug "
                          f"in tfm-export, please report it")


def validation_settings(variant: dict[str, Any] | None, atol: float = 1e-4) -> dict[str, Any]:
    """How validate.py checks an export with this manifest variant: mode, atol, rtol."""
    variant = variant or {}
    if variant.get("quantize"):
        return {"mode": "agreement", "atol": atol, "rtol": 0.0, "device": "cpu"}
    if variant.get("dtype") == "float16":
        # On the GPU it is built for when one is usable. ORT's CPU provider runs float16 graphs too,
        # but computes most nodes in float32 behind inserted Casts, so a CPU run checks the graph,
        # the float16 weights and I/O, not the CUDA kernels' float16 arithmetic.
        return {"mode": "tolerance", "atol": max(atol, FLOAT16_ATOL), "rtol": FLOAT16_RTOL, "device": "auto"}
    return {"mode": "parity", "atol": atol, "rtol": 0.0, "device": "cpu"}
