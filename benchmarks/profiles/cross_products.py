r"""The cross attention's two products alone in ONNX Runtime, in the forms a graph can write them.

    .venv/bin/python -m benchmarks cross-products [--sources 16] [--group 4] [--src-len 512] [--layers 12]

One graph per form over `--layers` distinct key/value tensors (sources, heads 12, src_len, head_dim 64),
so that they stream from memory as in a decoder step (one tensor would stay in the cache): the scores
as `Q K^T` (FusedMatMul transB, ORT's form of the exported graph) and as `K Q^T`, the weights times the
values as `W V` and as `(V^T W^T)`, and a ReduceSum that only reads the tensors (the memory floor). Sessions on 2
threads without spinning, interleaved, median of the repeats (BENCHMARKS.md, "Model families").
"""
from __future__ import annotations

from onnx import TensorProto, helper
import argparse
import numpy as np
import onnxruntime as ort

from tfm_export.bench import harness

HEADS, HEAD_DIM = 12, 64


def cross_session(nodes: list, inputs: dict[str, list[int]], outputs: list[str]) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "products",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def forms(b: int, g: int, s: int, layers: int) -> dict[str, tuple[str, list[int], object]]:
    """name -> (small input's name, its shape, node maker (i, small input) -> the node over tensor t{i})."""
    node = helper.make_node
    return {
        "scores Q K^T (FusedMatMul transB)": ("q", [b, HEADS, g, HEAD_DIM], lambda i: node(
            "FusedMatMul", ["q", f"t{i}"], [f"o{i}"], domain="com.microsoft", transB=1)),
        "scores K Q^T (MatMul)": ("qt", [b, HEADS, HEAD_DIM, g], lambda i: node("MatMul", [f"t{i}", "qt"], [f"o{i}"])),
        "weights x values W V (MatMul)": ("w", [b, HEADS, g, s], lambda i: node("MatMul", ["w", f"t{i}"], [f"o{i}"])),
        "the same as V^T W^T (transA)": ("wt", [b, HEADS, s, g], lambda i: node(
            "FusedMatMul", [f"t{i}", "wt"], [f"o{i}"], domain="com.microsoft", transA=1)),
        "read only (ReduceSum)": ("", [], lambda i: node("ReduceSum", [f"t{i}"], [f"o{i}"], keepdims=0)),
    }


def cross_products_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=16, help="sources (default: 16)")
    parser.add_argument("--group", type=int, default=4, help="query rows per source: beams (default: 4)")
    parser.add_argument("--src-len", type=int, default=512, help="source tokens (default: 512)")
    parser.add_argument("--layers", type=int, default=12, help="distinct key/value tensors (default: 12)")
    parser.add_argument("--repeat", type=int, default=12, help="timed rounds (default: 12)")
    args = parser.parse_args()
    b, g, s, n = args.sources, args.group, args.src_len, args.layers
    rng = np.random.default_rng(0)
    big = [b, HEADS, s, HEAD_DIM]
    tensors = {f"t{i}": rng.standard_normal(big, dtype=np.float32) for i in range(n)}
    runs = {}
    for name, (small, shape, make) in forms(b, g, s, n).items():
        inputs = {**({small: shape} if small else {}), **{t: big for t in tensors}}
        feeds = {**({small: rng.standard_normal(shape, dtype=np.float32)} if small else {}), **tensors}
        runs[name] = (cross_session([make(i) for i in range(n)], inputs, [f"o{i}" for i in range(n)]), feeds)
    sides = {name: (lambda sess=sess, feeds=feeds: 1e3 * harness.timed(lambda: sess.run(None, feeds)))
             for name, (sess, feeds) in runs.items()}
    times = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=0))
    size = np.prod(big) * 4 / 1e6
    for name, values in times.items():
        print(f"{name:34s} {harness.median(values):7.2f} ms over {n} tensors of {size:.0f} MB")

