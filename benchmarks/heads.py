"""The vocabulary head alone, one scenario each: `head-bits` (a head at 8, 4 and 2 bits), `head-scan-size` (the
scanned int4 head against the int8 head, by size) and `scan-recall` (how often the scan misses float32's token)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

from tfm_export.bench import harness
from tfm_export.export.int4 import Int4Settings, quantize_int4
from tfm_export.runtime import hugepages


HEAD_BITS_DOC = r"""The vocabulary head at batch 1 by weight format: float32, our int8 (DynamicQuantizeLinear +
MatMulInteger), MatMulNBits 4-bit and 8-bit (block 32, accuracy level 4). One MatMul of K x N random weights; the
largest error against float32 and ms per run (median and best of --rounds interleaved rounds of 5 runs).

    .venv/bin/python -m benchmarks head-bits [--k 1024] [--n 65536] [--threads 2] [--rounds 30]
"""


def graphs(k: int, n: int, folder: Path) -> np.ndarray:
    """f32/int8/nb4/nb8.onnx in `folder`; the float32 weight."""
    w = (np.random.default_rng(0).standard_normal((k, n)) * 0.02).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", k])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(folder / "f32.onnx"), save_as_external_data=True, location="f32.data")
    quantize_int4(folder / "f32.onnx", folder / "int8.onnx", True, Int4Settings())  # the head stays int8
    quantize_int4(folder / "f32.onnx", folder / "nb4.onnx", True, Int4Settings(head="int4"))
    config = DefaultWeightOnlyQuantConfig(block_size=32, bits=8, accuracy_level=4)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(folder / "f32.onnx")), algo_config=config)
    quantizer.process()
    onnx.save(quantizer.model.model, str(folder / "nb8.onnx"), save_as_external_data=True, location="nb8.data")
    return w


def head_bits_main() -> None:
    parser = argparse.ArgumentParser(description=HEAD_BITS_DOC.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=1024, help="input width (default: 1024, NLLB-600M's)")
    parser.add_argument("--n", type=int, default=65536, help="vocabulary (default: 65536, a quarter of NLLB's)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default: 2)")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default: 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        w = graphs(args.k, args.n, Path(tmp))
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        sessions = {name: ort.InferenceSession(str(Path(tmp) / f"{name}.onnx"), options,
                                               providers=["CPUExecutionProvider"])
                    for name in ("f32", "int8", "nb4", "nb8")}
        x = np.random.default_rng(1).standard_normal((1, args.k)).astype(np.float32)
        sides = {name: (lambda session=session: harness.timed(lambda: [session.run(None, {"x": x})
                                                                       for _ in range(5)]) / 5)
                 for name, session in sessions.items()}
        times = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=0))
        for name, session in sessions.items():
            error = np.abs(session.run(None, {"x": x})[0] - x @ w).max()
            print(f"{name:5s} {1e3 * harness.median(times[name]):7.3f} ms  best {1e3 * min(times[name]):7.3f}  "
                  f"largest error {error:.3g}")


HEAD_SCAN_SIZE_DOC = r"""The vocabulary head alone by size: int8 (`--int4-head int8`) against the 4-bit scan
(`scan`), batch 1 and 16.

    .venv/bin/python -m benchmarks head-scan-size --work DIR [--threads 1] [--rounds 12]

For each (K, N) a graph of a tied head (an embedding Gather and the MatMul of its transpose, as the exporter stores
a tied head) goes through `quantize_int4` with either head, so the graphs are the exporter's own; each run is
timed with the head cold (64 MB read between runs: in a step the head comes after the layers' weights), on huge
pages as the runtime opens sessions. 1 thread times CPU time (`time.thread_time`, robust to the shared VM's other
load); more threads time wall clock. What `--int4-head auto`'s threshold (export.int4.SCAN_MIN_WEIGHTS) rests on.
"""


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
    parser = argparse.ArgumentParser(description=HEAD_SCAN_SIZE_DOC.split("\n\n")[0])
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


SCAN_RECALL_DOC = r"""How often the scanned head (export.head_scan) misses the token float32 would pick, on a
vocabulary of NLLB's size: a random head (K x V) rounded as MatMulNBits rounds it (asymmetric blocks of 128 along K,
at 2 and 4 bits) and hidden states whose winning token has a chosen probability over a Gaussian bulk of logits with
a chosen spread (the trained fixtures' vocabularies, under 600 tokens, are too small to show this). Per setting: the
share of states whose float32 argmax is not among the scan's CANDIDATES best (then the head picks another token),
and the error of the log-normaliser (beam search's log-softmax) when the rest keep the scan's values.

    .venv/bin/python -m benchmarks scan-recall [--vocab 256206] [--k 1024] [--states 200]
"""


def rounded(w: np.ndarray, bits: int, block: int = 128) -> np.ndarray:
    """`w` (K, V) after MatMulNBits' asymmetric round to nearest (ORT's qbits_block_quant, min/max per block)."""
    k, v = w.shape
    levels = 2 ** bits - 1
    blocks = w.reshape(k // block, block, v)
    low, high = np.minimum(blocks.min(1, keepdims=True), 0), np.maximum(blocks.max(1, keepdims=True), 0)
    scale = (high - low) / levels
    zero = np.clip(np.rint(-low / scale), 0, levels)
    return ((np.clip(np.rint(blocks / scale) + zero, 0, levels) - zero) * scale).reshape(k, v)


def log_sum_exp(a: np.ndarray) -> float:
    top = float(a.max())
    return top + float(np.log(np.exp(a.astype(np.float64) - top).sum()))


def scan_recall_main() -> None:
    parser = argparse.ArgumentParser(description=SCAN_RECALL_DOC.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=256206, help="vocabulary (default: NLLB's 256,206)")
    parser.add_argument("--k", type=int, default=1024, help="hidden size (default: NLLB-600M's 1024)")
    parser.add_argument("--states", type=int, default=200, help="hidden states per setting (default: 200)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((args.k, args.vocab)) * 0.02).astype(np.float32)
    scans = {bits: rounded(w, bits) for bits in (2, 4)}
    print("| logit spread s | p(winner) | bits | candidates | missed | log-normaliser error, median / worst |")
    print("|---:|---:|---:|---:|---:|---|")
    for spread in (2.0, 3.0, 4.0, 5.0):
        for p_win in (0.3, 0.6, 0.9):
            states = []
            for _ in range(args.states):
                x = rng.standard_normal(args.k).astype(np.float32)
                x *= spread / (0.02 * np.linalg.norm(x))
                bulk = x @ w
                winner = int(rng.integers(args.vocab))
                bulk[winner] = -np.inf
                target = log_sum_exp(bulk) + np.log(p_win / (1 - p_win))  # the winner's logit for p_win
                column = w[:, winner]
                x = x + (target - float(x @ column)) * column / float(column @ column)
                states.append(x)
            xs = np.stack(states)
            exact = xs @ w
            for bits, scan_w in scans.items():
                scan = xs @ scan_w
                for candidates in (32, 256):
                    top = np.argpartition(-scan, candidates, axis=1)[:, :candidates]
                    missed = np.mean([exact[i].argmax() not in top[i] for i in range(len(xs))])
                    mixed = scan.copy()
                    np.put_along_axis(mixed, top, np.take_along_axis(exact, top, 1), 1)
                    errors = [abs(log_sum_exp(mixed[i]) - log_sum_exp(exact[i])) for i in range(len(xs))]
                    print(f"| {spread:g} | {p_win:g} | {bits} | {candidates} | {100 * missed:.1f} % | "
                          f"{np.median(errors):.3f} / {max(errors):.3f} |", flush=True)


EARLIER_HEAD_DOC = r"""What a plain one-id step pays for decoder.onnx's earlier_logits (export.earlier_head), the head's tail
alone: hidden (batch, tgt_len, K) -> logits, next_ids and earlier_logits, K x N random weights, one graph per
form of the earlier positions' head. Medians over --rounds interleaved rounds of 50 runs each, and of each round's
difference to "none": what the form adds to every plain step.

    .venv/bin/python -m benchmarks earlier-head [--k 128] [--n 24] [--threads 1] [--rounds 300]

if (today's): If(Size(rows) > 0, then: head(rows), else: Reshape(rows, [0, 0, N])), rows = Slice(hidden, :-1);
none: no earlier_logits (the decoder before #63); unguarded: head(rows) over zero rows (ORT 1.30's TopK, the
scan's, dies there); if, no kernel in else: If(tgt_len > 1) with the Slice in the then branch and a Constant else,
whose (0, 0, N) loses the batch dim; all positions: one head over every position, logits its last (a Gather: a copy
of batch x N), earlier_logits a Slice.
"""


def _earlier_forms(k: int, n: int) -> dict[str, onnx.ModelProto]:
    """form -> its graph (inputs hidden (b, t, k) float32)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, name) for name, a in (
        ("W", (rng.standard_normal((k, n)) * 0.1).astype(np.float32)), ("bias", rng.standard_normal(n).astype(np.float32)),
        ("last", np.array(-1, np.int64)), ("zero", np.array([0], np.int64)), ("minus1", np.array([-1], np.int64)),
        ("one", np.array([1], np.int64)), ("no", np.array(0, np.int64)), ("flat", np.array([0, 0, n], np.int64)))]
    node, info = helper.make_node, helper.make_tensor_value_info
    rows = node("Slice", ["h", "zero", "minus1", "one"], ["rows"])

    def head(x: str, out: str) -> list:
        return [node("MatMul", [x, "W"], [f"{out}_mm"]), node("Add", [f"{out}_mm", "bias"], [out])]

    def branch(nodes: list, out: str) -> onnx.GraphProto:
        return helper.make_graph(nodes, out, [], [info(out, TensorProto.FLOAT, None)])

    empty = node("Constant", [], ["none"], value=numpy_helper.from_array(np.zeros((0, 0, n), np.float32)))
    last = [node("Gather", ["h", "last"], ["x"], axis=1), *head("x", "logits")]
    forms = {
        "if (today's)": [*last, rows, node("Size", ["rows"], ["size"]), node("Greater", ["size", "no"], ["cond"]),
                         node("If", ["cond"], ["earlier_logits"], then_branch=branch(head("rows", "t"), "t"),
                              else_branch=branch([node("Reshape", ["rows", "flat"], ["none"])], "none"))],
        "none": last,
        "unguarded": [*last, rows, *head("rows", "earlier_logits")],
        "if, no kernel in else": [
            *last, node("Shape", ["h"], ["len"], start=1, end=2), node("Greater", ["len", "one"], ["cond"]),
            node("If", ["cond"], ["earlier_logits"], then_branch=branch([rows, *head("rows", "t")], "t"),
                 else_branch=branch([empty], "none"))],
        "all positions": [*head("h", "all"), node("Gather", ["all", "last"], ["logits"], axis=1),
                          node("Slice", ["all", "zero", "minus1", "one"], ["earlier_logits"])]}
    models = {}
    for form, nodes in forms.items():
        outputs = [info("logits", TensorProto.FLOAT, ["b", n]), info("next_ids", TensorProto.INT64, ["b"])]
        outputs += [] if form == "none" else [info("earlier_logits", TensorProto.FLOAT, ["b", "t1", n])]
        nodes = [*nodes, node("ArgMax", ["logits"], ["next_ids"], axis=-1, keepdims=0)]
        graph = helper.make_graph(nodes, form, [info("h", TensorProto.FLOAT, ["b", "t", k])], outputs, inits)
        models[form] = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return models


def earlier_head_main() -> None:
    parser = argparse.ArgumentParser(description=EARLIER_HEAD_DOC.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=128, help="hidden width (default: 128, the bundled model's)")
    parser.add_argument("--n", type=int, default=24, help="vocabulary (default: 24, the bundled model's)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: 1)")
    parser.add_argument("--batch", default="1,32", help="plain steps' rows, comma-separated (default: 1,32)")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved rounds (default: 300)")
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = args.threads, 3
    sessions = {form: ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for form, model in _earlier_forms(args.k, args.n).items()}
    rng = np.random.default_rng(1)
    check = {"h": rng.standard_normal((2, 5, args.k)).astype(np.float32)}  # a speculative step: the same logits
    want = sessions["unguarded"].run(None, check)
    for form, session in sessions.items():
        got = session.run(None, check)
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(got, want)), form
    for batch in map(int, args.batch.split(",")):
        feeds = {"h": rng.standard_normal((batch, 1, args.k)).astype(np.float32)}
        sides = {form: (lambda s=session: harness.timed(lambda: [s.run(None, feeds) for _ in range(50)]) / 50)
                 for form, session in sessions.items()}
        times = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=3))
        for form in sessions:  # round by round: both runs of a round shared the machine's state
            extra = harness.median([a - b for a, b in zip(times[form], times["none"])])
            print(f"batch {batch:3d}  {form:22s} {1e6 * harness.median(times[form]):7.2f} µs a run, "
                  f"{1e6 * extra:+5.2f} µs over none")
