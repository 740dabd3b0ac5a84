"""Serving under load, one scenario each: `load` (open-loop Poisson load on `tfm-export serve`, the batching modes
taking turns), `engine` (the serving engines without HTTP: request-level vs in-flight on one workload) and
`ct2-batch` (CTranslate2's static batches on the same workload: the serving peer). The workload, the server, the
load client, the engines' run and `load`'s outputs are tfm_export.bench.serving's."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tfm_export.bench import harness
from tfm_export.bench.ct2_decode import converted, id_tokens
from tfm_export.bench.harness import machine_info
from tfm_export.bench.serving import (
    CT2_OURS, LOAD_OURS, TOOL, engine_run, is_report, plot, refuse_outputs, run_rate, start_server, workload)
from tfm_export.files import write_file_atomically
from tfm_export.manifest import load_manifest


LOAD_DOC = r"""Open-loop load test of `tfm-export serve`: one request at a time vs request-level vs in-flight batching.

One server per batching mode is started on a free loopback port (subprocesses, so client and
servers do not share a GIL), all before the first measurement. At each arrival rate the modes take
turns (--repeat times): requests arrive as a Poisson process (open loop: arrivals never wait for
answers), bounded by --duration seconds and --max-requests. Each request streams, so time to first
token is measured as well as latency. Requests send ids and max_new_tokens only, no decoding options,
so the server decodes with the export's default (greedy, or the folder's generation_config.json: beam 4
for an OPUS-MT folder). Prints one row per (mode, rate, repeat): throughput (generated tokens/s, and
source tokens/s: the source lengths of the answered requests over the same span), p50/p99 latency,
p50/p99 time to first token, refused (429) requests; then, per rate, in-flight's throughput over the
other modes', paired by repeat.

    python -m benchmarks load EXPORT_FOLDER --rates 5,20,50 --duration 10

The modes single and request work on any export; inflight needs decoder_static.onnx
(`tfm-export MODEL -o EXPORT_FOLDER --static-slots N`, or `--cuda-graph`).
"""


ROOT = Path(__file__).resolve().parents[1]

MODES = ("single", "request", "inflight")


def load_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=LOAD_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="an export made with --cuda-graph")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: single,request,inflight")
    parser.add_argument("--rates", default="5,20,50", help="arrival rates (requests/s), comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals per rate")
    parser.add_argument("--max-requests", type=int, default=800, help="most requests per rate")
    parser.add_argument("--new-tokens", default="32",
                        help="max_new_tokens of each request: N, or LOW:HIGH drawn uniformly per request (varied "
                             "lengths, as real traffic has: request-level batching waits for its longest row)")
    parser.add_argument("--max-batch", type=int, default=8, help="rows decoded together (request, inflight)")
    parser.add_argument("--max-src-len", type=int, default=None, help="the servers' longest source (sources are drawn "
                        "shorter than half of it, or of max_len)")
    parser.add_argument("--max-queue", type=int, default=256, help="the servers' queue bound")
    parser.add_argument("--window-ms", type=float, default=10.0, help="request-level batching's collect window")
    parser.add_argument("--threads", type=int, default=None, help="ORT intra-op threads of the server")
    parser.add_argument("--repeat", type=int, default=1, help="measure each (rate, mode) this many times, "
                        "modes taking turns; the ratios printed at the end are medians over the repeats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--plot", type=Path, default=None, help="p50/p99 latency vs offered load, a PNG (matplotlib)")
    return parser


def measure_rates(servers: dict[str, tuple[subprocess.Popen, str]], pool: list[tuple[list[int], int]],
                  args: argparse.Namespace) -> list[dict]:
    """Every rate, the modes taking turns (A, B / B, A over the repeats: the harness's rotation), so a drift of
    this shared machine's speed shows in every mode alike rather than in whichever mode ran last."""
    rows = []
    for rate in [float(r) for r in args.rates.split(",")]:
        for repeat, order in enumerate(harness.rotation(list(servers), args.repeat)):
            for mode in order:
                url = servers[mode][1]
                row = {"mode": mode, "repeat": repeat, **asyncio.run(run_rate(url, rate, pool, args))}
                rows.append(row)
                print(f"{mode:9} {rate:6.1f} {row['sent']:5d} {row['done']:5d} {row['refused']:4d} "
                      f"{row['failed']:4d} {row['tokens_per_s']:8.1f} "
                      f"{row['src_tokens_per_s']:8.1f} {row['p50_s']:7.3f} {row['p99_s']:7.3f} "
                      f"{row['ttft_p50_s']:7.3f} {row['ttft_p99_s']:7.3f}", flush=True)
    return rows


def load_main() -> None:
    args = load_parser().parse_args()
    refuse_outputs(args)
    pool = workload(args.folder, args.new_tokens, args.seed, args.max_src_len)
    rows = []
    print(f"{'mode':9} {'rate/s':>6} {'sent':>5} {'done':>5} {'429':>4} {'fail':>4} {'tok/s':>8} {'src/s':>8} "
          f"{'p50 s':>7} {'p99 s':>7} {'ttft50':>7} {'ttft99':>7}", flush=True)
    servers = {}
    try:
        for mode in args.modes.split(","):  # all up at once: idle ones wait on a lock and take no CPU
            servers[mode] = start_server(args.folder, mode, args, ROOT)
        rows = measure_rates(servers, pool, args)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(60)
    print_ratios(rows)
    if args.json:
        write_file_atomically(args.json, lambda tmp: tmp.write_text(json.dumps(rows, indent=1)), LOAD_OURS["json"])
    if args.plot:
        plot(rows, args.plot, args.folder.name)


def print_ratios(rows: list[dict]) -> None:
    """Per rate, in-flight's tokens/s over each other mode's, paired by repeat (median over repeats)."""
    inflight = {(r["rate"], r["repeat"]): r["tokens_per_s"] for r in rows if r["mode"] == "inflight"}
    for mode in ("request", "single"):
        for rate in dict.fromkeys(r["rate"] for r in rows):
            pairs = [inflight[rate, r["repeat"]] / r["tokens_per_s"] for r in rows
                     if r["mode"] == mode and r["rate"] == rate and (rate, r["repeat"]) in inflight]
            if pairs:
                print(f"in-flight / {mode} at {rate:g}/s: {harness.median(pairs):.2f}x "
                      f"({', '.join(f'{p:.2f}' for p in pairs)})", flush=True)


ENGINE_DOC = r"""Engine-only throughput: the server's decode engines without HTTP, every job queued at once.

    python -m benchmarks engine EXPORT --jobs 320 --max-batch 16 --new-tokens 4:64 --max-src-len 64 \
        --threads 2 --repeat 2 [--decoding default] [--device cuda]

The same workload as `benchmarks load` (load.workload: its sources and budgets), submitted in one go to a
request-level and an in-flight engine (serve.batcher), modes taking turns; prints tokens/s per run
and the paired in-flight / request-level ratios. What `load` measures minus the HTTP server and
the load client (which share the machine's cores with the engine there).
"""


def engine_main() -> None:
    parser = argparse.ArgumentParser(description=ENGINE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
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
            rows.append({"repeat": repeat, **engine_run(args.folder, mode, work, args)})
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    pairs = [i["tokens_per_s"] / r["tokens_per_s"] for i in rows if i["mode"] == "inflight"
             for r in rows if r["mode"] == "request" and r["repeat"] == i["repeat"]]
    if pairs:
        print(f"in-flight / request: {harness.median(pairs):.2f}x ({', '.join(f'{p:.2f}' for p in pairs)})")


CT2_BATCH_DOC = r"""CTranslate2's static batches on `load`'s request pool: the peer of `tfm-export serve`'s batching.

    .venv/bin/python -m benchmarks ct2-batch HF_FOLDER --export EXPORT_FOLDER --batch 16 --beams 4 \
        --new-tokens 4:64 --seed 0 --threads 2 --repeat 3 [--max-src-len N] [--ct2-dir DIR] [--json OUT]

HF_FOLDER (a Marian folder with vocab.json, e.g. from `opus-mt-folder`) is converted with
CTranslate2's TransformersConverter (float32) into --ct2-dir, or a temporary folder; a --ct2-dir that
already holds a converted model is reused. EXPORT_FOLDER is that folder's tfm-export export: `load`'s
`workload` reads its vocabulary size and max_len, so with the same --new-tokens, --seed and
--max-src-len the 200 (source ids, max_new_tokens) pairs are exactly those `load`'s requests cycle
through. Ids become tokens by the folder's vocab.json (CTranslate2's vocabulary is checked to agree).

Each repeat decodes the whole pool in consecutive static batches of --batch with
translate_batch(beam_size=--beams), each batch's max_decoding_length the largest max_new_tokens in it
(a static batch decodes to its longest request), on intra_threads=--threads, inter_threads=1, after
one untimed warm-up batch. Reported per repeat and as the median over repeats: wall time, source
tokens/s (the pool's source lengths over the wall time: the figure to compare with `load`'s
src_tokens_per_s) and generated tokens/s (the best hypotheses' tokens, EOS not counted); also
"useful" tokens/s, each hypothesis cut to its request's max_new_tokens (what a server would return: the
rest is the static batch's overhang past a shorter request's limit), the figure for `load`'s tokens/s.
"""


def ct2_batch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=CT2_BATCH_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_folder", type=Path, help="a Marian folder with vocab.json (transformers' layout)")
    parser.add_argument("--export", type=Path, required=True,
                        help="the folder's tfm-export export (`load`'s workload reads its vocab size and max_len)")
    parser.add_argument("--batch", type=int, default=16, help="requests per static batch (default: 16)")
    parser.add_argument("--beams", type=int, default=4, help="beam_size (default: 4)")
    parser.add_argument("--new-tokens", default="4:64", help="max_new_tokens per request, N or LOW:HIGH, as `load`'s")
    parser.add_argument("--max-src-len", type=int, default=None, help="as `load`'s: sources shorter than half of it "
                        "(default: the export's max_len)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed, as `load`'s (default: 0)")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 intra_threads (default: 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the pool (default: 3)")
    parser.add_argument("--ct2-dir", type=Path, default=None,
                        help="convert into (or reuse) this folder (default: a temporary one, deleted at the end)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    return parser


def static_batches(pool: list[tuple[list[int], int]], tokens: list[str], size: int
                   ) -> list[tuple[list[list[str]], list[int]]]:
    """The pool in consecutive static batches of `size`: (sources as tokens, each request's max_new_tokens)."""
    batches = [pool[i:i + size] for i in range(0, len(pool), size)]
    return [([[tokens[t] for t in ids] for ids, _ in b], [k for _, k in b]) for b in batches]


def passes(translator: Any, batches: list[tuple[list[list[str]], list[int]]], src_tokens: int,
           args: argparse.Namespace) -> list[dict[str, Any]]:
    """--repeat timed passes over the batches, after one untimed warm-up batch; a row per pass."""

    def decode(src: list[list[str]], limits: list[int]) -> tuple[int, int]:
        results = translator.translate_batch(src, beam_size=args.beams, max_decoding_length=max(limits))
        lengths = [len(r.hypotheses[0]) for r in results]
        return sum(lengths), sum(min(n, k) for n, k in zip(lengths, limits))

    decode(*batches[0])  # warm-up
    repeats = []
    for repeat in range(args.repeat):
        counts: list[tuple[int, int]] = []
        wall = harness.timed(lambda: counts.extend(decode(src, limits) for src, limits in batches))
        generated, useful = sum(c[0] for c in counts), sum(c[1] for c in counts)
        repeats.append({"repeat": repeat, "wall_s": wall, "src_tokens": src_tokens, "generated_tokens": generated,
                        "useful_tokens": useful, "src_tokens_per_s": src_tokens / wall,
                        "tokens_per_s": generated / wall, "useful_tokens_per_s": useful / wall})
        print(f"repeat {repeat}: {wall:.2f} s, {src_tokens / wall:.1f} source tokens/s, "
              f"{generated / wall:.1f} generated tokens/s ({generated} tokens; {useful / wall:.1f}/s, {useful}, "
              f"within each request's max_new_tokens)", flush=True)
    return repeats


def ct2_batch_main() -> None:
    args = ct2_batch_parser().parse_args()
    if args.json and (args.json.exists() or args.json.is_symlink()) and (args.json.is_symlink()
                                                                         or not is_report(args.json)):
        raise SystemExit(f"{args.json} exists and is not {CT2_OURS[0]}; choose another name")
    import ctranslate2

    machine = {**machine_info(args.threads), "ctranslate2": ctranslate2.__version__}
    print(f"CPU {machine['cpu']}, {machine['cores']} cores, {args.threads} threads; "
          f"ctranslate2 {machine['ctranslate2']}, onnxruntime {machine['onnxruntime']}", flush=True)
    config = load_manifest(args.export, verify_hashes=False).config
    vocab_size = len(json.loads((args.hf_folder / "vocab.json").read_text(encoding="utf-8")))
    if config.src_vocab_size != vocab_size:
        raise SystemExit(f"{args.export} has {config.src_vocab_size} source ids, {args.hf_folder}/vocab.json "
                         f"{vocab_size}: not an export of this folder")
    pool = workload(args.export, args.new_tokens, args.seed, args.max_src_len)
    with tempfile.TemporaryDirectory(prefix="tfm-ct2-batch-") as tmp:
        ct2_dir = args.ct2_dir or Path(tmp) / "model"
        convert_s = converted(args.hf_folder, ct2_dir)
        print(f"CTranslate2 model {ct2_dir}: " + ("reused" if convert_s is None else f"converted in {convert_s:.1f} s"),
              flush=True)
        tokens = id_tokens(args.hf_folder, ct2_dir)
        translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="float32",
                                            inter_threads=1, intra_threads=args.threads)
        batches = static_batches(pool, tokens, args.batch)
        src_tokens = sum(len(ids) for ids, _ in pool)
        repeats = passes(translator, batches, src_tokens, args)
    median = {k: harness.median(r[k] for r in repeats)
              for k in ("wall_s", "src_tokens_per_s", "tokens_per_s", "useful_tokens_per_s")}
    print(f"CTranslate2 beam {args.beams}, static batches of {args.batch} ({len(batches)} per pass, {len(pool)} "
          f"requests, {src_tokens} source tokens), median of {args.repeat}: {median['wall_s']:.2f} s, "
          f"{median['src_tokens_per_s']:.1f} source tokens/s, {median['tokens_per_s']:.1f} generated tokens/s "
          f"({median['useful_tokens_per_s']:.1f} within max_new_tokens)",
          flush=True)
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        report = {"tool": TOOL, "machine": machine, "settings": settings, "convert_s": convert_s,
                  "requests": len(pool), "batches": len(batches), "repeats": repeats, "median": median}
        write_file_atomically(args.json, lambda p: p.write_text(json.dumps(report, indent=1) + "\n"), CT2_OURS)
        print(f"wrote {args.json}")
