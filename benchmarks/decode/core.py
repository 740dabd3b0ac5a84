"""`decode-core`: checkouts A/B on the decode core, greedy and beam 4 ms/token in fresh processes (the
package docstring is its help)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.decode import __doc__ as DECODE_DOC
from tfm_export.bench import harness

ROOT = Path(__file__).resolve().parents[2]

# Runs under any checkout's tfm_export (only the runtime's public names of the last months; the in-flight cases:
# runtime.inflight's decode_in_flight and runtime.states.host_rows' open_rows, as the server steps its rows).
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
    from tfm_export.runtime.states.host_rows import open_rows
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

# name -> (sources, beams, in the server's in-flight rows)
CORE_CASES = {"greedy, batch 1": (1, 1, False), "beam 4, batch 1": (1, 4, False), "greedy, batch 8": (8, 1, False),
              "beam 4, batch 8": (8, 4, False), "in flight greedy, batch 8": (8, 1, True),
              "in flight beam 4, batch 2": (2, 4, True)}
STATIC_SLOTS = 64  # the exports' decoder_static/decoder_rows slots: the in-flight cases' rows


def _bundled(work: Path) -> Path:
    """models/num2words-de (the bundled trained model, d_model 128)."""
    return ROOT / "models" / "num2words-de" / "model.pt"


def _preset(name: str) -> Callable[[Path], Path]:
    """`tfm-export init --preset NAME` (random weights, seed 0) as WORK/NAME.pt, made once: base (the paper's
    base sizes) or tiny (smoke runs)."""

    def made(work: Path) -> Path:
        from tfm_export.model.presets import init_checkpoint

        checkpoint = work / f"{name}.pt"
        if not checkpoint.exists():
            init_checkpoint(checkpoint, name, 0)
        return checkpoint

    return made


# Exports a checkpoint (argv[1]) to argv[2] with argv[3] static slots (the in-flight cases' rows) under the checkout
# on PYTHONPATH (any of the last months')
EXPORT_WORKER = r"""
import sys
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
export_model(load_any(sys.argv[1]), sys.argv[2], ExportOptions(validate=False, static_slots=int(sys.argv[3])))
"""


def _export(weights: Path, out: Path, tree: Path, scratch: Path) -> Path:
    """`weights` exported to `out` (once) by the checkout `tree`, in a process of its own."""
    if not (out / "manifest.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", EXPORT_WORKER, str(weights), str(out), str(STATIC_SLOTS)], check=True,
                       cwd=scratch, env={**os.environ, "PYTHONPATH": str(tree)})
    return out


def _exports(weights: Path, out: Path, sides: list[tuple[str, Path]], args: argparse.Namespace) -> dict[str, Path]:
    """Each side's export of `weights`: with --own-exports its own checkout's (OUT-SIDE), else this one's (OUT)."""
    if args.own_exports:
        return {name: _export(weights, out.with_name(f"{out.name}-{name}"), tree, args.scratch) for name, tree in sides}
    shared = _export(weights, out, ROOT, args.scratch)
    return {name: shared for name, _ in sides}


CORE_MODELS: dict[str, Callable[[Path], Path]] = {"bundled": _bundled, "base": _preset("base"),
                                                  "tiny": _preset("tiny")}


def _side(text: str) -> tuple[str, Path]:
    name, _, tree = text.partition("=")
    if not (name and tree):
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT, got {text!r}")
    return name, Path(tree).resolve()


def _core_process(tree: Path, export: Path, args: argparse.Namespace, cases: dict) -> Callable[[], dict]:
    # cwd: an empty folder, so that `python -c`'s '' on sys.path finds no other checkout's package
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", CORE_WORKER, str(export), str(args.threads), str(args.new_tokens),
           str(args.repeat), json.dumps(cases)]

    def run() -> dict:
        load = os.getloadavg()[0]  # what else ran: the figures of a busy machine say so
        return {**harness.run_json(cmd, env=env, cwd=args.scratch, timeout=600), "load": load}

    return run


def core_rows(samples: dict[str, dict[str, list[dict]]], sides: list[str], cases: dict) -> list[dict[str, Any]]:
    """One row per model and case: each side's median ms/token over rounds, last / first side, and the
    median of the per-round ratios (both sides of a round shared the machine's state)."""
    first, last = sides[0], sides[-1]
    rows = []
    for model, by_side in samples.items():
        for case in cases:
            values = {s: [run["ms_per_token"][case] for run in by_side[s]] for s in sides}
            row: dict[str, Any] = {"model": model, "case": case}
            row |= {s: round(harness.median(values[s]), 3) for s in sides}
            row["ratio"] = round(harness.ratio(values[last], values[first]), 3)
            row["paired"] = round(harness.median(harness.paired_ratios(values[last], values[first])), 3)
            # the fastest round of each: another process taking a core can only slow a run down
            row["best"] = round(min(values[last]) / min(values[first]), 3)
            row["rounds"] = len(values[first])
            row["samples"] = {s: [round(v, 4) for v in values[s]] for s in sides}  # ms/token, round by round
            cpu = {s: [run["cpu_ms_per_token"][case] for run in by_side[s]] for s in sides}
            row["cpu_paired"] = round(harness.median(harness.paired_ratios(cpu[last], cpu[first])), 3)
            loads = [run["load"] for s in sides for run in by_side[s]]
            row["load"] = f"{min(loads):.1f}-{max(loads):.1f}"
            rows.append(row)
    return rows


def decode_core_main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks decode-core", description=DECODE_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=_side, action="append", help="NAME=CHECKOUT (repeatable; default: this one)")
    parser.add_argument("--models", default="bundled,base", help=f"comma-separated, of {sorted(CORE_MODELS)}")
    parser.add_argument("--cases", default="", help="only the cases whose name contains this")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default: 6)")
    parser.add_argument("--repeat", type=int, default=3, help="timed decodes per case and process (default: 3)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row (default: 32)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default: 2)")
    parser.add_argument("--work", type=Path, help="where the exports are kept (default: a temporary folder)")
    parser.add_argument("--own-exports", action="store_true",
                        help="each side decodes its own checkout's exports (default: this checkout's, for all)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--quick", action="store_true", help="smoke run: the tiny model, 1 round, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.models, args.rounds, args.repeat, args.new_tokens = "tiny", 1, 1, 4
    sides = args.side or [("after", ROOT)]
    cases = {k: v for k, v in CORE_CASES.items() if args.cases in k}
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        args.scratch = Path(tmp) / "cwd"
        args.scratch.mkdir()
        report = harness.Report("decode-core", {k: str(v) for k, v in vars(args).items() if k != "scratch"})
        samples = {}
        for model in args.models.split(","):
            exports = _exports(CORE_MODELS[model](work), work / model, sides, args)
            runs = {name: _core_process(tree, exports[name], args, cases) for name, tree in sides}
            samples[model] = harness.interleave(runs, harness.Plan(rounds=args.rounds, warmup=0),
                                                progress=lambda line, m=model: print(f"{m}: {line}", flush=True))
            for name, _ in sides:
                print(f"{model}: {name} ran {samples[model][name][0]['tfm_export']}")
        report.rows = core_rows(samples, [name for name, _ in sides], cases)
    names = [name for name, _ in sides]
    columns = [harness.Column("model"), harness.Column("case")] + [
        harness.Column(n, f"{n} ms/token", "{:.3f}") for n in names] + [
        harness.Column("ratio", f"{names[-1]} / {names[0]}", "{:.3f}"),
        harness.Column("paired", "paired (median of rounds)", "{:.3f}"),
        harness.Column("best", "best / best", "{:.3f}"),
        harness.Column("cpu_paired", "CPU time, paired", "{:.3f}"), harness.Column("load", "load average")]
    table = harness.markdown_table(report.rows, columns)
    print(f"\n{report.machine_line()}\n\n{table}")
    if args.json:
        report.write(args.json)
    if args.markdown:
        harness.write_text(args.markdown, table + "\n")
