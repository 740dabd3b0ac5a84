r"""Engine-only throughput: the server's decode engines without HTTP, every job queued at once.

    python -m benchmarks engine EXPORT --jobs 320 --max-batch 16 --new-tokens 4:64 --max-src-len 64         --threads 2 --repeat 2 [--decoding default] [--device cuda]

The same workload as `benchmarks load` (load.workload: its sources and budgets), submitted in one go to a
request-level and an in-flight engine (serve.batcher), modes taking turns; prints tokens/s per run
and the paired in-flight / request-level ratios. What `load` measures minus the HTTP server and
the load client (which share the machine's cores with the engine there).
"""
from __future__ import annotations

from pathlib import Path
import argparse
import json
import threading

from tfm_export.bench import harness
from tfm_export.runtime.options.generation import GREEDY
from tfm_export.serve.batcher import EngineConfig, Job
from tfm_export.serve.engine import ServeSettings, open_engine
from benchmarks.serving.workload import workload


def run(folder: Path, mode: str, work: list[tuple[list[int], int]], args: argparse.Namespace) -> dict:
    """Queue every job at once; wall time until the last one is answered."""
    engine = open_engine(ServeSettings(str(folder), device=args.device, batching=mode, threads=args.threads,
                                       engine=EngineConfig(max_batch=args.max_batch, max_queue=len(work),
                                                           max_src_len=args.max_src_len)))
    answered, tokens = threading.Semaphore(0), [0]

    def emit(kind: str, value: object) -> None:
        if kind == "token":
            tokens[0] += 1
        else:  # done or error: each job ends with exactly one
            answered.release()

    # greedy, or the export's own default (a published Marian folder's: beam 4)
    config = GREEDY if args.decoding == "greedy" else engine.model.generation_config()
    engine.start()

    def answer_all() -> None:
        engine.submit([Job(ids, steps, emit, config) for ids, steps in work])
        for _ in work:
            answered.acquire()

    wall = harness.timed(answer_all)
    engine.close()
    return {"mode": mode, "jobs": len(work), "tokens": tokens[0], "seconds": wall, "tokens_per_s": tokens[0] / wall}


def engine_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="an export made with --cuda-graph or --static-slots")
    parser.add_argument("--modes", default="request,inflight", help="comma-separated: request,inflight")
    parser.add_argument("--jobs", type=int, default=320, help="jobs queued at once")
    parser.add_argument("--max-batch", type=int, default=16, help="rows decoded together")
    parser.add_argument("--new-tokens", default="4:64", help="max_new_tokens per job: N or LOW:HIGH (uniform)")
    parser.add_argument("--max-src-len", type=int, default=None, help="the engines' longest source")
    parser.add_argument("--threads", type=int, default=None, help="ORT intra-op threads")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode, modes taking turns")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decoding", choices=["greedy", "default"], default="greedy",
                        help="greedy, or the export's default decoding (generation_config: beam 4 for OPUS-MT)")
    args = parser.parse_args()
    pool = workload(args.folder, args.new_tokens, args.seed, args.max_src_len)
    work = [pool[n % len(pool)] for n in range(args.jobs)]  # as `load`'s requests cycle through it
    rows = []
    for repeat, order in enumerate(harness.rotation(args.modes.split(","), args.repeat)):
        for mode in order:
            rows.append({"repeat": repeat, **run(args.folder, mode, work, args)})
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    pairs = [i["tokens_per_s"] / r["tokens_per_s"] for i in rows if i["mode"] == "inflight"
             for r in rows if r["mode"] == "request" and r["repeat"] == i["repeat"]]
    if pairs:
        print(f"in-flight / request: {harness.median(pairs):.2f}x ({', '.join(f'{p:.2f}' for p in pairs)})")

