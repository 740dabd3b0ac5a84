r"""Per-operator time of one decoder step of an export (ONNX Runtime's profiler), on CPU or CUDA.

    .venv/bin/python -m benchmarks profile-decoder EXPORT_DIR [--past 32] [--steps 200] [--threads 2]
        [--device cpu|cuda]

Runs the decoder with a past of `--past` positions and batch 1, then prints each operator type's
share of the kernel time. On CUDA the profiler's node times are the host's side of each kernel
(launch and dispatch; the kernels run asynchronously), so they say how much of a step is launch
overhead, which CUDA graphs remove; the wall time per step is printed beside them. Figures in
BENCHMARKS.md ("where the CPU time goes", "GPU").
"""
from __future__ import annotations

from pathlib import Path
import argparse
import collections
import json
import numpy as np
import onnxruntime as ort
import tempfile

from tfm_export.bench import harness


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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

