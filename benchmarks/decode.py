"""Decode core and the cost of a step, checkouts A/B, one scenario each: `decode-core` (greedy and beam 4 ms/token,
the bundled model and the base preset) and `step` (checkouts, each with its export, against CTranslate2: one step
at small batches, fresh processes). What the checkouts run is tfm_export.bench.checkouts'."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from tfm_export.bench import checkouts, harness


DECODE_CORE_DOC = r"""Decode core and the cost of a step: checkouts A/B (`decode-core`, `step`), exports A/B
(`exports`), a decoder without a KV cache against one with it (`nocache`).

    python -m benchmarks decode-core --side before=/tmp/before --side after=. --models bundled,base --rounds 6

decode-core: every side is a tfm-export checkout (its own `tfm_export` on PYTHONPATH, in a fresh process
each round, run from a folder of its own so no other package shadows it); the exports are made once, by
this checkout, and read by every side (the runtimes compared on one graph), or with --own-exports by each
side's checkout (a change of the graphs measured too; the checkpoints are this checkout's). A process opens one
export and times each case (greedy / beam 4 at batch 1 and 8, 32 source and 32 new tokens, EOS ignored; and
the server's in-flight rows, every source a request of its own, greedy at 8 sources and beam 4 at 2, each row
to its EOS or 32 tokens): the best of --repeat decodes after a warm-up, in ms per new token (per step in flight).
The exports have 64 static slots (decoder_static/decoder_rows.onnx, the rows' graphs). The harness interleaves
the sides (A, B / B, A ...) and reports the medians over rounds and after / before.
"""


ROOT = Path(__file__).resolve().parents[1]


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


def _exports(weights: Path, out: Path, sides: list[tuple[str, Path]], args: argparse.Namespace) -> dict[str, Path]:
    """Each side's export of `weights`: with --own-exports its own checkout's (OUT-SIDE), else this one's (OUT)."""
    if args.own_exports:
        return {name: checkouts.export_in(tree, weights, out.with_name(f"{out.name}-{name}"), STATIC_SLOTS,
                                          args.scratch) for name, tree in sides}
    shared = checkouts.export_in(ROOT, weights, out, STATIC_SLOTS, args.scratch)
    return {name: shared for name, _ in sides}


CORE_MODELS: dict[str, Callable[[Path], Path]] = {"bundled": _bundled, "base": _preset("base"),
                                                  "tiny": _preset("tiny")}


def _side(text: str) -> tuple[str, Path]:
    name, _, tree = text.partition("=")
    if not (name and tree):
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT, got {text!r}")
    return name, Path(tree).resolve()


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
    parser = argparse.ArgumentParser(prog="python -m benchmarks decode-core", description=DECODE_CORE_DOC,
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
            settings = (args.threads, args.new_tokens, args.repeat)
            runs = {name: checkouts.core_process(tree, exports[name], settings, cases, args.scratch)
                    for name, tree in sides}
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


def side(text: str) -> tuple[str, Path, Path]:
    name, _, rest = text.partition("=")
    checkout, _, export = rest.partition(":")
    if not (name and checkout and export):
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT:EXPORT, got {text!r}")
    return name, Path(checkout).resolve(), Path(export).resolve()


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
    from tfm_export.bench.ct2_decode import converted, id_tokens

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
                    case = {"threads": args.threads, "batch": batch, "beams": beams, "new_tokens": args.new_tokens,
                            "repeat": args.repeat, "seed": args.seed, "vocab": vocab}
                    runs[name].append(checkouts.step_process(kind, model, path, case, env))
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
