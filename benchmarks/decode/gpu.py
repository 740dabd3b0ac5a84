r"""The CUDA section of BENCHMARKS.md: `tfm-export bench --device cuda` on transformer-base and on an
opus-mt-sized Marian folder, batch 1 and 16, greedy and beam 4, with the CUDA-graph and float16 exports as
--also rows of the same run, then ORT's profile of one decoder step.

    python -m benchmarks gpu OUT_DIR [--repeat 5] [--models base,opus]

Needs a CUDA GPU, onnxruntime-gpu and the `export` extra; writes OUT_DIR/<model>-beam<N>.json and
OUT_DIR/profile-<model>-<variant>.txt. The exports go to a temporary folder, removed at the end.
"""


from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the three exports of one model: the growing cache (IOBinding), the static decoder (CUDA graphs), float16
GPU_VARIANTS = {"f32": (), "graph": ("--cuda-graph", "--static-slots", "128"),
                "f16": ("--dtype", "float16", "--cuda-graph", "--static-slots", "128")}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfm_export", *args]


def gpu_main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__,
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
