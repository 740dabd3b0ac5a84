"""`--quantize int8`: dynamic int8 MatMuls, written graph node by graph node.

The graph is what ONNX Runtime's `quantize_dynamic(weight_type=QInt8, op_types_to_quantize=["MatMul"],
extra_options={"MatMulConstBOnly": True})` writes, and the weights are quantised by its own
`quant_utils.quantize_data` (symmetric int8, one scale per tensor): for each MatMul whose B is a float32
matrix initializer,

    A -> DynamicQuantizeLinear -> (A_q uint8, A_scale, A_zero)      once per activation
    MatMulInteger(A_q, B_q int8, A_zero, B_zero 0) -> Cast(float) -> Mul(., A_scale * B_scale)

which ORT's graph optimizer fuses into one DynamicQuantizeMatMul when a session opens. Why not call
quantize_dynamic: it holds the whole model as protobuf, shape-inferred copies and the quantised copy at
once, 3.7x the graph's size (10.5 GB for NLLB-600M's decoder), where this reads one weight at a time from
the memory-mapped file and holds only the int8 tensors it makes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


CHUNK_ELEMENTS = 1 << 22  # elements of a weight quantised at once, in whole rows (see _quantized)


@dataclass
class Quantized:
    """What the graph's values became, each made once: an activation's DynamicQuantizeLinear outputs (the q, k
    and v projections of one input share its quantisation), a weight's int8 initializers (the head's two
    MatMuls, model.Transformer.project_apart, share one)."""

    activations: dict = field(default_factory=dict)  # ir.Value -> (A_q, A_scale, A_zero)
    weights: dict = field(default_factory=dict)  # ir.Value -> (B_q, B_scale, B_zero)


def quantize_int8(src: Path, dst: Path, external: bool) -> int:
    """Write the int8 graph of `src` to `dst` (weights in `<dst name>.data` when `external`); the number of
    MatMuls quantised."""
    import onnx_ir as ir

    model = ir.load(str(src))  # external weights stay memory-mapped until read
    made = Quantized()
    count = 0
    for node in list(model.graph):
        weight = float_matrix(node)
        if weight is None:
            continue
        quantize_matmul_int8(model, node, weight, made)
        count += 1
    ir.save(model, str(dst), external_data=dst.name + ".data" if external else None)
    return count


def quantize_matmul_int8(model, node, weight, made: Quantized) -> None:
    """One MatMul of `model` made int8 (B = `weight`), reusing what `made` holds."""
    import onnx_ir as ir

    a = node.inputs[0]
    if a not in made.activations:
        dql = ir.node("DynamicQuantizeLinear", [a], num_outputs=3, name=f"{a.name}_QuantizeLinear")
        model.graph.insert_before(node, dql)
        made.activations[a] = tuple(dql.outputs)
    if weight not in made.weights:
        made.weights[weight] = _quantized_weight(model, weight)
    _replace(model, node, weight, made.activations[a], made.weights[weight])


def float_matrix(node) -> "object | None":
    """The float32 2-D initializer B of a default-domain MatMul, else None."""
    import onnx_ir as ir

    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        return None
    b = node.inputs[1]
    if b is None or not b.is_initializer() or b.const_value is None:
        return None
    tensor = b.const_value
    return b if tensor.dtype == ir.DataType.FLOAT and len(tensor.shape) == 2 else None


def _quantized_weight(model, weight) -> tuple:
    """(B_q int8, B_scale, B_zero) initializers of the float32 `weight`."""
    zero, scale, q = _quantized(weight.const_value.numpy())
    unmap(weight.const_value)
    base = weight.name
    return (initializer(model, f"{base}_quantized", np.asarray(q, dtype=np.int8)),
            initializer(model, f"{base}_scale", np.asarray(scale, dtype=np.float32).reshape(())),
            initializer(model, f"{base}_zero_point", np.asarray(zero, dtype=np.int8).reshape(())))


def _replace(model, node, weight, quantized_a: tuple, quantized_b: tuple) -> None:
    """MatMul(A, B) -> MatMulInteger, Cast, Mul, Mul, with B quantised (a new initializer; the float one
    is dropped when nothing else reads it, as a tied embedding's Gather still does)."""
    import onnx_ir as ir

    a_q, a_scale, a_zero = quantized_a
    b_q, b_scale, b_zero = quantized_b
    out = node.outputs[0]
    integer = ir.node("MatMulInteger", [a_q, b_q, a_zero, b_zero], name=f"{out.name}_MatMulInteger")
    cast = ir.node("Cast", [integer.outputs[0]], attributes={"to": ir.DataType.FLOAT}, name=f"{out.name}_Cast")
    scales = ir.node("Mul", [a_scale, b_scale], name=f"{out.name}_scales_mul")
    result = ir.node("Mul", [cast.outputs[0], scales.outputs[0]], name=f"{out.name}_output_scale_mul")
    new = [integer, cast, scales, result]
    ir.convenience.replace_nodes_and_values(model.graph, node, [node], new, [out], [result.outputs[0]])
    if not weight.uses():
        model.graph.initializers.pop(weight.name)


def _quantized(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(zero point, scale, int8 data): ORT's quantize_data (symmetric int8, one scale per tensor), its
    elementwise quantize_nparray applied to whole rows, about CHUNK_ELEMENTS at a time, so that a 1 GB output
    projection needs 16 MB of float temporaries instead of several copies of its 1 GB. Counted in elements,
    not rows: the head is stored transposed (export/folding.py), 1024 rows of 256k."""
    import onnx
    from onnxruntime.quantization.quant_utils import compute_data_quant_params, quantize_nparray

    zero, scale = compute_data_quant_params(data, onnx.TensorProto.INT8, True)
    q = np.empty(data.shape, dtype=np.int8)
    rows = max(1, CHUNK_ELEMENTS // max(1, data.shape[1]))
    for start in range(0, data.shape[0], rows):
        q[start:start + rows] = quantize_nparray(onnx.TensorProto.INT8, data[start:start + rows], scale, zero)
    return zero, scale, q


def unmap(tensor) -> None:
    """Drop a memory-mapped external tensor's pages from this process, which would stay counted as its memory
    (read again, page by page, if the graph is saved with it). No view of its array may outlive this."""
    release = getattr(tensor, "release", None)
    if release is not None:
        release()


def initializer(model, name: str, array: np.ndarray):
    import onnx_ir as ir

    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    model.graph.register_initializer(value)
    return value
