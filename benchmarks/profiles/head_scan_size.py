r"""The vocabulary head alone by size: int8 (`--int4-head int8`) against the 4-bit scan (`scan`), batch 1 and 16.

    .venv/bin/python -m benchmarks head-scan-size --work DIR [--threads 1] [--rounds 12]

For each (K, N) a graph of a tied head (an embedding Gather and the MatMul of its transpose, as the exporter stores
a tied head) goes through `quantize_int4` with either head, so the graphs are the exporter's own; each run is
timed with the head cold (64 MB read between runs: in a step the head comes after the layers' weights), on huge
pages as the runtime opens sessions. 1 thread times CPU time (`time.thread_time`, robust to the shared VM's other
load); more threads time wall clock. What `--int4-head auto`'s threshold (export.int4.SCAN_MIN_WEIGHTS) rests on.
"""
from __future__ import annotations

from onnx import TensorProto, helper, numpy_helper
from pathlib import Path
import argparse
import numpy as np
import onnx
import onnxruntime as ort
import time

from tfm_export.bench import harness
from tfm_export.export.int4 import Int4Settings, quantize_int4
from tfm_export.runtime import hugepages

SIZES = [(512, 15600), (512, 32000), (1024, 32000), (512, 64000), (1024, 64000), (1024, 128000)]
HEADS = ("int8", "scan")
FLUSH = np.ones((64 << 20) // 8)  # 64 MB


def build(folder: Path, k: int, n: int) -> None:
    """f32.onnx, int8.onnx and scan.onnx of a tied (n, k) embedding in `folder` (kept: reused next time)."""
    if (folder / "scan.onnx").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    table = (np.random.default_rng(0).standard_normal((n, k)) * 0.02).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["embedding", "ids"], ["embedded"], axis=0),
         helper.make_node("MatMul", ["x", "head"], ["logits"])], "head",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 1]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, k])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("embedded", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "embedding"), numpy_helper.from_array(np.ascontiguousarray(table.T), "head")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(folder / "f32.onnx"), save_as_external_data=True, location="f32.onnx.data")
    for head in HEADS:
        quantize_int4(folder / "f32.onnx", folder / f"{head}.onnx", True, Int4Settings(head=head))


def scan_session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    with hugepages.new_memory_on_huge_pages(background=False):
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def measure(folder: Path, k: int, threads: int, rounds: int) -> dict[int, dict[str, float]]:
    """batch -> head -> median ms of a cold run, the heads interleaved in every round."""
    sessions = {head: scan_session(folder / f"{head}.onnx", threads) for head in HEADS}
    clock = time.thread_time if threads == 1 else time.perf_counter
    result = {}
    for batch in (1, 16):
        feeds = {"ids": np.zeros((batch, 1), np.int64),
                 "x": np.random.default_rng(1).standard_normal((batch, 1, k)).astype(np.float32)}
        times: dict[str, list[float]] = {head: [] for head in HEADS}
        for _ in range(rounds):
            for head, s in sessions.items():
                for _ in range(3):
                    FLUSH.sum()
                    times[head].append(harness.timed(lambda: s.run(["logits"], feeds), clock))
        result[batch] = {head: float(harness.median(t)) * 1e3 for head, t in times.items()}
    return result


def head_scan_size_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="the graphs, kept and reused")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: CPU time)")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds of 3 cold runs per head")
    args = parser.parse_args()
    print("| head (K x N) | weights | batch 1: int8 / scan ms | scan / int8 | batch 16: int8 / scan ms | scan / int8 |")
    print("|---|---:|---|---:|---|---:|")
    for k, n in SIZES:
        build(args.work / f"{k}x{n}", k, n)
        r = measure(args.work / f"{k}x{n}", k, args.threads, args.rounds)
        cells = [f"{r[b]['int8']:.2f} / {r[b]['scan']:.2f} | {r[b]['scan'] / r[b]['int8']:.2f}" for b in (1, 16)]
        print(f"| {k} x {n} | {k * n / 1e6:.1f}M | {cells[0]} | {cells[1]} |", flush=True)

