"""Prompt lookup in the server's rows in flight (runtime.inflight.Speculating) against plain greedy rows, on the
copy-heavy BART fixture (tests/fixtures/trained_copy/bart: its answers copy 20-40 ids of the source).

    python -m benchmarks speculative-served [--device cpu] [--threads 2] [--rounds 5] [--new-tokens 64]
        [--sources 20] [--max-batch 8] [--speculate-below N] [--middle N] [--json OUT]

The fixture is exported with its static-cache decoders (`--static-slots 64`) and served by the in-flight engine
(serve.batcher.InflightBatcher, no HTTP). Three workloads, each plain and with prompt_lookup_num_tokens 10, sides
interleaved: `one at a time` (a job submitted when the last is answered: batch-1 latency, what a speculating
request gains), `N at a time` (--middle N, by default SPECULATE_BELOW - 1: the most the rule lets speculate together) and `all at
once` (every source queued together: throughput, where plain rows share one decoder step and each speculating
request would run calls of its own). The engine keeps its default --speculate-below
(serve.jobs.SPECULATE_BELOW; `--speculate-below N` sets it): at that load a prompt-lookup request decodes as a plain
row. ms per generated id (EOS counted), the speculating requests' decoder calls per id and acceptance, the requests
declined for load (the engine's counters), and whether both sides' ids are equal.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import fixtures
from benchmarks.speculative import COPY_FAMILY, LOOKUP, _trained
from tfm_export.bench.harness import Column, Plan, interleave, machine_info, markdown_table, median
from tfm_export.runtime import GREEDY
from tfm_export.serve.batcher import EngineConfig, Job
from tfm_export.serve.jobs import SPECULATE_BELOW
from tfm_export.serve.engine import ServeSettings, open_engine

SLOTS = 64  # --static-slots: the most ids a row generates


def _answer(engine: Any, sources: list[list[int]], steps: int, config: Any, together: int) -> list[list[int]]:
    """Every source's ids through `engine`, `together` queued at once, the next ones once those are answered."""
    ids: list[list[int]] = [[] for _ in sources]
    done = threading.Semaphore(0)

    def job(n: int) -> Job:
        def emit(kind: str, value: Any) -> None:
            if kind == "token":
                ids[n].append(value)
            else:  # done or error: each job ends with exactly one
                done.release()
        return Job(sources[n], steps, emit, config)

    batches = [list(range(n, min(n + together, len(sources)))) for n in range(0, len(sources), together)]
    for batch in batches:
        engine.submit([job(n) for n in batch])
        for _ in batch:
            done.acquire()
    return ids


def _side(engine: Any, sources: list[list[int]], steps: int, lookup: int, together: int
          ) -> Callable[[], dict[str, Any]]:
    config = GREEDY.replace(prompt_lookup_num_tokens=lookup)

    def run() -> dict[str, Any]:
        spec = engine.batch.speculation
        before = (spec.calls, spec.drafted, spec.accepted, engine.declined)
        start = time.perf_counter()
        ids = _answer(engine, sources, steps, config, together)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        counts = (spec.calls, spec.drafted, spec.accepted, engine.declined)
        calls, drafted, accepted, declined = (now - was for now, was in zip(counts, before))
        return {"ms": 1000 * seconds / tokens, "ids": ids, "tokens": tokens, "calls": calls, "drafted": drafted,
                "accepted": accepted, "declined": declined}

    return run


def _rows(workload: str, samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    plain = median(r["ms"] for r in samples["plain"])
    reference = samples["plain"][0]["ids"]
    rows = []
    for side, runs in samples.items():
        ms, last = median(r["ms"] for r in runs), runs[-1]
        rows.append({"workload": workload, "side": side, "ms_per_token": round(ms, 3),
                     "speedup": round(plain / ms, 2),
                     "calls_per_token": round(last["calls"] / last["tokens"], 3) if last["calls"] else None,
                     "acceptance": round(last["accepted"] / last["drafted"], 3) if last["drafted"] else None,
                     "declined": last["declined"], "same_ids": all(r["ids"] == reference for r in runs),
                     "ms_rounds": [round(r["ms"], 3) for r in runs]})
    return rows


COLUMNS = [Column("workload"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "speculating calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("declined", "declined for load"),
           Column("same_ids", "same ids")]


def speculative_served_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--new-tokens", type=int, default=SLOTS, help=f"most ids per source (at most {SLOTS})")
    parser.add_argument("--sources", type=int, default=20, help="held-out sources of the fixture")
    parser.add_argument("--max-batch", type=int, default=8, help="the engine's rows")
    parser.add_argument("--speculate-below", type=int, default=SPECULATE_BELOW,
                        help="the engine's load rule: speculate below this many rows in flight or queued")
    parser.add_argument("--middle", type=int, default=SPECULATE_BELOW - 1,
                        help="the middle workload: this many sources queued at a time")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    copy = fixtures.copy()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = _trained("bart-copy", Path(tmp), copy.copy_folder(COPY_FAMILY), "--static-slots", str(SLOTS))
        engine = open_engine(ServeSettings(str(folder), device=args.device, threads=args.threads, engine=EngineConfig(
            max_batch=args.max_batch, max_queue=max(64, args.sources), speculate_below=args.speculate_below)))
        engine.start()
        sources = [engine.model.encode(s) for s, _ in copy.copy_examples(args.sources)]
        steps = min(args.new_tokens, SLOTS)
        for workload, together in (("one at a time", 1), (f"{args.middle} at a time", args.middle),
                                   ("all at once", len(sources))):
            sides = {"plain": _side(engine, sources, steps, 0, together),
                     f"prompt lookup {LOOKUP}": _side(engine, sources, steps, LOOKUP, together)}
            rows += _rows(workload, interleave(sides, Plan(rounds=args.rounds)))
        engine.close()
    print(f"in-flight engine, greedy, {args.device}, {args.threads} threads, max_batch {args.max_batch}, "
          f"speculate_below {args.speculate_below}, {args.sources} sources, medians of {args.rounds} interleaved "
          f"rounds")
    print(markdown_table(rows, COLUMNS))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(args.threads), "rows": rows}, indent=1))
