"""Serving under load: open-loop Poisson load on tfm-export serve (the batching modes taking turns), the engines without HTTP, and CTranslate2's static batches on the same workload."""

from __future__ import annotations

from pathlib import Path
import aiohttp
import argparse
import asyncio
import json
import numpy as np
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from tfm_export.bench import harness
from tfm_export.bench.harness import machine_info
from tfm_export.files import write_file_atomically
from tfm_export.manifest import load_manifest
from tfm_export.runtime.options.generation import GREEDY
from tfm_export.serve.batcher import EngineConfig, Job
from tfm_export.serve.engine import ServeSettings, open_engine


ROOT = Path(__file__).resolve().parents[1]


# --- load -----------------------------------------------------------------------------------------

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

MODES = ("single", "request", "inflight")
TOKEN_EVENT = b"event: token\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path, mode: str, args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "tfm_export", "serve", str(folder.resolve()), "--port", str(port), "--batching", mode,
           "--max-batch", str(args.max_batch), "--max-queue", str(args.max_queue),
           *(["--max-src-len", str(args.max_src_len)] if args.max_src_len else []),
           "--window-ms", str(args.window_ms), *(["--threads", str(args.threads)] if args.threads else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the {mode} server exited with {proc.returncode}")
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the {mode} server did not start in 120 s")


def sources(folder: Path, count: int, seed: int, longest: int | None = None) -> list[list[int]]:
    """Varied sources: random in-vocabulary ids of 4..longest/2 tokens (longest: max_len; the same for every mode)."""
    config = load_manifest(folder, verify_hashes=False).config
    rng = random.Random(seed)
    specials = {config.src_pad_id, config.bos_id, config.eos_id}
    top = config.src_vocab_size
    while top - 1 in specials:  # Marian: the pad id (the decoder start) is the last id
        top -= 1
    low = max((s for s in specials if s < top), default=-1) + 1
    half = (longest or config.max_len) // 2
    return [[rng.randrange(low, top) for _ in range(rng.randrange(4, half))]
            for _ in range(count)]


def workload(folder: Path, new_tokens: str, seed: int, longest: int | None = None) -> list[tuple[list[int], int]]:
    """200 (source ids, max_new_tokens) pairs that requests cycle through; `new_tokens`: N or LOW:HIGH."""
    low, _, high = new_tokens.partition(":")
    lengths = random.Random(seed + 1)
    return [(ids, lengths.randint(int(low), int(high or low))) for ids in sources(folder, 200, seed, longest)]


async def one_request(http: aiohttp.ClientSession, url: str, ids: list[int], steps: int) -> dict:
    start = time.perf_counter()
    first, tokens = None, 0
    async with http.post(f"{url}/v1/translate", json={"ids": [ids], "max_new_tokens": steps,
                                                       "stream": True}) as response:
        if response.status != 200:
            await response.read()
            return {"status": response.status}
        # Token events counted in the raw bytes (no line splitting: the client shares the server's
        # two cores, so its cost per token is kept low); `tail` catches an event split across chunks.
        tail = b""
        async for chunk in response.content.iter_any():
            found = (tail + chunk).count(TOKEN_EVENT)
            if found:
                first = first or time.perf_counter()
                tokens += found
            tail = (tail + chunk)[-(len(TOKEN_EVENT) - 1):]
    end = time.perf_counter()
    return {"status": 200, "start": start, "end": end, "latency": end - start,
            "ttft": (first or end) - start, "tokens": tokens, "src_tokens": len(ids)}


async def run_rate(url: str, rate: float, pool: list[tuple[list[int], int]], args: argparse.Namespace) -> dict:
    """Poisson arrivals at `rate`/s for --duration s (at most --max-requests), then wait for answers."""
    rng = np.random.default_rng(args.seed)
    # aiohttp rather than httpx: the client shares the server's two cores, and with hundreds of
    # streams open under overload httpx's pool took 2.7x its CPU (5.6 vs 2.1 s at 44/s) and in-flight
    # served 11 % fewer tokens/s (750 vs 839) for it.
    connector = aiohttp.TCPConnector(limit=0)  # no connection cap: arrivals never wait for the client
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=args.duration * 4 + 60)) as http:
        tasks, begin = [], time.perf_counter()
        while len(tasks) < args.max_requests and time.perf_counter() - begin < args.duration:
            ids, steps = pool[len(tasks) % len(pool)]
            tasks.append(asyncio.create_task(one_request(http, url, ids, steps)))
            await asyncio.sleep(rng.exponential(1 / rate))
        results = await asyncio.gather(*tasks, return_exceptions=True)
    done = [r for r in results if isinstance(r, dict) and r["status"] == 200]
    span = max(r["end"] for r in done) - begin if done else float("nan")
    pct = lambda key, q: float(np.percentile([r[key] for r in done], q)) if done else float("nan")  # noqa: E731
    return {"rate": rate, "sent": len(tasks), "done": len(done),
            "refused": sum(isinstance(r, dict) and r["status"] == 429 for r in results),
            "failed": sum(not isinstance(r, dict) or r["status"] not in (200, 429) for r in results),
            "tokens_per_s": sum(r["tokens"] for r in done) / span,
            "src_tokens_per_s": sum(r["src_tokens"] for r in done) / span, "p50_s": pct("latency", 50),
            "p99_s": pct("latency", 99), "ttft_p50_s": pct("ttft", 50), "ttft_p99_s": pct("ttft", 99)}


def load_main() -> None:
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
    args = parser.parse_args()
    outputs = [(path, LOAD_OURS[kind]) for kind, path in (("json", args.json), ("plot", args.plot)) if path]
    for path, (what, test) in outputs:  # before the long run: never replace a file we did not write
        if (path.exists() or path.is_symlink()) and (path.is_symlink() or not test(path)):
            raise SystemExit(f"{path} exists and is not {what}; choose another name")
    if args.plot:  # found out before the run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("--plot needs matplotlib: pip install -c constraints.txt '.[plot]'") from None
    pool = workload(args.folder, args.new_tokens, args.seed, args.max_src_len)
    rows = []
    print(f"{'mode':9} {'rate/s':>6} {'sent':>5} {'done':>5} {'429':>4} {'fail':>4} {'tok/s':>8} {'src/s':>8} "
          f"{'p50 s':>7} {'p99 s':>7} {'ttft50':>7} {'ttft99':>7}", flush=True)
    servers = {}
    try:
        for mode in args.modes.split(","):  # all up at once: idle ones wait on a lock and take no CPU
            servers[mode] = start_server(args.folder, mode, args)
        # Modes take turns at each rate (A, B / B, A over the repeats: the harness's rotation), so a drift
        # of this shared machine's speed shows in every mode alike rather than in whichever mode ran last.
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
                print(f"in-flight / {mode} at {rate:g}/s: {float(np.median(pairs)):.2f}x "
                      f"({', '.join(f'{p:.2f}' for p in pairs)})", flush=True)


SOFTWARE = "tfm-export `benchmarks load`"  # stamped into the PNG's metadata: marks the charts we wrote


def is_load_rows(path: Path) -> bool:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(rows, list) and all(isinstance(r, dict) and {"mode", "rate", "tokens_per_s"} <= r.keys()
                                          for r in rows)


def is_load_chart(path: Path) -> bool:
    try:
        return path.read_bytes().startswith(b"\x89PNG") and SOFTWARE.encode() in path.read_bytes()[:4096]
    except OSError:
        return False


LOAD_OURS = {"json": ("a `load` JSON report", is_load_rows), "plot": ("a `load` chart", is_load_chart)}


def medians(rows: list[dict]) -> list[dict]:
    """One row per rate: the median of each measure over the repeats."""
    keys = ("tokens_per_s", "p50_s", "p99_s")
    by_rate = {rate: [r for r in rows if r["rate"] == rate] for rate in dict.fromkeys(r["rate"] for r in rows)}
    return [{"rate": rate, **{k: float(np.median([r[k] for r in mine])) for k in keys}} for rate, mine in by_rate.items()]


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Latency (p50 solid, p99 dashed) and throughput against the offered rate, one colour per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(10, 3.8))
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = medians([r for r in rows if r["mode"] == mode])
        rates = [r["rate"] for r in mine]
        line, = lat.plot(rates, [r["p50_s"] for r in mine], marker="o", label=f"{mode} p50")
        lat.plot(rates, [r["p99_s"] for r in mine], marker="x", linestyle="--", color=line.get_color(),
                 label=f"{mode} p99")
        thr.plot(rates, [r["tokens_per_s"] for r in mine], marker="o", color=line.get_color(), label=mode)
    lat.set(xlabel="offered load (requests/s)", ylabel="latency (s)", yscale="log", title=f"{title}: latency")
    thr.set(xlabel="offered load (requests/s)", ylabel="tokens/s", title=f"{title}: throughput")
    lat.legend(fontsize=7)
    thr.legend(fontsize=7)
    fig.tight_layout()
    write_file_atomically(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png", metadata={"Software": SOFTWARE}),
                          LOAD_OURS["plot"])
    plt.close(fig)


# --- engine ---------------------------------------------------------------------------------------

ENGINE_DOC = r"""Engine-only throughput: the server's decode engines without HTTP, every job queued at once.

    python -m benchmarks engine EXPORT --jobs 320 --max-batch 16 --new-tokens 4:64 --max-src-len 64         --threads 2 --repeat 2 [--decoding default] [--device cuda]

The same workload as `benchmarks load` (load.workload: its sources and budgets), submitted in one go to a
request-level and an in-flight engine (serve.batcher), modes taking turns; prints tokens/s per run
and the paired in-flight / request-level ratios. What `load` measures minus the HTTP server and
the load client (which share the machine's cores with the engine there).
"""

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
    start = time.perf_counter()
    engine.submit([Job(ids, steps, emit, config) for ids, steps in work])
    for _ in work:
        answered.acquire()
    wall = time.perf_counter() - start
    engine.close()
    return {"mode": mode, "jobs": len(work), "tokens": tokens[0], "seconds": wall, "tokens_per_s": tokens[0] / wall}


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
            rows.append({"repeat": repeat, **run(args.folder, mode, work, args)})
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    pairs = [i["tokens_per_s"] / r["tokens_per_s"] for i in rows if i["mode"] == "inflight"
             for r in rows if r["mode"] == "request" and r["repeat"] == i["repeat"]]
    if pairs:
        print(f"in-flight / request: {float(np.median(pairs)):.2f}x ({', '.join(f'{p:.2f}' for p in pairs)})")


# --- ct2_batch ------------------------------------------------------------------------------------

CT2_BATCH_DOC = r"""CTranslate2's static batches on `load`'s request pool: the peer of `tfm-export serve`'s batching.

    .venv/bin/python -m benchmarks ct2-batch HF_FOLDER --export EXPORT_FOLDER --batch 16 --beams 4         --new-tokens 4:64 --seed 0 --threads 2 --repeat 3 [--max-src-len N] [--ct2-dir DIR] [--json OUT]

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

TOOL = "tfm-export `benchmarks ct2-batch`"  # marks the reports we wrote (replaced, never anything else)


def is_report(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        return False


CT2_OURS = ("a `ct2-batch` JSON report", is_report)


def converted(hf_folder: Path, ct2_dir: Path) -> float | None:
    """Convert into ct2_dir unless it holds a model already; seconds taken, or None when reused."""
    if (ct2_dir / "model.bin").exists():
        return None
    if ct2_dir.exists() and any(ct2_dir.iterdir()):
        raise SystemExit(f"{ct2_dir} is neither empty nor a CTranslate2 model; choose another --ct2-dir")
    from ctranslate2.converters import TransformersConverter

    # float32: no quantization
    return harness.timed(lambda: TransformersConverter(str(hf_folder)).convert(str(ct2_dir), force=True))


def ct2_vocabulary(ct2_dir: Path) -> list[str]:
    for name in ("shared_vocabulary.json", "source_vocabulary.json"):
        if (ct2_dir / name).exists():
            return json.loads((ct2_dir / name).read_text(encoding="utf-8"))
    for name in ("shared_vocabulary.txt", "source_vocabulary.txt"):
        if (ct2_dir / name).exists():
            return (ct2_dir / name).read_text(encoding="utf-8").split("\n")[:-1]
    raise SystemExit(f"{ct2_dir}: no vocabulary file")


def id_tokens(hf_folder: Path, ct2_dir: Path) -> list[str]:
    """The folder's vocab.json as a list (id -> token), checked against the converted vocabulary
    (CTranslate2 drops Marian's trailing <pad>, the decoder start it replaces with a zero embedding)."""
    vocab = json.loads((hf_folder / "vocab.json").read_text(encoding="utf-8"))
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    theirs = ct2_vocabulary(ct2_dir)
    if tokens[: len(theirs)] != theirs or len(tokens) - len(theirs) not in (0, 1):
        raise SystemExit(f"{ct2_dir}'s vocabulary ({len(theirs)} tokens) is not {hf_folder}/vocab.json's "
                         f"({len(tokens)}); a --ct2-dir converted from another folder?")
    return tokens


def ct2_batch_main() -> None:
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
    args = parser.parse_args()
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
        batches = [pool[i:i + args.batch] for i in range(0, len(pool), args.batch)]
        batches = [([[tokens[t] for t in ids] for ids, _ in b], [k for _, k in b]) for b in batches]

        def decode(src: list[list[str]], limits: list[int]) -> tuple[int, int]:
            results = translator.translate_batch(src, beam_size=args.beams, max_decoding_length=max(limits))
            lengths = [len(r.hypotheses[0]) for r in results]
            return sum(lengths), sum(min(n, k) for n, k in zip(lengths, limits))

        decode(*batches[0])  # warm-up
        src_tokens = sum(len(ids) for ids, _ in pool)
        repeats = []
        for repeat in range(args.repeat):
            start = time.perf_counter()
            counts = [decode(src, limits) for src, limits in batches]
            wall = time.perf_counter() - start
            generated, useful = sum(c[0] for c in counts), sum(c[1] for c in counts)
            repeats.append({"repeat": repeat, "wall_s": wall, "src_tokens": src_tokens, "generated_tokens": generated,
                            "useful_tokens": useful, "src_tokens_per_s": src_tokens / wall,
                            "tokens_per_s": generated / wall, "useful_tokens_per_s": useful / wall})
            print(f"repeat {repeat}: {wall:.2f} s, {src_tokens / wall:.1f} source tokens/s, "
                  f"{generated / wall:.1f} generated tokens/s ({generated} tokens; {useful / wall:.1f}/s, {useful}, "
                  f"within each request's max_new_tokens)", flush=True)
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
