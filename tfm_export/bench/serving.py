"""What the serving scenarios share (`load`, `engine`, `ct2-batch`, the served speech and live ones): the workload
(200 (source ids, max_new_tokens) pairs of random in-vocabulary ids, the same for `load`'s requests, `engine`'s
jobs and `ct2-batch`'s static batches), `tfm-export serve` started on a free port, `load`'s open-loop client
(Poisson arrivals, streamed requests), `engine`'s run of the engines without HTTP, and `load`'s outputs (JSON
rows and a chart), each recognisable as ours so that a rerun replaces only a file `load` wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import InputError, TfmExportError
from ..files import write_file_atomically
from ..manifest import load_manifest
from . import harness

if TYPE_CHECKING:
    import aiohttp

TOKEN_EVENT = b"event: token\n"


# --- the workload


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


# --- the server and the load client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path, mode: str, args: argparse.Namespace, cwd: Path) -> tuple[subprocess.Popen, str]:
    """`tfm-export serve FOLDER --batching MODE` (the server options from `args`: `load`'s) on a free port, run from
    `cwd`; the process and its URL once /healthz answers."""
    options = ["--batching", mode, "--max-batch", str(args.max_batch), "--max-queue", str(args.max_queue),
               "--window-ms", str(args.window_ms)]
    options += ["--max-src-len", str(args.max_src_len)] if args.max_src_len else []
    options += ["--threads", str(args.threads)] if args.threads else []
    return serve_process(folder, options, mode, cwd)


def serve_process(folder: Path, options: Sequence[str], label: str, cwd: Path | None = None,
                  seconds: float = 120) -> tuple[subprocess.Popen, str]:
    """`tfm-export serve FOLDER OPTIONS...` on a free port (run from `cwd`): the process and its URL once /healthz
    answers. Its stderr goes to a file, not a pipe (a pipe nobody reads would stall a server that logs), and its
    tail is the error when it stops before answering."""
    port = free_port()
    cmd = [sys.executable, "-m", "tfm_export", "serve", str(folder.resolve()), "--port", str(port), *options]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise TfmExportError(f"the {label} server exited with {proc.returncode}: {tail}")
            time.sleep(0.2)
    proc.kill()
    raise TfmExportError(f"the {label} server did not start in {seconds:g} s")


def engine_run(folder: Path, mode: str, work: list[tuple[list[int], int]], args: argparse.Namespace) -> dict:
    """`engine`'s run of `mode`: every job queued at once; the wall time until the last one is answered.
    `args`: `engine`'s options (device, threads, max_batch, max_src_len, decoding)."""
    from ..runtime.options.generation import GREEDY
    from ..serve.batcher import EngineConfig, Job
    from ..serve.engine import ServeSettings, open_engine

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


async def one_request(http: aiohttp.ClientSession, url: str, ids: list[int], steps: int) -> dict:
    """One streamed /v1/translate request: its latency, time to first token and tokens."""
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
    import aiohttp

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


# --- `load`'s outputs


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
    return [{"rate": rate, **{k: harness.median(r[k] for r in mine) for k in keys}} for rate, mine in by_rate.items()]


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


def refuse_outputs(args: argparse.Namespace) -> None:
    """Before the long run: never replace a file we did not write, and --plot only where matplotlib is."""
    outputs = [(path, LOAD_OURS[kind]) for kind, path in (("json", args.json), ("plot", args.plot)) if path]
    for path, (what, test) in outputs:
        if (path.exists() or path.is_symlink()) and (path.is_symlink() or not test(path)):
            raise InputError(f"{path} exists and is not {what}; choose another name")
    if args.plot:  # found out before the run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot needs matplotlib: pip install -c constraints.txt '.[plot]'") from None


# ct2-batch's JSON report
TOOL = "tfm-export `benchmarks ct2-batch`"  # marks the reports we wrote (replaced, never anything else)


def is_report(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        return False


CT2_OURS = ("a `ct2-batch` JSON report", is_report)
