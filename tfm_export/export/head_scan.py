"""`--int4-head scan`: the vocabulary head as a coarse scan whose best candidates are scored exactly.

At batch 1 the output layer is the largest weight a step reads (NLLB-600M: 256k x 1024, 262 MB in int8, half of
an int4 step), yet decoding needs exact scores only for the few tokens that can win. So the head becomes

    scan   = MatMulNBits(x, W in 4 or 2 bits)         (batch, sequence, vocab)  every token, roughly
    top    = TopK(scan, CANDIDATES)                   (batch, sequence, k)      the candidates
    exact  = Gather(rows, top) @ x                    (batch, sequence, k)      their true scores
    logits = ScatterElements(scan, top, exact)        (batch, sequence, vocab)

`rows` is the float32 embedding table when the head is tied to it (the decoder's Gather already holds it: no
byte added), else the head's rows in int8 with a scale each. The chosen token is then scored as in float32
(tied) or weight-only int8, better than the int8 head's one scale for the whole matrix, as long as it is among
the scan's CANDIDATES best; the other logits keep the scan's error, which only the normaliser (beam search's
log-softmax) and sampling's tail read. The 4-bit scan (blocks of 128) reads 0.53x the int8 head's bytes, the
2-bit one 0.28x. Measured in BENCHMARKS.md ("CPU int4") and `python -m benchmarks scan-recall`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from .int8 import initializer, unmap

log = logging.getLogger(__name__)

# `--int4-head` choice -> the scan's bits. `python -m benchmarks scan-recall` (NLLB's vocabulary, random head, winners of
# probability 0.3-0.9 over Gaussian logits): the 4-bit scan never missed float32's token and put the log-normaliser
# within 0.015; the 2-bit one missed up to 1.5 % of uncertain winners and the normaliser by up to 0.75.
SCAN_BITS = {"scan": 4, "scan2": 2}
SCAN_BLOCK = 128  # fewer scales to read than blocks of 32: the scan only ranks (2-bit blocks of 32 ran slower)
CANDIDATES = 256  # 32 missed 13 % of uncertain winners at 2 bits; 256 cost 3 % more of a step than 32
CHUNK_ROWS = 4096  # vocabulary entries packed, compared or made int8 at once: temporaries of 16 MB, not 1 GB


@dataclass(frozen=True)
class ScanTables:
    """What the scan of one head weight reads: made once, shared by the head's MatMuls (the last position's and
    the earlier ones', model.Transformer.project_apart)."""
    packed: tuple[Any, Any, Any]  # MatMulNBits' weight, scales and zero points
    table: Any  # the rows that score the candidates: the tied embedding (float32) or int8 rows
    scale: Any  # the int8 rows' scale each; None when tied
    count: Any  # the number of candidates (1,) int64
    last: Any  # the axis -1 (1,) int64
    k: int
    n: int


def scan_tables(model: Any, weight: Any, bits: int) -> ScanTables:
    """The scan's initializers for the head `weight` (float32 (K, N))."""
    array = weight.const_value.numpy()
    k, n = array.shape
    table, scale = _tied_table(model.graph, array), None
    if table is None:
        q, row_scale = _int8_rows(array)
        table = initializer(model, f"{weight.name}_rows_int8", q)
        scale = initializer(model, f"{weight.name}_rows_scale", row_scale)
    packed = _pack_scan(model, weight, array, bits)
    del array  # no view of the mapping may outlive it
    unmap(weight.const_value)
    count = initializer(model, f"{weight.name}_candidates", np.array([min(CANDIDATES, n)], dtype=np.int64))
    last = initializer(model, f"{weight.name}_last_axis", np.array([-1], dtype=np.int64))
    return ScanTables(packed, table, scale, count, last, int(k), int(n))


def scan_head(model: Any, node: Any, weight: Any, accuracy_level: int, bits: int, made: dict) -> bool:
    """Replace the head MatMul `node` (B = `weight`, float32 (K, N)) of the onnx_ir `model` by the scan and the
    exact scoring of its candidates; whether the embedding's float rows score them (tied), else int8 rows.
    `made` maps a weight to its ScanTables, made once. The earlier positions' scan, which has no rows in a plain
    step (ONNX Runtime 1.30's TopK, in Node and the browser, dies of a division by zero on zero rows), goes under
    an If once the export's transforms are done (export.earlier_head: TopK is no ZERO_ROW_KERNELS op)."""
    import onnx_ir as ir

    if weight not in made:
        made[weight] = scan_tables(model, weight, bits)
    tables = made[weight]
    packed, table, scale, count, last, k, n = (tables.packed, tables.table, tables.scale, tables.count,
                                               tables.last, tables.k, tables.n)
    tied = scale is None
    x, out = node.inputs[0], node.outputs[0]
    attributes = {"K": k, "N": n, "bits": bits, "block_size": SCAN_BLOCK}
    if accuracy_level:
        attributes["accuracy_level"] = accuracy_level
    name = node.name or out.name
    scan = ir.node("MatMulNBits", [x, *packed], attributes=attributes, domain="com.microsoft", name=f"{name}_scan")
    top = ir.node("TopK", [scan.outputs[0], count], attributes={"axis": -1, "sorted": 0}, num_outputs=2,
                  name=f"{name}_candidates")
    gathered = ir.node("Gather", [table, top.outputs[1]], attributes={"axis": 0}, name=f"{name}_rows")
    new = [scan, top, gathered]
    rows = gathered.outputs[0]  # (batch, sequence, k, K)
    if scale is not None:
        new.append(ir.node("Cast", [rows], attributes={"to": ir.DataType.FLOAT}, name=f"{name}_rows_float"))
        rows = new[-1].outputs[0]
    column = ir.node("Unsqueeze", [x, last], name=f"{name}_column")  # (batch, sequence, K, 1)
    product = ir.node("MatMul", [rows, column.outputs[0]], name=f"{name}_exact")  # (batch, sequence, k, 1)
    exact = ir.node("Squeeze", [product.outputs[0], last], name=f"{name}_exact_squeeze")
    new += [column, product, exact]
    if scale is not None:
        scales = ir.node("Gather", [scale, top.outputs[1]], attributes={"axis": 0}, name=f"{name}_row_scales")
        new += [scales, ir.node("Mul", [exact.outputs[0], scales.outputs[0]], name=f"{name}_exact_scaled")]
    scored = new[-1].outputs[0]
    merged = ir.node("ScatterElements", [scan.outputs[0], top.outputs[1], scored], attributes={"axis": -1},
                     name=f"{name}_merged")
    new, result = [*new, merged], merged.outputs[0]
    ir.convenience.replace_nodes_and_values(model.graph, node, [node], new, [out], [result])
    if not weight.uses():
        model.graph.initializers.pop(weight.name)
    _pick_among_candidates(model, merged.outputs[0], top.outputs[1], scored, name)
    log.info("%s: a %d-bit scan of %d tokens, %d candidates scored from %s", name, bits, n, min(CANDIDATES, n),
             "the tied embedding" if tied else "int8 rows")
    return tied


def _pick_among_candidates(model: Any, logits: Any, ids: Any, scored: Any, name: str) -> None:
    """The greedy ArgMax over the merged `logits` (the graph's next_ids, model.Transformer.pick: maybe behind a
    Where of the banned ids) taken over the candidates' exact scores instead: an ArgMax of 256k values costs as
    much as the TopK (NLLB: 0.23 ms a step), one of 256 nothing. Ties go to the lowest id, as ArgMax's
    select_last_index=0 gives them; the result is ArgMax(logits)'s whenever the winner is a candidate."""
    import onnx_ir as ir

    for user, _ in list(logits.uses()):
        banned, picker = _banned_then_argmax(user, logits)
        if picker is None:
            continue
        values, new = scored, []
        if banned is not None:  # the same Where, on the candidates' rows of its (vocab,) mask
            mask = ir.node("Gather", [banned.inputs[0], ids], attributes={"axis": 0}, name=f"{name}_banned")
            new += [mask, ir.node("Where", [mask.outputs[0], banned.inputs[1], values], name=f"{name}_masked")]
            values = new[-1].outputs[0]
        last = initializer(model, f"{name}_pick_axis", np.array([-1], dtype=np.int64))
        none = initializer(model, f"{name}_pick_none", np.array(np.iinfo(np.int64).max, dtype=np.int64))
        best = ir.node("ReduceMax", [values, last], attributes={"keepdims": 1}, name=f"{name}_best")
        hit = ir.node("Equal", [values, best.outputs[0]], name=f"{name}_hits")
        hit_ids = ir.node("Where", [hit.outputs[0], ids, none], name=f"{name}_hit_ids")
        keep = picker.attributes.get_int("keepdims", 1)
        lowest = ir.node("ReduceMin", [hit_ids.outputs[0], last], attributes={"keepdims": keep}, name=f"{name}_pick")
        new += [best, hit, hit_ids, lowest]
        old = [banned, picker] if banned is not None and len(banned.outputs[0].uses()) == 1 else [picker]
        ir.convenience.replace_nodes_and_values(model.graph, picker, old, new, [picker.outputs[0]], [lowest.outputs[0]])
        return  # a decoder has one greedy pick


def _banned_then_argmax(user: Any, logits: Any) -> tuple[Any, Any]:
    """(the Where banning ids by a constant (vocab,) mask, or None; the ArgMax over the last axis) that `user`
    of `logits` starts, or (None, None) when it is neither."""
    banned = None
    if (user.op_type == "Where" and user.inputs[2] is logits and user.inputs[0].const_value is not None
            and len(user.inputs[0].const_value.shape) == 1 and user.inputs[1].const_value is not None):
        users = user.outputs[0].uses()
        banned, user = user, (users[0][0] if len(users) == 1 else None)
    if user is None or user.op_type != "ArgMax" or user.attributes.get_int("select_last_index", 0):
        return None, None
    axis, shape = user.attributes.get_int("axis", 0), logits.shape
    return (banned, user) if axis == -1 or (shape is not None and axis == len(shape) - 1) else (None, None)


def _pack_scan(model: Any, weight: Any, array: np.ndarray, bits: int) -> tuple[Any, Any, Any]:
    """The `bits` MatMulNBits initializers of `array` (ORT's own block quantiser: min/max per block), packed
    CHUNK_ROWS columns at a time: each column is quantised on its own, and the quantiser's float copies of a
    whole 256k-column head would take 2 GB."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                  DefaultWeightOnlyQuantizer)

    quantizer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(block_size=SCAN_BLOCK, is_symmetric=False,
                                                                        bits=bits))
    parts = [quantizer.qbits_block_quant(np.ascontiguousarray(array[:, start:start + CHUNK_ROWS]))
             for start in range(0, array.shape[1], CHUNK_ROWS)]
    q, scales, zeros = (np.concatenate([part[i] for part in parts]) for i in range(3))
    base = f"{weight.name}_scan"
    return (initializer(model, f"{base}_Q{bits}", q), initializer(model, f"{base}_scales", scales),
            initializer(model, f"{base}_zero_points", zeros))


def _tied_table(graph: Any, array: np.ndarray) -> Any:
    """The float32 (N, K) initializer a Gather reads that is `array` (K, N) transposed (a tied embedding), or
    None. Compared in full: a head that merely shares the embedding's shape must not be scored from it."""
    k, n = array.shape
    for value in graph.initializers.values():
        tensor = value.const_value
        if tensor is None or tuple(tensor.shape) != (n, k) or tensor.dtype.name != "FLOAT":
            continue
        if not any(user.op_type == "Gather" and user.inputs[0] is value for user, _ in value.uses()):
            continue
        table = tensor.numpy()
        same = all(np.array_equal(table[start:start + CHUNK_ROWS], array[:, start:start + CHUNK_ROWS].T)
                   for start in range(0, n, CHUNK_ROWS))
        del table  # no view of the mapping may outlive it
        unmap(tensor)  # read again, page by page, when the graph is saved
        if same:
            return value
    return None


def _int8_rows(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) int8 rows of the (K, N) head and a float32 scale per row (symmetric, largest magnitude -> 127)."""
    k, n = array.shape
    q = np.empty((n, k), dtype=np.int8)
    scales = np.empty(n, dtype=np.float32)
    for start in range(0, n, CHUNK_ROWS):
        rows = array[:, start:start + CHUNK_ROWS].T
        scale = np.maximum(np.abs(rows).max(axis=1), np.finfo(np.float32).tiny) / 127.0
        q[start:start + len(rows)] = np.clip(np.rint(rows / scale[:, None]), -127, 127)
        scales[start:start + len(rows)] = scale
    return q, scales
