"""Transposed weights stored transposed: the export's own constant folding of `Transpose(initializer)`.

The output layer reads the tied embedding transposed (`Transformer.logits`: a MatMul, which int8
quantisation takes, not a Gemm with transB, which it does not). torch.onnx's optimizer folds that
Transpose into a new initializer, but only below a size limit: a 256k-token vocabulary (NLLB, mBART)
stays a Transpose node. ONNX Runtime then folds it when a session opens, into memory of its own, reading
every page of the embedding; and ORT's int8 quantizer leaves the head in float32, since its weight is
not a constant. Folded here, the graph's data file holds the transposed table beside the embedding: the
session maps both from the file and touches only the embedding rows it gathers.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import onnx

from .checks import external_files

log = logging.getLogger(__name__)


def transposed_initializers(path: Path) -> list[str]:
    """Names of the Transpose nodes in the graph at `path` whose input is an initializer."""
    graph = onnx.load(str(path), load_external_data=False).graph
    names = {tensor.name for tensor in graph.initializer}
    return [node.name for node in graph.node if node.op_type == "Transpose" and node.input[0] in names]


def fold_in_memory(model: Any) -> int:
    """Replace each Transpose of an initializer in the onnx_ir `model` by the transposed initializer (the
    source dropped when nothing else reads it); the number folded. Variants' `fold` transform runs it before
    --optimize and the quantisers: a tied head's weight is the embedding, which its Gather reads too, so
    torch.onnx leaves the head a MatMul of a Transpose at any size, and quantisers take only MatMuls of
    initializers."""
    import onnx_ir as ir

    folded = 0
    for node in list(model.graph):
        source = node.inputs[0] if node.op_type == "Transpose" and node.domain in ("", "ai.onnx") else None
        if source is None or not source.is_initializer() or source.const_value is None:
            continue
        perm = node.attributes.get_ints("perm")
        array = source.const_value.numpy()
        value = ir.Value(name=f"{source.name}.transposed",
                         const_value=ir.tensor(array.transpose(perm) if perm else array.T))
        model.graph.register_initializer(value)
        node.outputs[0].replace_all_uses_with(value)
        model.graph.remove(node, safe=True)
        if not source.uses():  # an untied head: only the transposed table is read
            model.graph.initializers.pop(source.name)
        folded += 1
    return folded


def fold_transposes(path: Path) -> int:
    """Replace each Transpose of an initializer in the graph at `path` (weights in external data) by the
    transposed initializer; the number folded. The graph and its data file are written beside, then moved
    over the exporter's own files."""
    import onnx_ir as ir

    if not transposed_initializers(path):
        return 0
    old = external_files(path)
    model = ir.load(str(path))  # external weights are memory-mapped, read when transposed or saved
    folded = fold_in_memory(model)
    stage = path.parent / f".{path.name}.fold"
    stage.mkdir()
    try:
        ir.save(model, str(stage / path.name), external_data=path.name + ".data")
        del model  # drop the mappings of the old data file before it is replaced
        new = [file.name for file in stage.iterdir()]
        for file in stage.iterdir():
            file.replace(path.parent / file.name)
        for name in set(old) - set(new):  # torch's data file under another name
            (path.parent / name).unlink()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log.info("%s: %d transposed initializer(s) folded", path.name, folded)
    return folded
