"""Where a step's time goes, one scenario each (investigations, not regressions): `profile-decoder` (ONNX Runtime's
profile of one decoder step, by operator), `profile-beam` (a beam step split into decoder, head, row gather, host
merge), `cross-products` (the cross attention's two products in graphs of their own) and `gpu` (the CUDA rows:
`tfm-export bench --device cuda` and a step's profile there). The vocabulary head's scenarios are in
benchmarks/forms.py."""

from __future__ import annotations

import argparse
import collections
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from tfm_export.bench import harness
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
from tfm_export.runtime.decode import beam
from tfm_export.runtime.states import growing, reorder
from tfm_export.runtime.states import head as beam_head


PROFILE_DECODER_DOC = r"""Per-operator time of one decoder step of an export (ONNX Runtime's profiler), on CPU or
CUDA.

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


# Where an ORT beam-search step goes: decoder, device head, row gather, merge; head vs host path.
#
#     .venv/bin/python -m benchmarks profile-beam EXPORT_DIR [--batch 16] [--num-beams 4] [--new-tokens 32]
#         [--threads 2] [--repeat 3]
#
# Decodes random sources of 32 tokens (EOS banned until the last step, as `tfm-export bench`) with the
# candidates picked on the device (runtime.states.head) and, interleaved in the same process, on the host
# (the logits cross; what runtimes without the head do), and prints the median ms per step of each
# part ("host advance" includes its merge; the step includes the encoder's share). Figures in
# BENCHMARKS.md ("Beam search").
PARTS = {"decoder": (growing.GrowingState, "step"), "head": (beam_head.BeamHead, "__call__"),
         "gather": (reorder.RowGather, "__call__"), "host advance": (beam.BeamSearch, "advance_logits"),
         "merge": (beam.BeamSearch, "_select")}


def timers(spent: dict[str, float]) -> None:
    """Wrap each part so that its calls add their wall time to `spent`."""
    for name, (owner, attr) in PARTS.items():
        original = getattr(owner, attr)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            out = []
            spent[_name] += harness.timed(lambda: out.append(_original(*args, **kwargs)))
            return out[0]

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
            seconds = harness.timed(lambda: model.generate_ids(sources, args.new_tokens, stop_at_eos=False,
                                                               config=GREEDY.replace(num_beams=args.num_beams)))
            if i:
                runs[mode].append({"step": seconds, **spent})
    print(f"{args.export_dir}: batch {args.batch} x {args.num_beams} beams, {args.new_tokens} tokens, "
          f"{args.threads} threads; median ms per step")
    for mode, records in runs.items():
        parts = {k: 1e3 * harness.median([r.get(k, 0.0) for r in records]) / args.new_tokens
                 for k in ("step", *PARTS)}
        print(f"{mode:>12}: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items() if v))


CROSS_PRODUCTS_DOC = r"""The cross attention's two products alone in ONNX Runtime, in the forms a graph can write
them.

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
    parser = argparse.ArgumentParser(description=CROSS_PRODUCTS_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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


GPU_DOC = r"""The CUDA section of BENCHMARKS.md: `tfm-export bench --device cuda` on transformer-base and on an
opus-mt-sized Marian folder, batch 1 and 16, greedy and beam 4, with the CUDA-graph and float16 exports as
--also rows of the same run, then ORT's profile of one decoder step.

    python -m benchmarks gpu OUT_DIR [--repeat 5] [--models base,opus]

Needs a CUDA GPU, onnxruntime-gpu and the `export` extra; writes OUT_DIR/<model>-beam<N>.json and
OUT_DIR/profile-<model>-<variant>.txt. The exports go to a temporary folder, removed at the end.
"""

ROOT = Path(__file__).resolve().parents[1]

# the three exports of one model: the growing cache (IOBinding), the static decoder (CUDA graphs), float16
GPU_VARIANTS = {"f32": (), "graph": ("--cuda-graph", "--static-slots", "128"),
                "f16": ("--dtype", "float16", "--cuda-graph", "--static-slots", "128")}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfm_export", *args]


def gpu_main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=GPU_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the reports go (created)")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved repeats of each bench (default: 5)")
    parser.add_argument("--models", default="base,opus", help="base, opus or both (default: base,opus)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        work = Path(tmp)
        weights = {"base": work / "base.pt", "opus": work / "opus"}
        subprocess.run(_cli("init", str(weights["base"]), "--preset", "base", "--seed", "0"), check=True)
        subprocess.run([sys.executable, "-m", "benchmarks", "opus-mt-folder", str(weights["opus"])], check=True,
                       cwd=ROOT)
        for model in args.models.split(","):
            exports = {v: work / f"{model}-{v}" for v in GPU_VARIANTS}
            # validation runs on the CPU: the three exports side by side
            procs = [subprocess.Popen(_cli(str(weights[model]), "-o", str(out), "--no-validate", *GPU_VARIANTS[v]))
                     for v, out in exports.items()]
            if any(p.wait() for p in procs):
                raise SystemExit(f"an export of {model} failed")
            for beams in (1, 4):
                subprocess.run(_cli("bench", str(exports["f32"]), "--model", str(weights[model]), "--device", "cuda",
                                    "--batch", "1,16", "--src-len", "32", "--new-tokens", "64", "--num-beams",
                                    str(beams), "--repeat", str(args.repeat), "--also", str(exports["graph"]),
                                    "--also", str(exports["f16"]), "--json", str(args.out / f"{model}-beam{beams}.json")),
                               check=True)
            for variant in ("f32", "f16"):
                with open(args.out / f"profile-{model}-{variant}.txt", "w") as out:
                    subprocess.run([sys.executable, "-m", "benchmarks", "profile-decoder", str(exports[variant]),
                                    "--device", "cuda", "--steps", "200"], check=True, stdout=out, cwd=ROOT)
