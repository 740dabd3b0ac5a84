"""The earlier positions' head of decoder.onnx under an ONNX If where its kernels cost more than the If.

model.Transformer.project_apart splits the head: `logits`, the last new position's, and EARLIER_LOGITS (batch,
tgt_len - 1, vocab), the positions before it, which only a speculative step has (runtime.decode.speculative) and a
plain one-id step leaves empty. The nodes between the Slice of those rows and that output are whatever the variant
made of the head: float32 or float16, MatMul and bias Add (and a Cast); int8: DynamicQuantizeLinear, MatMulInteger
and its scales; int4: MatMulNBits; the scan: MatMulNBits, TopK, Gather, ScatterElements, export.head_scan. Unless
every one of them is in ZERO_ROW_KERNELS, they go under

    rows           = Slice(hidden, :-1)                  (batch, tgt_len - 1, d_model), empty in a plain step
    earlier_logits = If(Size(rows) > 0, then: the head of rows, else: Reshape(rows, [0, 0, vocab]))

The else branch copies nothing (zero elements); a float16 head adds a Cast to earlier_logits' float32. The then
branch reads the weights where they are, the main graph's initializers (outer scope): one copy, shared with the
last position's head. Why the If: the scan's TopK in ONNX Runtime 1.30 (Node, the browser) dies of a division by
zero on zero rows, and a longer head's kernels over zero rows cost more than the If. Why not always: the If is not
free. `python -m benchmarks earlier-head` (the head's tail alone, d_model 128, 1 thread) puts what a plain step pays
over no earlier head at 3.0 µs under the If and 1.6 µs for an unguarded float32 head (MatMul and Add over zero
rows), and the bundled decoder's plain step at batch 1 at 1.035x / 1.020x the one without earlier_logits
(BENCHMARKS.md, "Decode core"). Applied once, after every transform (export.exporter), to the top-level graph the
transforms write.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..errors import ExportError
from ..graph_io import EARLIER_LOGITS
from .int8 import initializer

log = logging.getLogger(__name__)

NAME = "earlier_head"  # the prefix of the nodes and initializers made here
# The heads' ops that run on zero rows for less than an If costs (the module docstring): a float32 or
# float16 head (with T5's scale, a float16 head's Cast) stays in the main graph.
ZERO_ROW_KERNELS = frozenset({"MatMul", "Add", "Mul", "Cast"})


def guard_earlier_head(model: Any) -> int:
    """Put the nodes that compute the onnx_ir `model`'s EARLIER_LOGITS output from its rows under an If; 1 when
    done, 0 when the graph has no such output, has it guarded already or its head's kernels are ZERO_ROW_KERNELS."""
    graph = model.graph
    output = next((value for value in graph.outputs if value.name == EARLIER_LOGITS), None)
    if output is None or output.producer() is None or output.producer().op_type == "If":
        return 0
    rows, head = _rows_and_head(_exclusive_ancestors(graph, output), _per_step(graph))
    if all(node.op_type in ZERO_ROW_KERNELS for node in head):
        log.info("%s: %d nodes over the earlier rows, no If", EARLIER_LOGITS, len(head))
        return 0
    unless_empty(model, rows, head, output, NAME)
    log.info("%s: %d nodes under an If on earlier rows", EARLIER_LOGITS, len(head))
    return 1


def unless_empty(model: Any, rows: Any, nodes: list[Any], result: Any, name: str) -> Any:
    """Move `nodes` (in graph order; they compute the graph output `result`, (..., vocab), from `rows` and outer
    values) under an If that runs them only when `rows` has elements, else gives an empty `result` of `rows`'
    leading dims; the If's output takes `result`'s place and name among the graph's outputs. Returns the If."""
    import onnx_ir as ir

    graph = model.graph
    vocab = result.shape[-1] if result.shape is not None and result.shape.rank() == 3 else None
    if not isinstance(vocab, int) or (rows.shape is not None and rows.shape.rank() != 3):
        raise ExportError(f"{result.name}: expected (batch, rows, vocab) logits of (batch, rows, width) rows; this "
                          f"is a bug in tfm-export, please report it")
    zero = initializer(model, f"{name}_no_elements", np.array(0, dtype=np.int64))
    empty_shape = initializer(model, f"{name}_empty_shape", np.array([0, 0, vocab], dtype=np.int64))
    size = ir.node("Size", [rows], name=f"{name}_elements")
    has_rows = ir.node("Greater", [size.outputs[0], zero], name=f"{name}_has_rows")
    empty = [ir.node("Reshape", [rows, empty_shape], name=f"{name}_none")]  # 0 elements: nothing copied
    if rows.dtype != result.dtype:  # a float16 head (or rows of no recorded type): earlier_logits are float32
        empty.append(ir.node("Cast", [empty[0].outputs[0]], attributes={"to": result.dtype}, name=f"{name}_none_cast"))
    index = graph.outputs.index(result)
    graph.outputs.pop(index)  # a value is the output of one graph: `result` becomes the then branch's
    graph.remove(nodes, safe=False)
    for node in (*nodes, *empty):  # a subgraph's values need names of their own (SSA)
        for i, value in enumerate(node.outputs):
            value.name = value.name or f"{node.name}_{i}"
    otherwise = empty[-1].outputs[0]
    otherwise.type, otherwise.shape = result.type, result.shape
    public, result.name = result.name, f"{name}_logits"
    then = ir.Graph([], [result], nodes=nodes, name=f"{name}_rows")
    else_ = ir.Graph([], [otherwise], nodes=empty, name=f"{name}_no_rows")
    branch = ir.node("If", [has_rows.outputs[0]], attributes={"then_branch": then, "else_branch": else_},
                     name=f"{name}_unless_empty")
    out = branch.outputs[0]
    out.name, out.type, out.shape = public, result.type, result.shape
    graph.extend([size, has_rows, branch])  # last: every outer value the branches read is made before
    graph.outputs.insert(index, out)
    return branch


def _exclusive_ancestors(graph: Any, output: Any) -> list[Any]:
    """The nodes whose every output feeds only `output` (the graph output), in graph order: walked in reverse,
    so each node's users are decided before it."""
    inside = {output.producer()}
    for node in reversed(list(graph)):
        if node in inside:
            continue
        users = [user for value in node.outputs for user, _ in value.uses()]
        if users and not any(value.is_graph_output() for value in node.outputs) and all(u in inside for u in users):
            inside.add(node)
    return [node for node in graph if node in inside]


def _rows_and_head(cone: list[Any], per_step: set[Any]) -> tuple[Any, list[Any]]:
    """(the rows: the output of the cone's Slice of the hidden states, what the head projects; the cone's nodes
    after it, which compute the logits from the rows). `per_step`: the graph's values computed from its inputs;
    others that the cone reads (a tied head's weight made in the graph from the embedding, e.g. T5's Transpose or
    its d_model ** -0.5 scale) are weights, read from the outer scope like initializers."""
    produced = {value for node in cone for value in node.outputs}
    entries = [node for node in cone if any(value in per_step and value not in produced for value in node.inputs)]
    if len(entries) != 1 or entries[0].op_type != "Slice":
        found = ", ".join(node.op_type for node in entries) or "none"
        raise ExportError(f"{EARLIER_LOGITS}: expected one Slice of the hidden states before its head, found "
                          f"{found}; this is a bug in tfm-export, please report it")
    (entry,) = entries
    before = _ancestors_within(entry, cone)
    return entry.outputs[0], [node for node in cone if node is not entry and node not in before]


def _ancestors_within(node: Any, cone: list[Any]) -> set[Any]:
    """The nodes of `cone` that `node` reads from, directly or not (the Slice's computed bounds, if any)."""
    members, found, frontier = set(cone), set(), list(node.inputs)
    while frontier:
        value = frontier.pop()
        producer = value.producer() if value is not None else None
        if producer in members and producer not in found:
            found.add(producer)
            frontier.extend(producer.inputs)
    return found


def _per_step(graph: Any) -> set[Any]:
    """The values of `graph` computed from its inputs (in graph order, so each node's inputs are decided first)."""
    dynamic = set(graph.inputs)
    for node in graph:
        if any(value in dynamic for value in node.inputs if value is not None):
            dynamic.update(node.outputs)
    return dynamic
