"""Projections of one input packed into one MatMul: the export's own exact rewrite of float32 graphs.

Attention multiplies one hidden state by three weights (query, key, value), and the encoder
multiplies its output by every decoder layer's cross key and value weights (twelve for a 6-layer
decoder). Each MatMul is a separate kernel run (at 2 threads, a parallel section of its own), and at
the batch sizes of decoding a run of a 512 x 512 weight is short enough for that to show: packed, the
opus-mt decoder step took 3.34-3.58 ms instead of 3.44-3.62 (BENCHMARKS.md, "The fixed cost of a
step"). `pack_projections` writes such a group as one MatMul by the weights side by side, one Add of
the biases side by side (when every member adds a constant bias) and one Split back into the original
outputs.

The outputs are bit for bit those of the separate MatMuls on ONNX Runtime's CPU kernels: every output
column is still one dot product over the same K values in the same order, and adding a bias is
elementwise. tests/test_packing.py compares every output of packed and unpacked graphs for equality,
not closeness (other devices' GEMMs may pick another blocking for another N: parity, as validation
checks). Only float32 graphs without quantisation are packed: int8 and int4 weights are scaled per
tensor or per block, and a packed weight would share scales the separate ones did not.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .checks import external_files

log = logging.getLogger(__name__)


def _constant(value: Any) -> np.ndarray | None:
    return value.const_value.numpy() if value is not None and value.const_value is not None else None


def _bias_of(matmul: Any) -> tuple[Any, np.ndarray] | None:
    """(the Add, its bias) when the MatMul's one use is an Add of a constant vector."""
    uses = list(matmul.outputs[0].uses())
    if len(uses) != 1:
        return None
    add, index = uses[0].node, uses[0].idx
    if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
        return None
    bias = _constant(add.inputs[1 - index])
    width = _constant(matmul.inputs[1]).shape[1]
    return (add, bias) if bias is not None and bias.shape == (width,) else None


def _groups(graph: Any) -> list[list[Any]]:
    """MatMuls by constant 2-D weights of the same K and dtype, grouped by their shared input; groups of 2+."""
    groups: dict[int, list[Any]] = {}
    for node in graph:
        weight = _constant(node.inputs[1]) if node.op_type == "MatMul" and node.domain == "" else None
        if weight is not None and weight.ndim == 2 and len(list(node.inputs[1].uses())) == 1:
            groups.setdefault(id(node.inputs[0]), []).append(node)
    packed = []
    for nodes in groups.values():
        kinds = {(_constant(n.inputs[1]).shape[0], _constant(n.inputs[1]).dtype) for n in nodes}
        if len(nodes) > 1 and len(kinds) == 1:
            packed.append(nodes)
    return packed


def _pack(graph: Any, nodes: list[Any]) -> None:
    import onnx_ir as ir

    weights = [_constant(n.inputs[1]) for n in nodes]
    biases = [_bias_of(n) for n in nodes]
    with_bias = all(b is not None for b in biases)
    name = nodes[0].name or nodes[0].outputs[0].name

    def constant(suffix: str, array: np.ndarray) -> Any:
        value = ir.Value(name=f"{name}.packed_{suffix}", const_value=ir.tensor(array))
        graph.register_initializer(value)
        return value

    matmul = ir.Node("", "MatMul", [nodes[0].inputs[0], constant("weight", np.concatenate(weights, axis=1))],
                     name=f"{name}.packed_matmul")
    new, packed = [matmul], matmul.outputs[0]
    if with_bias:
        add = ir.Node("", "Add", [packed, constant("bias", np.concatenate([b[1] for b in biases]))],
                      name=f"{name}.packed_add")
        new.append(add)
        packed = add.outputs[0]
    widths = np.array([w.shape[1] for w in weights], dtype=np.int64)
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
        dropped = [node.inputs[1]]
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
    import onnx_ir as ir

    old = external_files(path) if external else []
    model = ir.load(str(path))  # external weights stay memory-mapped until saved
    packed = pack_model(model)
    if not packed:
        return 0
    stage = path.parent / f".{path.name}.pack"
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
    log.info("%s: %d groups of projections packed", path.name, packed)
    return packed
