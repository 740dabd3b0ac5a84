r"""Open-loop load test of `tfm-export serve`: one request at a time vs request-level vs in-flight batching.

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
from __future__ import annotations

from pathlib import Path
import aiohttp
import argparse
import asyncio
import json
import numpy as np
import socket
import subprocess
import sys
import time
import urllib.request

from tfm_export.bench import harness
from tfm_export.files import write_file_atomically
from benchmarks.serving.load_report import LOAD_OURS, plot
from benchmarks.serving.workload import workload

ROOT = Path(__file__).resolve().parents[2]

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


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def refuse_outputs(args: argparse.Namespace) -> None:
    """Before the long run: never replace a file we did not write, and --plot only where matplotlib is."""
    outputs = [(path, LOAD_OURS[kind]) for kind, path in (("json", args.json), ("plot", args.plot)) if path]
    for path, (what, test) in outputs:
        if (path.exists() or path.is_symlink()) and (path.is_symlink() or not test(path)):
            raise SystemExit(f"{path} exists and is not {what}; choose another name")
    if args.plot:  # found out before the run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("--plot needs matplotlib: pip install -c constraints.txt '.[plot]'") from None


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
    args = parser().parse_args()
    refuse_outputs(args)
    pool = workload(args.folder, args.new_tokens, args.seed, args.max_src_len)
    rows = []
    print(f"{'mode':9} {'rate/s':>6} {'sent':>5} {'done':>5} {'429':>4} {'fail':>4} {'tok/s':>8} {'src/s':>8} "
          f"{'p50 s':>7} {'p99 s':>7} {'ttft50':>7} {'ttft99':>7}", flush=True)
    servers = {}
    try:
        for mode in args.modes.split(","):  # all up at once: idle ones wait on a lock and take no CPU
            servers[mode] = start_server(args.folder, mode, args)
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


