"""Prompt lookup in the server's rows in flight (runtime.inflight.Speculating) against plain greedy rows, on the
copy-heavy BART fixture (tests/fixtures/trained_copy/bart: its answers copy 20-40 ids of the source).

    python -m benchmarks speculative-served [--device cpu] [--threads 2] [--rounds 5] [--new-tokens 64]
        [--sources 20] [--max-batch 8] [--json OUT]

The fixture is exported with its static-cache decoders (`--static-slots 64`) and served by the in-flight engine
(serve.batcher.InflightBatcher, no HTTP). Two workloads, each plain and with prompt_lookup_num_tokens 10, sides
interleaved: `one at a time` (a job submitted when the last is answered: batch-1 latency, what a speculating
request gains) and `all at once` (every source queued together: throughput, where plain rows share one decoder
step and each speculating request runs calls of its own). ms per generated id (EOS counted), the speculating
requests' decoder calls per id and acceptance (the engine's counters), and whether both sides' ids are equal.
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
from tfm_export.serve.engine import ServeSettings, open_engine

SLOTS = 64  # --static-slots: the most ids a row generates


def _answer(engine: Any, sources: list[list[int]], steps: int, config: Any, together: bool) -> list[list[int]]:
    """Every source's ids through `engine`: queued together, or each once the previous one is answered."""
    ids: list[list[int]] = [[] for _ in sources]
    done = threading.Semaphore(0)

    def job(n: int) -> Job:
        def emit(kind: str, value: Any) -> None:
            if kind == "token":
                ids[n].append(value)
            else:  # done or error: each job ends with exactly one
                done.release()
        return Job(sources[n], steps, emit, config)

    batches = [list(range(len(sources)))] if together else [[n] for n in range(len(sources))]
    for batch in batches:
        engine.submit([job(n) for n in batch])
        for _ in batch:
            done.acquire()
    return ids


def _side(engine: Any, sources: list[list[int]], steps: int, lookup: int, together: bool
          ) -> Callable[[], dict[str, Any]]:
    config = GREEDY.replace(prompt_lookup_num_tokens=lookup)

    def run() -> dict[str, Any]:
        spec = engine.batch.speculation
        before = (spec.calls, spec.drafted, spec.accepted)
        start = time.perf_counter()
        ids = _answer(engine, sources, steps, config, together)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        calls, drafted, accepted = (now - was for now, was in zip((spec.calls, spec.drafted, spec.accepted), before))
        return {"ms": 1000 * seconds / tokens, "ids": ids, "tokens": tokens, "calls": calls, "drafted": drafted,
                "accepted": accepted}

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
                     "same_ids": all(r["ids"] == reference for r in runs),
                     "ms_rounds": [round(r["ms"], 3) for r in runs]})
    return rows


COLUMNS = [Column("workload"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "speculating calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("same_ids", "same ids")]


def speculative_served_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--new-tokens", type=int, default=SLOTS, help=f"most ids per source (at most {SLOTS})")
    parser.add_argument("--sources", type=int, default=20, help="held-out sources of the fixture")
    parser.add_argument("--max-batch", type=int, default=8, help="the engine's rows")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    copy = fixtures.copy()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = _trained("bart-copy", Path(tmp), copy.copy_folder(COPY_FAMILY), "--static-slots", str(SLOTS))
        engine = open_engine(ServeSettings(str(folder), device=args.device, threads=args.threads, engine=EngineConfig(
            max_batch=args.max_batch, max_queue=max(64, args.sources))))
        engine.start()
        sources = [engine.model.encode(s) for s, _ in copy.copy_examples(args.sources)]
        steps = min(args.new_tokens, SLOTS)
        for workload, together in (("one at a time", False), ("all at once", True)):
            sides = {"plain": _side(engine, sources, steps, 0, together),
                     f"prompt lookup {LOOKUP}": _side(engine, sources, steps, LOOKUP, together)}
            rows += _rows(workload, interleave(sides, Plan(rounds=args.rounds)))
        engine.close()
    print(f"in-flight engine, greedy, {args.device}, {args.threads} threads, max_batch {args.max_batch}, "
          f"{args.sources} sources, medians of {args.rounds} interleaved rounds")
    print(markdown_table(rows, COLUMNS))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(args.threads), "rows": rows}, indent=1))
