"""Where a step's time goes: ORT profiles of a decoder step and a beam step, the cross attention's products, a vocabulary head at 8, 4 and 2 bits, the scanned head by size and how often it misses."""

from __future__ import annotations

from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from pathlib import Path
import argparse
import collections
import json
import numpy as np
import onnx
import onnxruntime as ort
import random
import tempfile
import time

from tfm_export.bench import harness
from tfm_export.export.int4 import Int4Settings, quantize_int4
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
from tfm_export.runtime.decode import beam
from tfm_export.runtime.states import growing, reorder
from tfm_export.runtime.states import head as beam_head
from tfm_export.runtime import hugepages


# --- profile_decoder ------------------------------------------------------------------------------

PROFILE_DECODER_DOC = r"""Per-operator time of one decoder step of an export (ONNX Runtime's profiler), on CPU or CUDA.

    .venv/bin/python -m benchmarks profile-decoder EXPORT_DIR [--past 32] [--steps 200] [--threads 2]
        [--device cpu|cuda]

Runs the decoder with a past of `--past` positions and batch 1, then prints each operator type's
share of the kernel time. On CUDA the profiler's node times are the host's side of each kernel
(launch and dispatch; the kernels run asynchronously), so they say how much of a step is launch
overhead, which CUDA graphs remove; the wall time per step is printed beside them. Figures in
BENCHMARKS.md ("where the CPU time goes", "GPU").
"""

def session(path: Path, threads: int, profile: bool, device: str = "cpu") -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = profile
    options.profile_file_prefix = str(Path(tempfile.gettempdir()) / "tfm_decoder_profile")  # not the cwd
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), options, providers=providers)


def decoder_feeds(folder: Path, past: int, threads: int) -> dict[str, np.ndarray]:
    """Encoder outputs for a random source of 32 tokens, a zero past of `past` positions, one token."""
    manifest = json.loads((folder / "manifest.json").read_text())
    cfg = manifest["config"]
    encoder = session(folder / "encoder.onnx", threads, False)
    src = np.random.default_rng(0).integers(4, cfg["src_vocab_size"], (1, 32)).astype(np.int64)  # (batch, src_len)
    feeds = dict(zip([o.name for o in encoder.get_outputs()], encoder.run(None, {"src_ids": src})))
    heads, head_dim = cfg["n_heads"], cfg["d_model"] // cfg["n_heads"]
    dtype = np.float16 if manifest["variant"].get("dtype") == "float16" else np.float32
    for i in range(cfg["n_decoder_layers"]):
        for kind in ("key", "value"):
            feeds[f"past.{i}.self.{kind}"] = np.zeros((1, heads, past, head_dim), dtype)  # (batch, heads, past_len, head_dim)
    feeds["input_ids"] = np.array([[cfg["bos_id"]]], np.int64)  # (batch, tgt_len)
    return feeds


def profile_decoder_main() -> None:
    parser = argparse.ArgumentParser(description=PROFILE_DECODER_DOC.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an export folder")
    parser.add_argument("--past", type=int, default=32, help="past_len of the profiled steps")
    parser.add_argument("--steps", type=int, default=200, help="profiled decoder runs")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the decoder runs")
    args = parser.parse_args()
    feeds = decoder_feeds(args.folder, args.past, args.threads)
    plain = session(args.folder / "decoder.onnx", args.threads, False, args.device)
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in plain.get_inputs()}}
    for _ in range(10):
        plain.run(None, feeds)  # warm-up (CUDA: kernels loaded, allocations made)
    # run() returns host arrays: each step waits for its kernels
    seconds = harness.timed(lambda: [plain.run(None, feeds) for _ in range(args.steps)])
    print(f"wall time per step, unprofiled: {seconds / args.steps * 1000:.3f} ms "
          f"(inputs copied in and outputs out each step)")
    decoder = session(args.folder / "decoder.onnx", args.threads, True, args.device)
    for _ in range(args.steps):
        decoder.run(None, feeds)
    trace = Path(decoder.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    by_op: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    total = sum(by_op.values())
    for op, micros in by_op.most_common(12):
        print(f"{op:28s} {100 * micros / total:5.1f} %  {micros / args.steps / 1000:.3f} ms/step")
    print(f"kernel time per step: {total / args.steps / 1000:.3f} ms (profiling adds overhead)")


# --- profile_beam ---------------------------------------------------------------------------------

PROFILE_BEAM_DOC = r"""Where an ORT beam-search step goes: decoder, device head, row gather, merge; head vs host path.

    .venv/bin/python -m benchmarks profile-beam EXPORT_DIR [--batch 16] [--num-beams 4] [--new-tokens 32]
        [--threads 2] [--repeat 3]

Decodes random sources of 32 tokens (EOS banned until the last step, as `tfm-export bench`) with the
candidates picked on the device (runtime.states.head) and, interleaved in the same process, on the host
(the logits cross; what runtimes without the head do), and prints the median ms per step of each
part ("host advance" includes its merge; the step includes the encoder's share). Figures in
BENCHMARKS.md ("Beam search").
"""

PARTS = {"decoder": (growing.GrowingState, "step"), "head": (beam_head.BeamHead, "__call__"),
         "gather": (reorder.RowGather, "__call__"), "host advance": (beam.BeamSearch, "advance_logits"),
         "merge": (beam.BeamSearch, "_select")}


def timers(spent: dict[str, float]) -> None:
    """Wrap each part so that its calls add their wall time to `spent`."""
    for name, (owner, attr) in PARTS.items():
        original = getattr(owner, attr)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - start

        setattr(owner, attr, wrapped)


def profile_beam_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dir")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model = open_export(args.export_dir, "cpu", RuntimeOptions(intra_op_threads=args.threads, cuda_graph=False),
                        verify=False)
    rng = random.Random(0)
    sources = [[rng.randrange(4, model.config.src_vocab_size) for _ in range(32)] for _ in range(args.batch)]
    spent: dict[str, float] = collections.defaultdict(float)
    timers(spent)
    runs: dict[str, list[dict[str, float]]] = {"device head": [], "host": []}
    for i in range(args.repeat + 1):  # the first round warms up
        for mode in runs:
            # Without the device head the strategy takes the logits to the host (runtime.decode.beam.BeamSearch.advance).
            growing.GrowingState.device_top = mode == "device head"
            spent.clear()
            start = time.perf_counter()
            model.generate_ids(sources, args.new_tokens, stop_at_eos=False, config=GREEDY.replace(num_beams=args.num_beams))
            if i:
                runs[mode].append({"step": time.perf_counter() - start, **spent})
    print(f"{args.export_dir}: batch {args.batch} x {args.num_beams} beams, {args.new_tokens} tokens, "
          f"{args.threads} threads; median ms per step")
    for mode, records in runs.items():
        parts = {k: 1e3 * harness.median([r.get(k, 0.0) for r in records]) / args.new_tokens
                 for k in ("step", *PARTS)}
        print(f"{mode:>12}: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items() if v))


# --- cross_products -------------------------------------------------------------------------------

CROSS_PRODUCTS_DOC = r"""The cross attention's two products alone in ONNX Runtime, in the forms a graph can write them.

    .venv/bin/python -m benchmarks cross-products [--sources 16] [--group 4] [--src-len 512] [--layers 12]

One graph per form over `--layers` distinct key/value tensors (sources, heads 12, src_len, head_dim 64),
so that they stream from memory as in a decoder step (one tensor would stay in the cache): the scores
as `Q K^T` (FusedMatMul transB, ORT's form of the exported graph) and as `K Q^T`, the weights times the
values as `W V` and as `(V^T W^T)`, and a ReduceSum that only reads the tensors (the memory floor). Sessions on 2
threads without spinning, interleaved, median of the repeats (BENCHMARKS.md, "Model families").
"""

HEADS, HEAD_DIM = 12, 64


def cross_session(nodes: list, inputs: dict[str, list[int]], outputs: list[str]) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "products",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("cross_session.intra_op.allow_spinning", "0")
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
    parser = argparse.ArgumentParser(description=CROSS_PRODUCTS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
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


# --- head_bits ------------------------------------------------------------------------------------

HEAD_BITS_DOC = r"""The vocabulary head at batch 1 by weight format: float32, our int8 (DynamicQuantizeLinear + MatMulInteger),
MatMulNBits 4-bit and 8-bit (block 32, accuracy level 4). One MatMul of K x N random weights; the largest error
against float32 and ms per run (median and best of --rounds interleaved rounds of 5 runs).

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
    parser = argparse.ArgumentParser(description=HEAD_BITS_DOC.split("\n")[0])
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
            print(f"{name:5s} {1e3 * np.median(times[name]):7.3f} ms  best {1e3 * min(times[name]):7.3f}  "
                  f"largest error {error:.3g}")


# --- head_scan_size -------------------------------------------------------------------------------

HEAD_SCAN_SIZE_DOC = r"""The vocabulary head alone by size: int8 (`--int4-head int8`) against the 4-bit scan (`scan`), batch 1 and 16.

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
                    start = clock()
                    s.run(["logits"], feeds)
                    times[head].append(clock() - start)
        result[batch] = {head: float(np.median(t)) * 1e3 for head, t in times.items()}
    return result


def head_scan_size_main() -> None:
    parser = argparse.ArgumentParser(description=HEAD_SCAN_SIZE_DOC.splitlines()[0])
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


# --- scan_recall ----------------------------------------------------------------------------------

SCAN_RECALL_DOC = r"""How often the scanned head (export.head_scan) misses the token float32 would pick, on a vocabulary of NLLB's
size: a random head (K x V) rounded as MatMulNBits rounds it (asymmetric blocks of 128 along K, at 2 and 4 bits)
and hidden states whose winning token has a chosen probability over a Gaussian bulk of logits with a chosen
spread (the trained fixtures' vocabularies, under 600 tokens, are too small to show this). Per setting: the
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
    parser = argparse.ArgumentParser(description=SCAN_RECALL_DOC.split("\n")[0])
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
