r"""One decoder step at small batches: code versions (each with its export) against CTranslate2, interleaved.

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

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from tfm_export.bench import harness

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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    from benchmarks.serving.ct2_batch import converted, id_tokens

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


# `exports`, this module's second scenario: its help
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

