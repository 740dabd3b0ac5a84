"""`--dtype float16`: weights and compute in float16 by ONNX Runtime's converter, also past 2 GB.

The converter decides the graph: which nodes stay float32 behind Casts (variants.FLOAT32_OPS and its own
block list), which initializers turn float16, the float32 I/O the spec keeps. It also converts the
weights, but only those held in the ModelProto. A graph whose weights live in external data (a model
over 2 GB) is therefore given to it without them: it rewrites the graph and marks which initializers
turned float16 (a weight it did not read keeps its external reference). Each such weight is then
converted with the converter's own `convert_np_to_float16` while onnx_ir writes the file, one tensor at a
time from the memory-mapped float32 data, instead of the whole model held three times (5.5x the weights
for NLLB-600M).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx

from ..graph_io import GraphSpec

# Kept in float32 inside float16 graphs: the softmax and every layer norm (Casts around them), so
# large attention scores and the mean/variance of the residual stream cannot overflow float16.
FLOAT32_OPS = ("Softmax", "LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization")
FLOAT16_CLIP = 2.0**15  # largest constant magnitude in a float16 graph (see float16_graph)
CHUNK = 1 << 22  # elements of an external weight converted at once (see _lazy)


def float16_graph(src: Path, dst: Path, spec: GraphSpec, external: bool) -> dict[str, int]:
    """Weights and compute in float16 (ORT's converter); I/O the spec keeps float32 stays float32."""
    import onnx_ir as ir
    from onnxruntime.transformers import float16 as converter

    keep = [t.name for t in (*spec.inputs, *spec.outputs) if t.dtype == "float32"]
    proto = onnx.load(str(src), load_external_data=not external)
    stored = _external_tensors(proto, src.parent)
    # The converter reads an initializer's data only for its shape (make_value_info_from_tensor, for the
    # float32 ones a blocked node keeps): from the dims, it needs none.
    with mock.patch.object(converter, "make_value_info_from_tensor", _value_info):
        # Constants beyond FLOAT16_CLIP (the -3.4e38 attention mask floor) are clipped to it: far below any
        # real score, so masked weights stay 0, and half float16's range, so `score + floor` (the mask is
        # added in float16) cannot overflow to -inf, which would make a fully masked row NaN.
        model = converter.convert_float_to_float16(proto, keep_io_types=keep, max_finite_val=FLOAT16_CLIP,
                                                   op_block_list=[*converter.DEFAULT_OP_BLOCK_LIST, *FLOAT32_OPS])
    graph = _repair(model)
    for value in graph.graph.initializers.values():
        if value.name in stored:
            value.const_value = _lazy(stored[value.name], value.const_value.dtype, value.const_value.shape)
    ir.save(graph, str(dst), external_data=dst.name + ".data" if external else None)
    nodes = list(graph.graph)
    return {"casts": sum(n.op_type == "Cast" for n in nodes),
            "float32_nodes": sum(n.op_type in FLOAT32_OPS for n in nodes),
            "float16_initializers": sum(t.dtype == ir.DataType.FLOAT16 for t in graph.graph.initializers.values())}


def _value_info(tensor: onnx.TensorProto) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))


def _external_tensors(proto: onnx.ModelProto, folder: Path) -> dict[str, tuple[Path, int, int, Any]]:
    """name -> (data file, offset, element count, numpy dtype) of each initializer kept in external data."""
    stored = {}
    for tensor in proto.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        count = int(np.prod(tensor.dims, dtype=np.int64))
        stored[tensor.name] = (folder / info["location"], int(info.get("offset", 0)), count, dtype)
    return stored


def _lazy(stored: tuple[Path, int, int, Any], dtype: Any, shape: Any) -> Any:
    """The tensor onnx_ir writes for an external weight: read when saved, converted when the converter
    turned it float16 (with its clipping), as it would have converted the data it was given."""
    import onnx_ir as ir
    from onnxruntime.transformers.float16 import convert_np_to_float16

    path, offset, count, source = stored

    def read() -> Any:
        array = np.memmap(path, dtype=source, mode="r", offset=offset, shape=(count,))
        if dtype == ir.DataType.FLOAT16 and source == np.float32:  # elementwise: in chunks, few temporaries
            half = np.empty(count, dtype=np.float16)
            for start in range(0, count, CHUNK):
                half[start:start + CHUNK] = convert_np_to_float16(np.asarray(array[start:start + CHUNK]),
                                                                  max_finite_val=FLOAT16_CLIP)
            array = half
        return ir.tensor(np.asarray(array).reshape(tuple(shape)))

    return ir.LazyTensor(read, dtype=dtype, shape=shape)


def _repair(model: onnx.ModelProto) -> Any:
    """Undo three quirks of ORT's float16 converter so onnx.checker accepts the result; an onnx_ir model
    (saved through onnx_ir, whose external data has no 2 GB limit).

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
    return graph
