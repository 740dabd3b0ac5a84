"""Decode core and the cost of a step: checkouts A/B (`decode-core`, `step`), exports A/B (`exports`), a
decoder without a KV cache against one with it (`nocache`).

    python -m benchmarks decode-core --side before=/tmp/before --side after=. --models bundled,base --rounds 6

decode-core: every side is a tfm-export checkout (its own `tfm_export` on PYTHONPATH, in a fresh process
each round, run from a folder of its own so no other package shadows it); the exports are made once, by
this checkout, and read by every side (the runtimes compared on one graph), or with --own-exports by each
side's checkout (a change of the graphs measured too; the checkpoints are this checkout's). A process opens one
export and times each case (greedy / beam 4 at batch 1 and 8, 32 source and 32 new tokens, EOS ignored):
the best of --repeat decodes after a warm-up, in ms per new token. The harness interleaves the sides
(A, B / B, A ...) and reports the medians over rounds and after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable


import torch

from benchmarks import fixtures
from tfm_export.bench import harness
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.module_export import export_with_adapter, load_adapter
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

# Runs under any checkout's tfm_export (only the runtime's public names of the last months).
CORE_WORKER = r"""
import json, random, sys, time
import tfm_export
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
folder, threads, new_tokens, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cases = json.loads(sys.argv[5])
model = open_export(folder, "cpu", RuntimeOptions(intra_op_threads=threads, cuda_graph=False, spin_wait=False),
                    verify=False)
rng = random.Random(0)
out = {"tfm_export": tfm_export.__file__, "ms_per_token": {}, "cpu_ms_per_token": {}}
for name, (batch, beams) in cases.items():
    sources = [[rng.randrange(4, model.config.src_vocab_size - 1) for _ in range(32)] for _ in range(batch)]
    config = GREEDY.replace(num_beams=beams)
    run = lambda: model.generate_ids(sources, new_tokens, stop_at_eos=False, config=config)
    run()  # warm-up
    times, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - start); cpu.append(time.process_time() - start_cpu)
    out["ms_per_token"][name] = 1e3 * min(times) / new_tokens
    # CPU time of all the process's threads: the work done, which another process taking a core does not add to
    out["cpu_ms_per_token"][name] = 1e3 * min(cpu) / new_tokens
print(json.dumps(out))
"""

CORE_CASES = {"greedy, batch 1": (1, 1), "beam 4, batch 1": (1, 4), "greedy, batch 8": (8, 1),
              "beam 4, batch 8": (8, 4)}


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


# Exports a checkpoint (argv[1]) to argv[2] under the checkout on PYTHONPATH (any of the last months')
EXPORT_WORKER = r"""
import sys
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
export_model(load_any(sys.argv[1]), sys.argv[2], ExportOptions(validate=False))
"""


def _export(weights: Path, out: Path, tree: Path, scratch: Path) -> Path:
    """`weights` exported to `out` (once) by the checkout `tree`, in a process of its own."""
    if not (out / "manifest.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", EXPORT_WORKER, str(weights), str(out)], check=True, cwd=scratch,
                       env={**os.environ, "PYTHONPATH": str(tree)})
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks decode-core", description=__doc__,
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


# --- step_ab --------------------------------------------------------------------------------------

STEP_DOC = r"""One decoder step at small batches: code versions (each with its export) against CTranslate2, interleaved.

    python -m benchmarks step HF_FOLDER --ct2-dir CT2_DIR --side before=../before:opus-before \
        --side after=.:opus-after [--variant int8=.:opus-int8] [--ct2-int8] [--num-beams 1,4] [--batch 1,16] \
        [--rounds 5] [--threads 2] [--json OUT]

HF_FOLDER: a Marian folder with vocab.json (`python -m benchmarks opus-mt-folder`); CT2_DIR: its CTranslate2
conversion (float32; made there by ct2-batch's converter when missing). Each --side NAME=CHECKOUT:EXPORT
is a tfm-export checkout (its `tfm_export` on PYTHONPATH) with an export of HF_FOLDER made by that
checkout. Every round runs, for each decoding, CTranslate2 and every side once, each in a fresh
process, in an order that rotates from round to round. A process decodes one random source of 32
tokens (the same for all) after a warm-up: --new-tokens new tokens and 1 new token, alternately,
--repeat times (EOS banned until the last step: every backend does the same steps); its step time is
the median of (t(N) - t(1)) / (N - 1), so the encoder and set-up cancel, and its best step time
(min t(N) - min t(1)) / (N - 1). The table prints the median
over rounds and each side's ratio to CTranslate2 and to the first side; the N-token ids of every side
must equal the first side's (else it exits with status 1), and their agreement with CTranslate2's
is shown (random weights: near-ties may differ at float precision). A --variant (a reduced-precision
export, say) is measured like a side but its ids need not be equal; --ct2-int8 adds CTranslate2 with
compute_type int8 (the row quantized exports are compared with). --batch takes a list: each batch size
is its own interleaved set of rounds.
"""


WORKER = r"""
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


def side(text: str) -> tuple[str, Path, Path]:
    name, _, rest = text.partition("=")
    checkout, _, export = rest.partition(":")
    if not (name and checkout and export):
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT:EXPORT, got {text!r}")
    return name, Path(checkout).resolve(), Path(export).resolve()


def step_measure(kind: str, model: str, path: str, args: argparse.Namespace, batch: int, beams: int, vocab: int,
            env_extra: dict | None = None) -> dict:
    """One backend in a fresh process; `path`: its PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": path, **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", WORKER, kind, model, str(args.threads), str(batch), str(beams),
                          str(args.new_tokens), str(args.repeat), str(args.seed), str(vocab)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def step_main() -> int:
    parser = argparse.ArgumentParser(description=STEP_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_folder", type=Path, help="the Marian folder the exports and CT2_DIR were made from")
    parser.add_argument("--ct2-dir", type=Path, required=True, help="its CTranslate2 conversion (made when missing)")
    parser.add_argument("--side", type=side, action="append", required=True, help="NAME=CHECKOUT:EXPORT (repeatable)")
    parser.add_argument("--num-beams", default="1,4", help="decodings, comma-separated (1: greedy; default: 1,4)")
    parser.add_argument("--variant", type=side, action="append", default=[],
                        help="NAME=CHECKOUT:EXPORT measured like a side, its ids free to differ (repeatable)")
    parser.add_argument("--ct2-int8", action="store_true", help="also CTranslate2 with compute_type int8")
    parser.add_argument("--batch", default="1", help="sources per call, comma-separated (default: 1)")
    parser.add_argument("--new-tokens", type=int, default=32, help="N (default: 32)")
    parser.add_argument("--repeat", type=int, default=7, help="(t(N), t(1)) pairs per process (default: 7)")
    parser.add_argument("--rounds", type=int, default=5, help="processes per backend and decoding (default: 5)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every backend (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="the source ids (default: 0)")
    parser.add_argument("--ct2-huge-pages", action="store_true",
                        help="also CTranslate2 with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (its weights on huge pages, "
                             "as tfm-export's runtime puts its sessions' weights)")
    parser.add_argument("--json", type=Path, help="also write every sample here (must not exist)")
    args = parser.parse_args()
    if args.json and args.json.exists():
        raise SystemExit(f"{args.json} exists; choose another name")
    from benchmarks.serving import converted, id_tokens

    converted(args.hf_folder, args.ct2_dir)
    id_tokens(args.hf_folder, args.ct2_dir)  # the same vocabulary, or SystemExit
    vocab = len(json.loads((args.hf_folder / "vocab.json").read_text(encoding="utf-8")))
    ct2 = f"{args.hf_folder.resolve()}::{args.ct2_dir.resolve()}"
    backends = {"ctranslate2": ("ct2", f"{ct2}::float32", "", {})}
    if args.ct2_int8:
        backends["ct2-int8"] = ("ct2", f"{ct2}::int8", "", {})
    if args.ct2_huge_pages:  # glibc's malloc on transparent huge pages, set before the process starts
        backends["ct2-hugepages"] = ("ct2", f"{ct2}::float32", "", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
    backends |= {name: ("ort", str(export), str(checkout), {})
                 for name, checkout, export in args.side + args.variant}
    results: dict = {}
    failed = False
    for batch in map(int, args.batch.split(",")):
        for beams in map(int, args.num_beams.split(",")):
            label = (f"beam {beams}" if beams > 1 else "greedy") + f", batch {batch}"
            runs = results[label] = {name: [] for name in backends}
            names = list(backends)
            for order in harness.rotation(names, args.rounds):
                print(f"{os.getloadavg()[0]:.1f} load; ", end="", flush=True)
                for name in order:
                    kind, model, path, env = backends[name]
                    runs[name].append(step_measure(kind, model, path, args, batch, beams, vocab, env))
                    print(f"{name} {runs[name][-1]['step_ms']:.2f}  ", end="", flush=True)
                print()
            failed |= report(label, runs, [name for name, _, _ in args.side], [name for name, _, _ in args.variant])
    if args.json:
        harness.write_text(args.json, json.dumps(results, indent=1))
    return 1 if failed else 0


def report(label: str, runs: dict, sides: list[str], variants: list[str]) -> bool:
    """Print the medians and ratios; True when a side's ids differ from the first side's."""
    median = {name: harness.median([r["step_ms"] for r in rs]) for name, rs in runs.items()}
    best = {name: min(r["best_ms"] for r in rs) for name, rs in runs.items()}  # the fastest process's
    ids = {name: rs[0]["ids"] for name, rs in runs.items()}
    print(f"\n{label}: ms per step, the median of {len(runs[sides[0]])} rounds "
          f"(each a process's median) and the best step time of any round (under other load the medians move)")
    failed = False
    for name in median:
        same = sum(a == b for a, b in zip(ids[name], ids["ctranslate2"])) / len(ids[name])
        line = (f"  {name:14s} median {median[name]:7.2f} ms, / CTranslate2 {median[name] / median['ctranslate2']:5.3f}"
                f"  best {best[name]:7.2f} ms, / CTranslate2 {best[name] / best['ctranslate2']:5.3f}")
        if "ct2-int8" in median and name != "ctranslate2":
            line += f"  / CT2 int8 {median[name] / median['ct2-int8']:5.3f}"
        if name in sides + variants:
            line += (f"  / {sides[0]} {median[name] / median[sides[0]]:5.3f} (best {best[name] / best[sides[0]]:5.3f})"
                     f"  rows as CTranslate2's {same:.0%}")
            if name in sides and ids[name] != ids[sides[0]]:
                line += f"  IDS DIFFER FROM {sides[0]}'s"
                failed = True
        print(line + f"  rounds {[round(r['step_ms'], 2) for r in runs[name]]}")
    return failed


# --- exports_ab -----------------------------------------------------------------------------------

EXPORTS_DOC = r"""Two or more exports of one family folder against each other and CTranslate2, interleaved in one process.

    .venv/bin/python -m benchmarks exports WORK/bart-full-seed0 --family bart \
        --exports onnx-prev,onnx [--batch 16] [--src-len 512] [--num-beams 4] [--new-tokens 32] [--repeat 3]

For A/B checks of an export change (a graph form, a runtime path) where `families`'s four backends
would take too long: WORK/<family>-<scale>-seed<seed> is a folder `benchmarks families --work` made (hf/, ct2/
and the exports, named relative to it or absolute). Sources are `families`'s random ids; every row
decodes exactly --new-tokens tokens (EOS banned until then). Timed by families.measure: the time per
step is (t(N) - t(1)) / (N - 1), median over the repeats, each repeat running every backend once; the
rows are compared with CTranslate2's.
"""

class Exports:
    """CTranslate2 and each export as families.measure's backends."""

    def __init__(self, root: Path, family: str, exports: list[str], threads: int):
        from transformers import AutoConfig

        from benchmarks.families.backends import IdTokenizer, Run, ct2_run, ort_run
        from benchmarks.families.layouts import UNK_ID

        tokenizer = IdTokenizer(AutoConfig.from_pretrained(root / "hf"), UNK_ID[family])
        self.family = family
        self.runs: dict[str, Run] = {"ctranslate2": ct2_run(root / "ct2", tokenizer, threads)}
        self.runs |= {name: ort_run(root / name, threads) for name in exports}

    def seconds(self, name: str, src: list[list[int]], k: int, beams: int) -> float:
        return harness.timed(lambda: self.runs[name](src, k, beams))


def exports_main() -> None:
    import torch
    from transformers import AutoConfig

    from benchmarks.families.layouts import FIRST_ID, UNK_ID
    from benchmarks.families.steps import measure
    parser = argparse.ArgumentParser(description=EXPORTS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a family folder of `benchmarks families --work` (hf/, ct2/, exports)")
    parser.add_argument("--family", required=True, choices=sorted(UNK_ID), help="the folder's family")
    parser.add_argument("--exports", required=True, help="export folders to compare, comma-separated")
    parser.add_argument("--batch", type=int, default=16, help="sources per call (default: 16)")
    parser.add_argument("--src-len", type=int, default=32, help="source tokens per row (default: 32)")
    parser.add_argument("--num-beams", type=int, default=4, help="beams (1: greedy; default: 4)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row (default: 32)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every backend (default: 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="source ids (default: 0)")
    args = parser.parse_args()
    vocab = AutoConfig.from_pretrained(args.root / "hf").vocab_size
    gen = torch.Generator().manual_seed(args.seed)
    src = torch.randint(FIRST_ID, vocab - 1, (args.batch, args.src_len), generator=gen).tolist()
    backends = Exports(args.root, args.family, args.exports.split(","), args.threads)
    result = measure(backends, src, args.num_beams, args, reference="ctranslate2")  # type: ignore[arg-type]
    ct2 = result["ctranslate2"]["step_ms_p50"]
    for name, r in result.items():
        print(f"{name:24s} {r['step_ms_p50']:8.1f} ms/step  tokens/s vs CTranslate2 {ct2 / r['step_ms_p50']:5.2f}x  "
              f"rows as CTranslate2's {r['same_as_ctranslate2']:.0%}  samples {[round(v, 1) for v in r['step_ms']]}")


# --- nocache_vs_cache -----------------------------------------------------------------------------

NOCACHE_DOC = r"""What a decoder without a KV cache costs (#42): the tutorial model of ../shared/seeds/000, exported both ways.

    .venv/bin/python -m benchmarks nocache [--threads 2] [--repeat 5] [--json out.json]

Seed 000's model (tests/reference_models.TutorialTransformer at its tutorial size: d_model 512, 6+6
layers, 8 heads, d_ff 2048; random weights, vocabularies of 8,000) is exported by the native path
(load_any on its state_dict, decoder.onnx with a KV cache) and by the generic one (`tfm-export MODEL.pt
--trust-pickle --adapter benchmarks.decode:ADAPTER`: export_with_adapter with this module's ADAPTER, so
decoder_nocache.onnx, which reads the whole prefix every step). Both are timed on CPU in one
interleaved run: batch 1 and 8 (sources of 24 tokens), greedy and beam search with 4 beams, 16 and 64
new tokens (EOS ignored: stop_at_eos=False, every row decodes all of them). Each round times every
(export, batch, decoding, N) in turn; per step, (t(N) - t(1)) / (N - 1), so the encoder and set-up
cancel; ms per generated token = that / batch (a beam search still yields one token per source per
step). Medians over --repeat rounds; both exports' ids are checked equal before timing.

A smoke run (tiny model, one round): --tiny --repeat 1.
"""

PAD, BOS, EOS = 0, 1, 2
# the tutorial's own size (its defaults), and a tiny one for a smoke run
SIZES = {"tutorial": dict(embed_size=512, num_layers=6, forward_expansion=4, heads=8, vocab=8000),
         "tiny": dict(embed_size=32, num_layers=2, forward_expansion=2, heads=4, vocab=60)}
DECODINGS = {"greedy": 1, "beam 4": 4}  # name -> num_beams
BATCHES = (1, 8)
NEW_TOKENS = (16, 64)
SRC_LEN = 24
MAX_LEN = 96  # positions: the source, or BOS + 64 new tokens


def encode(model: Any, src_ids, src_mask):
    return model.encoder(src_ids, src_mask[:, None, None, :])


def decode(model: Any, tgt_ids, memory, src_mask):
    return model.decoder(tgt_ids, memory, src_mask[:, None, None, :], model.make_trg_mask(tgt_ids))


# What `--adapter benchmarks.decode:ADAPTER` names; vocabularies set per size.
ADAPTER = SimpleNamespace(encode=encode, decode=decode, bos_id=BOS, eos_id=EOS, src_pad_id=PAD, tgt_pad_id=PAD,
                          max_len=MAX_LEN)


def exports(size: dict[str, int], folder: Path) -> dict[str, Path]:
    """The model exported natively (KV cache) and through the adapter (no cache); the folders by name."""
    torch.manual_seed(0)
    vocab = size["vocab"]
    module = fixtures.reference_models().TutorialTransformer(vocab, vocab, PAD, PAD, embed_size=size["embed_size"], num_layers=size["num_layers"],
                                 forward_expansion=size["forward_expansion"], heads=size["heads"],
                                 max_length=MAX_LEN).eval()
    torch.save(module.state_dict(), folder / "model.pt")
    checkpoint = load_any(folder / "model.pt", options={"heads": size["heads"], "src_pad_id": PAD, "bos_id": BOS,
                                                        "eos_id": EOS})
    export_model(checkpoint, folder / "cache", ExportOptions(validate=False))
    export_with_adapter(module, load_adapter("benchmarks.decode:ADAPTER"), folder / "nocache", src_vocab_size=vocab,
                        tgt_vocab_size=vocab, validate=False)
    return {"KV cache": folder / "cache", "no cache": folder / "nocache"}


def runner(model: Any, src: list[list[int]], beams: int) -> Callable[[int], Callable[[], Any]]:
    """k -> a call decoding exactly k new tokens per source."""
    config = GREEDY.replace(num_beams=beams)
    return lambda k: lambda: model.generate_ids(src, max_new_tokens=k, stop_at_eos=False, config=config)


def nocache_measure(models: dict[str, Any], vocab: int, repeat: int) -> list[dict[str, Any]]:
    """Every (export, batch, decoding, N), interleaved round by round; medians of the per-step times."""
    gen = torch.Generator().manual_seed(1)
    cases = []
    for batch in BATCHES:
        src = torch.randint(3, vocab, (batch, SRC_LEN), generator=gen).tolist()
        for decoding, beams in DECODINGS.items():
            runs = {name: runner(model, src, beams) for name, model in models.items()}
            same = len({json.dumps(run(max(NEW_TOKENS))()) for run in runs.values()}) == 1  # and a warm-up
            for n in NEW_TOKENS:
                cases += [{"export": name, "batch": batch, "decoding": decoding, "new_tokens": n, "run": run,
                           "same_ids": same, "step_s": []} for name, run in runs.items()]
    for _ in range(repeat):
        for case in cases:
            n, run = case["new_tokens"], case["run"]
            case["step_s"].append((harness.timed(run(n)) - harness.timed(run(1))) / (n - 1))
    rows = []
    for case in cases:
        step_ms = 1e3 * harness.median(case.pop("step_s"))
        case.pop("run")
        rows.append({**case, "step_ms_p50": step_ms, "ms_per_token_p50": step_ms / case["batch"]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per (batch, decoding, N), both exports' ms per generated token and their ratio."""
    lines = ["| batch | decoding | new tokens | KV cache ms/token | no cache ms/token | no cache / KV cache |",
             "|---:|---|---:|---:|---:|---:|"]
    keyed = {(r["batch"], r["decoding"], r["new_tokens"], r["export"]): r["ms_per_token_p50"] for r in rows}
    for batch in BATCHES:
        for decoding in DECODINGS:
            for n in NEW_TOKENS:
                cache, nocache = keyed[batch, decoding, n, "KV cache"], keyed[batch, decoding, n, "no cache"]
                lines.append(f"| {batch} | {decoding} | {n} | {cache:.2f} | {nocache:.2f} | {nocache / cache:.2f} |")
    return "\n".join(lines)


def nocache_main() -> None:
    parser = argparse.ArgumentParser(description=NOCACHE_DOC.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of the tutorial's size (smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = SIZES["tiny" if args.tiny else "tutorial"]
    with tempfile.TemporaryDirectory() as tmp:
        folders = exports(size, Path(tmp))
        options = RuntimeOptions(intra_op_threads=args.threads)
        models = {name: open_export(folder, "cpu", options) for name, folder in folders.items()}
        rows = nocache_measure(models, size["vocab"], args.repeat)
    print(f"seed 000's tutorial model ({'tiny' if args.tiny else 'tutorial size'}: {size}), random weights, "
          f"src_len {SRC_LEN}, CPU, {args.threads} threads, medians of {args.repeat} interleaved rounds")
    print(table(rows))
    if not all(r["same_ids"] for r in rows):
        print("note: the two exports' ids differ somewhere (random weights: near ties at float precision)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


# --- gpu (was gpu.sh) -----------------------------------------------------------------------------

GPU_DOC = r"""The CUDA section of BENCHMARKS.md: `tfm-export bench --device cuda` on transformer-base and on an
opus-mt-sized Marian folder, batch 1 and 16, greedy and beam 4, with the CUDA-graph and float16 exports as
--also rows of the same run, then ORT's profile of one decoder step.

    python -m benchmarks gpu OUT_DIR [--repeat 5] [--models base,opus]

Needs a CUDA GPU, onnxruntime-gpu and the `export` extra; writes OUT_DIR/<model>-beam<N>.json and
OUT_DIR/profile-<model>-<variant>.txt. The exports go to a temporary folder, removed at the end.
"""

# the three exports of one model: the growing cache (IOBinding), the static decoder (CUDA graphs), float16
GPU_VARIANTS = {"f32": (), "graph": ("--cuda-graph", "--static-slots", "128"),
                "f16": ("--dtype", "float16", "--cuda-graph", "--static-slots", "128")}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfm_export", *args]


def gpu_main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=GPU_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the reports go (created)")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved repeats of each bench (default: 5)")
    parser.add_argument("--models", default="base,opus", help="base, opus or both (default: base,opus)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        work = Path(tmp)
        weights = {"base": work / "base.pt", "opus": work / "opus"}
        subprocess.run(_cli("init", str(weights["base"]), "--preset", "base", "--seed", "0"), check=True)
        subprocess.run([sys.executable, "-m", "benchmarks", "opus-mt-folder", str(weights["opus"])], check=True,
                       cwd=ROOT)
        for model in args.models.split(","):
            exports = {v: work / f"{model}-{v}" for v in GPU_VARIANTS}
            # validation runs on the CPU: the three exports side by side
            procs = [subprocess.Popen(_cli(str(weights[model]), "-o", str(out), "--no-validate", *GPU_VARIANTS[v]))
                     for v, out in exports.items()]
            if any(p.wait() for p in procs):
                raise SystemExit(f"an export of {model} failed")
            for beams in (1, 4):
                subprocess.run(_cli("bench", str(exports["f32"]), "--model", str(weights[model]), "--device", "cuda",
                                    "--batch", "1,16", "--src-len", "32", "--new-tokens", "64", "--num-beams",
                                    str(beams), "--repeat", str(args.repeat), "--also", str(exports["graph"]),
                                    "--also", str(exports["f16"]), "--json", str(args.out / f"{model}-beam{beams}.json")),
                               check=True)
            for variant in ("f32", "f16"):
                with open(args.out / f"profile-{model}-{variant}.txt", "w") as out:
                    subprocess.run([sys.executable, "-m", "benchmarks", "profile-decoder", str(exports[variant]),
                                    "--device", "cuda", "--steps", "200"], check=True, stdout=out, cwd=ROOT)
