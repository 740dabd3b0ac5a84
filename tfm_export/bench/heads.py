"""The vocabulary head alone, as `head-bits`, `head-scan-size`, `scan-recall` and `earlier-head` measure it
(benchmarks/forms.py): graphs of one head in each weight format and form (the exporter's own quantize_int4 where it
has that format), sessions of them, cold timings, and the scan's recall on random heads of NLLB's size."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ..export.int4 import Int4Settings, quantize_int4
from ..runtime import hugepages
from . import harness

CANDIDATES = (32, 256)  # the scan's candidates per state, as `scan-recall` tries them


@functools.cache
def flush() -> np.ndarray:
    """64 MB to read between cold runs (in a step the head comes after the layers' weights); made once, on use."""
    return np.ones((64 << 20) // 8)


def graphs(k: int, n: int, folder: Path) -> np.ndarray:
    """f32/int8/nb4/nb8.onnx in `folder` (float32, our int8, MatMulNBits 4 and 8 bits); the float32 weight."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

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


SCAN_SIZES = [(512, 15600), (512, 32000), (1024, 32000), (512, 64000), (1024, 64000), (1024, 128000)]
HEADS = ("int8", "scan")


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


def cold_ms(folder: Path, k: int, threads: int, rounds: int) -> dict[int, dict[str, float]]:
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
                    flush().sum()
                    times[head].append(harness.timed(lambda: s.run(["logits"], feeds), clock))
        result[batch] = {head: float(harness.median(t)) * 1e3 for head, t in times.items()}
    return result


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


def recall_state(rng: np.random.Generator, w: np.ndarray, spread: float, p_win: float) -> np.ndarray:
    """A hidden state whose logits (x @ w) are a Gaussian bulk of spread `spread` and one winner of probability
    `p_win`."""
    k, vocab = w.shape
    x = rng.standard_normal(k).astype(np.float32)
    x *= spread / (0.02 * np.linalg.norm(x))
    bulk = x @ w
    winner = int(rng.integers(vocab))
    bulk[winner] = -np.inf
    target = log_sum_exp(bulk) + np.log(p_win / (1 - p_win))  # the winner's logit for p_win
    column = w[:, winner]
    return x + (target - float(x @ column)) * column / float(column @ column)


def scan_recall(vocab: int, k: int, states: int) -> Iterator[dict[str, float]]:
    """Per (spread, p(winner), bits, candidates): the share of states whose float32 argmax is not among the scan's
    candidates, and the log-normaliser's error (median, worst) when those keep float32's values."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, vocab)) * 0.02).astype(np.float32)
    scans = {bits: rounded(w, bits) for bits in (2, 4)}
    for spread in (2.0, 3.0, 4.0, 5.0):
        for p_win in (0.3, 0.6, 0.9):
            xs = np.stack([recall_state(rng, w, spread, p_win) for _ in range(states)])
            exact = xs @ w
            for bits, scan_w in scans.items():
                scan = xs @ scan_w
                for candidates in CANDIDATES:
                    top = np.argpartition(-scan, candidates, axis=1)[:, :candidates]
                    missed = np.mean([exact[i].argmax() not in top[i] for i in range(len(xs))])
                    mixed = scan.copy()
                    np.put_along_axis(mixed, top, np.take_along_axis(exact, top, 1), 1)
                    errors = [abs(log_sum_exp(mixed[i]) - log_sum_exp(exact[i])) for i in range(len(xs))]
                    yield {"spread": spread, "p_win": p_win, "bits": bits, "candidates": candidates,
                           "missed": float(missed), "error_median": float(np.median(errors)),
                           "error_worst": float(max(errors))}


def earlier_forms(k: int, n: int) -> dict[str, onnx.ModelProto]:
    """form -> its graph (inputs hidden (b, t, k) float32)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, name) for name, a in (
        ("W", (rng.standard_normal((k, n)) * 0.1).astype(np.float32)),
        ("bias", rng.standard_normal(n).astype(np.float32)),
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


def earlier_sessions(k: int, n: int, threads: int) -> dict[str, ort.InferenceSession]:
    """form -> a session of its graph, every form checked to give the unguarded form's outputs on a speculative
    step (5 positions: the same logits)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = threads, 3
    sessions = {form: ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for form, model in earlier_forms(k, n).items()}
    check = {"h": np.random.default_rng(2).standard_normal((2, 5, k)).astype(np.float32)}
    want = sessions["unguarded"].run(None, check)
    for form, session in sessions.items():
        got = session.run(None, check)
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(got, want)), form
    return sessions
