"""The measuring processes that run under any checkout's tfm_export: `decode-core` and `step` compare checkouts
(before / after a change), so what they time runs as `python -c CODE` in a fresh process with that checkout on
PYTHONPATH, from an empty folder (so that `-c`'s '' on sys.path finds no other checkout's package). The code is
kept here as text because it must not import this checkout's modules; this module only starts the processes.
The code uses only the runtime's public names of the last months, so older checkouts run it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..manifest import has_manifest
from . import harness

# One export opened, each case (name -> (sources, beams, in the server's in-flight rows)) timed: the best of
# `repeat` decodes after a warm-up, ms per new token (per step in flight) and the process's CPU time per token.
# The in-flight cases use runtime.inflight's decode_in_flight and runtime.states.host_rows' open_rows, as the
# server steps its rows.
CORE_WORKER = r"""
import json, random, sys, time
import tfm_export
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
folder, threads, new_tokens, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cases = json.loads(sys.argv[5])
def opened(static):
    options = RuntimeOptions(intra_op_threads=threads, cuda_graph=static, spin_wait=False)
    return open_export(folder, "cpu", options, verify=False)
model, rows_model = opened(False), None
def in_flight(sources, config):
    from tfm_export.runtime.inflight import decode_in_flight
    try:
        from tfm_export.runtime.states.host_rows import open_rows
    except ImportError:  # a checkout from before runtime/ in folders (#59): runtime.rows
        from tfm_export.runtime.rows import open_rows
    cache = rows_model.static_cache
    src = rows_model.source_input(sources)
    rows = open_rows(cache, len(sources) * config.num_beams, cache.config.src_len or src.shape[1])
    steps = min(new_tokens, cache.slots - 1)
    def run():
        out = decode_in_flight(rows, src, steps, config, cache.config)
        return [row if isinstance(row[0], int) else row[0].ids for row in out]
    return run
rng = random.Random(0)
out = {"tfm_export": tfm_export.__file__, "ms_per_token": {}, "cpu_ms_per_token": {}}
for name, (batch, beams, rows) in cases.items():
    sources = [[rng.randrange(4, model.config.src_vocab_size - 1) for _ in range(32)] for _ in range(batch)]
    config = GREEDY.replace(num_beams=beams)
    if rows:  # the server's rows, every source a request of its own; they stop at EOS: per step
        rows_model = rows_model or opened(True)
        run = in_flight(sources, config)
        steps = max(len(ids) for ids in run())  # the warm-up
    else:
        run = lambda: model.generate_ids(sources, new_tokens, stop_at_eos=False, config=config)
        run()  # warm-up
        steps = new_tokens
    times, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - start); cpu.append(time.process_time() - start_cpu)
    out["ms_per_token"][name] = 1e3 * min(times) / steps
    # CPU time of all the process's threads: the work done, which another process taking a core does not add to
    out["cpu_ms_per_token"][name] = 1e3 * min(cpu) / steps
print(json.dumps(out))
"""

# Exports a checkpoint (argv[1]) to argv[2] with argv[3] static slots (the in-flight cases' rows); static_cache
# spelled out, since a checkout from before the declared export options (#59) takes static_slots without it
EXPORT_WORKER = r"""
import sys
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
export_model(load_any(sys.argv[1]), sys.argv[2], ExportOptions(validate=False, static_cache=True,
                                                             static_slots=int(sys.argv[3])))
"""

# One backend ("ct2" or "ort") decoding one random batch: --new-tokens and 1 new token alternately, `repeat` times;
# its step time the median of (t(N) - t(1)) / (N - 1), its best step from the fastest runs, and the N-token ids.
STEP_WORKER = r"""
import json, sys, time, random, statistics
kind, model, threads, batch, beams, n, repeat, seed = sys.argv[1:9]
threads, batch, beams, n, repeat = int(threads), int(batch), int(beams), int(n), int(repeat)
vocab = int(sys.argv[9])
rng = random.Random(int(seed))
src = [[rng.randrange(4, vocab - 1) for _ in range(32)] for _ in range(batch)]
if kind == "ct2":
    import ctranslate2
    hf, ct2_dir, compute_type = model.split("::")
    vocab_ids = json.load(open(hf + "/vocab.json", encoding="utf-8"))  # checked against CT2's by ct2_batch.id_tokens
    tokens = sorted(vocab_ids, key=vocab_ids.get)
    index = {t: i for i, t in enumerate(tokens)}
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                        intra_threads=threads)
    pieces = [[tokens[t] for t in row] for row in src]
    def run(k):
        out = translator.translate_batch(pieces, beam_size=beams, max_decoding_length=k, min_decoding_length=k)
        return [[index[t] for t in r.hypotheses[0]] for r in out]
else:
    from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
    ort = open_export(model, "cpu", RuntimeOptions(intra_op_threads=threads), verify=False)
    try:  # the weights' collapse onto huge pages runs on a thread of its own: step_measure after it
        from tfm_export.runtime.hugepages import wait
        wait()
    except ImportError:  # a checkout from before it
        pass
    def run(k):
        config = GREEDY if beams == 1 else GREEDY.replace(num_beams=beams, min_new_tokens=k)
        return ort.generate_ids(src, max_new_tokens=k, stop_at_eos=False, config=config)
ids = run(n)
run(1)
steps, longs, shorts = [], [], []
for _ in range(repeat):
    start = time.perf_counter(); run(n); middle = time.perf_counter(); run(1); end = time.perf_counter()
    longs.append(middle - start); shorts.append(end - middle)
    steps.append(1e3 * (longs[-1] - shorts[-1]) / (n - 1))
best = 1e3 * (min(longs) - min(shorts)) / (n - 1)  # the fastest N-token and 1-token runs
print(json.dumps({"step_ms": statistics.median(steps), "best_ms": best, "samples": steps, "ids": ids}))
"""


def export_in(tree: Path, weights: Path, out: Path, slots: int, scratch: Path) -> Path:
    """`weights` exported to `out` (once) by the checkout `tree`, in a process of its own."""
    if not has_manifest(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", EXPORT_WORKER, str(weights), str(out), str(slots)], check=True,
                       cwd=scratch, env={**os.environ, "PYTHONPATH": str(tree)})
    return out


def core_process(tree: Path, export: Path, settings: tuple[int, int, int], cases: dict,
                 scratch: Path) -> Callable[[], dict]:
    """A call that runs CORE_WORKER on `export` under the checkout `tree` ((threads, new tokens, repeat)) and
    returns its row, with the load average before it (what else ran: the figures of a busy machine say so)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", CORE_WORKER, str(export), *map(str, settings), json.dumps(cases)]

    def run() -> dict:
        load = os.getloadavg()[0]
        return {**harness.run_json(cmd, env=env, cwd=scratch, timeout=600), "load": load}

    return run


def step_process(kind: str, model: str, path: str, case: dict[str, int],
                 env_extra: dict | None = None) -> dict[str, Any]:
    """STEP_WORKER for one backend in a fresh process; `path`: its PYTHONPATH; `case`: threads, batch, beams,
    new_tokens, repeat, seed and vocab."""
    env = {**os.environ, "PYTHONPATH": path, **(env_extra or {})}
    keys = ("threads", "batch", "beams", "new_tokens", "repeat", "seed", "vocab")
    out = subprocess.run([sys.executable, "-c", STEP_WORKER, kind, model, *(str(case[k]) for k in keys)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
