"""Two checkouts of tfm-export on one export, interleaved: did a code change make decoding slower?

    python benchmarks/code_ab.py EXPORT BEFORE_CHECKOUT AFTER_CHECKOUT [--rounds 3] [--threads 2]

Each round runs every case once per checkout, in alternating order, each in a fresh process whose
PYTHONPATH is that checkout (its `tfm_export` and its `benchmarks/engine.py`), so the two share the
machine's state as closely as these shared cores allow. Cases: ms per token of `generate_ids` with
EOS ignored (greedy at batch 1 and 16, beam 4 at batch 16; 32 source and 32 new tokens), and the
in-flight engine's tokens/s (benchmarks/engine.py, greedy and the export's default decoding). Prints
each run and the median per case and checkout; `--json` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DIRECT = """
import json, random, sys, time
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
folder, threads, batch, beams = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = open_export(folder, "cpu", RuntimeOptions(intra_op_threads=threads, cuda_graph=False, spin_wait=False))
rng = random.Random(0)
sources = [[rng.randrange(4, model.config.src_vocab_size) for _ in range(32)] for _ in range(batch)]
config = GREEDY.replace(num_beams=beams)
model.generate_ids(sources, 32, stop_at_eos=False, config=config)  # warm-up
times = []
for _ in range(3):
    start = time.perf_counter()
    model.generate_ids(sources, 32, stop_at_eos=False, config=config)
    times.append(time.perf_counter() - start)
print(json.dumps({"ms_per_token": 1e3 * min(times) / 32}))
"""

CASES = {"greedy, batch 1": ("direct", 1, 1), "greedy, batch 16": ("direct", 16, 1),
         "beam 4, batch 16": ("direct", 16, 4), "in flight, greedy": ("engine", "greedy", 0),
         "in flight, default decoding": ("engine", "default", 0)}


def run_case(checkout: Path, export: str, case: tuple, threads: int) -> float:
    """One case in a fresh process of `checkout`: ms per token (direct) or tokens/s (engine)."""
    env = {**os.environ, "PYTHONPATH": f"{checkout}:{checkout / 'benchmarks'}"}
    if case[0] == "direct":
        out = subprocess.run([sys.executable, "-c", DIRECT, export, str(threads), str(case[1]), str(case[2])],
                             env=env, check=True, capture_output=True, text=True, cwd=checkout).stdout
        return json.loads(out.strip().splitlines()[-1])["ms_per_token"]
    out = subprocess.run([sys.executable, str(checkout / "benchmarks" / "engine.py"), export, "--modes", "inflight",
                          "--decoding", case[1], "--jobs", "96", "--max-batch", "16", "--new-tokens", "4:48",
                          "--max-src-len", "48", "--threads", str(threads), "--repeat", "1"],
                         env=env, check=True, capture_output=True, text=True, cwd=checkout).stdout
    return float(next(json.loads(line) for line in out.splitlines() if line.startswith("{"))["tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export")
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cases", default="", help="only the cases whose name contains this")
    args = parser.parse_args()
    export = str(Path(args.export).resolve())
    cases = {case: spec for case, spec in CASES.items() if args.cases in case}
    results: dict[str, dict[str, list[float]]] = {case: {"before": [], "after": []} for case in cases}
    for n in range(args.rounds):
        order = ("before", "after") if n % 2 == 0 else ("after", "before")
        for case, spec in cases.items():
            for side in order:
                value = run_case(getattr(args, side).resolve(), export, spec, args.threads)
                results[case][side].append(value)
                print(f"round {n + 1}: {case:<28} {side:<6} {value:8.2f}", flush=True)
    print("\nmedians (direct: ms per token, lower is better; in flight: tokens/s, higher is better)")
    for case, sides in results.items():
        before, after = statistics.median(sides["before"]), statistics.median(sides["after"])
        print(f"{case:<28} before {before:8.2f}  after {after:8.2f}  after/before {after / before:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
