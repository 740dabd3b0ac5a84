r"""The vocabulary head at batch 1 by weight format: float32, our int8 (DynamicQuantizeLinear + MatMulInteger),
MatMulNBits 4-bit and 8-bit (block 32, accuracy level 4). One MatMul of K x N random weights; the largest error
against float32 and ms per run (median and best of --rounds interleaved rounds of 5 runs).

    .venv/bin/python -m benchmarks head-bits [--k 1024] [--n 65536] [--threads 2] [--rounds 30]
"""
from __future__ import annotations

from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from pathlib import Path
import argparse
import numpy as np
import onnx
import onnxruntime as ort
import tempfile

from tfm_export.bench import harness
from tfm_export.export.int4 import Int4Settings, quantize_int4


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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

