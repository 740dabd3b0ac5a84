"""Projections of one input packed into one MatMul: the export's own exact rewrite of float32 graphs.

Attention multiplies one hidden state by three weights (query, key, value), and the encoder
multiplies its output by every decoder layer's cross key and value weights (twelve for a 6-layer
decoder). Each MatMul is a separate kernel run (at 2 threads, a parallel section of its own), and at
the batch sizes of decoding a run of a 512 x 512 weight is short enough for that to show: packed, the
opus-mt decoder step took 3.34-3.58 ms instead of 3.44-3.62 (BENCHMARKS.md, "The fixed cost of a
step"). `pack_projections` writes such a group as one MatMul by the weights side by side, one Add of
the biases side by side (when every member adds a constant bias) and one Split back into the original
outputs.

The 4-bit MatMuls of `--quantize int4` (com.microsoft.MatMulNBits) are packed the same way, after
quantisation: their blocks run along K within one output column, so the packed weight's bytes, scales and
zero points are the separate ones' side by side (concatenated along N) and no block is shared. On the
NLLB-600M layout this cut an int4 decoder step by about 5 % (BENCHMARKS.md, CPU int4).

The outputs are bit for bit those of the separate MatMuls on ONNX Runtime's CPU kernels: every output
column is still one dot product over the same K values in the same order, and adding a bias is
elementwise. tests/test_packing.py compares every output of packed and unpacked graphs for equality,
not closeness (other devices' GEMMs may pick another blocking for another N: parity, as validation
checks). int8 graphs are not packed: their weights have one scale per tensor, which a packed weight
would share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .rewrite import rewrite_graph


def _constant(value: Any) -> np.ndarray | None:
    return value.const_value.numpy() if value is not None and value.const_value is not None else None


NBITS_ATTRIBUTES = ("K", "bits", "block_size", "accuracy_level")  # what a packed MatMulNBits' members share


def _float_weight(node: Any) -> tuple[list[np.ndarray], tuple, int] | None:
    """A MatMul by a constant 2-D weight read by it alone: ([weight], (K, dtype), N)."""
    weight = _constant(node.inputs[1])
    if weight is None or weight.ndim != 2 or len(list(node.inputs[1].uses())) != 1:
        return None
    return [weight], (weight.shape[0], weight.dtype), weight.shape[1]


def _nbits_weight(node: Any) -> tuple[list[np.ndarray], tuple, int] | None:
    """A MatMulNBits without g_idx or bias whose weight, scales (and zero points) are constants read by it alone:
    (those arrays, N first in each; its attributes but N and their dtypes; N)."""
    arrays = [_constant(value) for value in node.inputs[1:]]
    if len(arrays) > 3 or any(a is None for a in arrays) or any(len(list(v.uses())) != 1 for v in node.inputs[1:]):
        return None
    shared = tuple(node.attributes.get_int(name, 0) for name in NBITS_ATTRIBUTES)
    return arrays, (shared, tuple(a.dtype for a in arrays)), node.attributes.get_int("N")


# (domain, op) -> (its weights as arrays, what a group's members share, its output width); the axis the
# weights are put side by side on (MatMul's B is K x N, MatMulNBits' arrays are N-major).
PACKABLE: dict[tuple[str, str], tuple[Any, int]] = {("", "MatMul"): (_float_weight, 1),
                                                    ("com.microsoft", "MatMulNBits"): (_nbits_weight, 0)}


def _weights(node: Any) -> tuple[list[np.ndarray], tuple, int] | None:
    entry = PACKABLE.get((node.domain, node.op_type))
    return entry[0](node) if entry is not None else None


def _bias_of(matmul: Any, width: int) -> tuple[Any, np.ndarray] | None:
    """(the Add, its bias) when the MatMul's one use is an Add of a constant vector of its output `width`."""
    uses = list(matmul.outputs[0].uses())
    if len(uses) != 1:
        return None
    add, index = uses[0].node, uses[0].idx
    if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
        return None
    bias = _constant(add.inputs[1 - index])
    return (add, bias) if bias is not None and bias.shape == (width,) else None


def _groups(graph: Any) -> list[list[Any]]:
    """Packable MatMuls of one op and kind (PACKABLE), grouped by their shared input; groups of 2+."""
    groups: dict[tuple, list[Any]] = {}
    for node in graph:
        weights = _weights(node)
        if weights is not None:
            groups.setdefault((id(node.inputs[0]), node.domain, node.op_type, weights[1]), []).append(node)
    return [nodes for nodes in groups.values() if len(nodes) > 1]


def _packed_matmul(graph: Any, nodes: list[Any], members: list[list[np.ndarray]], widths: np.ndarray,
                   name: str) -> Any:
    """One node of the group's op over the members' weights (`members`, as _weights gives them) side by side."""
    import onnx_ir as ir

    first = nodes[0]
    axis = PACKABLE[(first.domain, first.op_type)][1]
    inputs = [first.inputs[0]]
    for i in range(len(members[0])):
        value = ir.Value(name=f"{name}.packed_{first.inputs[i + 1].name}",
                         const_value=ir.tensor(np.concatenate([m[i] for m in members], axis=axis)))
        graph.register_initializer(value)
        inputs.append(value)
    attributes = [ir.AttrInt64(key, attr.value) for key, attr in first.attributes.items() if key != "N"]
    if first.op_type == "MatMulNBits":
        attributes.append(ir.AttrInt64("N", int(widths.sum())))
    return ir.Node(first.domain, first.op_type, inputs, attributes=attributes, name=f"{name}.packed_matmul")


def _pack(graph: Any, nodes: list[Any]) -> None:
    import onnx_ir as ir

    found = [_weights(n) for n in nodes]  # each member's arrays read once
    widths = np.array([width for _, _, width in found], dtype=np.int64)
    biases = [_bias_of(n, width) for n, width in zip(nodes, widths)]
    with_bias = all(b is not None for b in biases)
    name = nodes[0].name or nodes[0].outputs[0].name

    def constant(suffix: str, array: np.ndarray) -> Any:
        value = ir.Value(name=f"{name}.packed_{suffix}", const_value=ir.tensor(array))
        graph.register_initializer(value)
        return value

    matmul = _packed_matmul(graph, nodes, [arrays for arrays, _, _ in found], widths, name)
    new, packed = [matmul], matmul.outputs[0]
    if with_bias:
        add = ir.Node("", "Add", [packed, constant("bias", np.concatenate([b[1] for b in biases]))],
                      name=f"{name}.packed_add")
        new.append(add)
        packed = add.outputs[0]
    split = ir.Node("", "Split", [packed, constant("split", widths)], attributes=[ir.AttrInt64("axis", -1)],
                    num_outputs=len(nodes), name=f"{name}.packed_split")
    new.append(split)
    graph.insert_before(nodes[0], new)
    for node, bias, output in zip(nodes, biases, split.outputs):
        old = (bias[0] if with_bias else node).outputs[0]
        kept, old.name = old.name, None
        output.name = kept  # the value keeps its name (and its place among the graph outputs)
        old.replace_all_uses_with(output, replace_graph_outputs=True)
    for node, bias in zip(nodes, biases):
        dropped = list(node.inputs[1:])
        if with_bias:
            dropped += [value for value in bias[0].inputs if value is not None and value.const_value is not None]
            graph.remove(bias[0], safe=True)
        graph.remove(node, safe=True)
        for value in dropped:  # ONNX Runtime warns of initializers no node uses (onnxruntime-web prints it)
            if not list(value.uses()):
                graph.initializers.pop(value.name, None)


def pack_model(model: Any) -> int:
    """Pack every group of projections in an onnx_ir model in place; the number of groups packed."""
    groups = _groups(model.graph)
    for nodes in groups:
        _pack(model.graph, nodes)
    return len(groups)


def pack_projections(path: Path, external: bool = True) -> int:
    """Pack the graph file at `path` (its external data, if any, rewritten beside it); the groups packed.
    `external=False`: the caller knows the graph holds its weights inline (one parse of the file less)."""
    return rewrite_graph(path, {"packed": pack_model}, external)["packed"]
