"""Exports of one family folder, one scenario each: `big-models` (models over 2 GB: each export stage's peak
memory; --speed: int8/int4 against CTranslate2 int8) and `exports` (two or more exports of one folder against each
other and CTranslate2). The families' backends and the step measure are tfm_export.bench.families'."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from tfm_export.bench import harness
from tfm_export.bench.families import (
    FIRST_ID, UNK_ID, IdTokenizer, Run, build, convert_ct2, ct2_run, measure, ort_run, prepared)

BIG_MODELS_DOC = r"""Models over 2 GB: peak memory of each export stage and variant, and int8 speed against CTranslate2
int8.

    .venv/bin/python -m benchmarks big-models [--layout nllb,nllb_1.3b] [--variants float32,int8,optimize,float16] \
        [--work DIR] [--json OUT.json] [--speed] [--speed-variants int8,int4,float32] [--threads 2] [--repeat 3]

Each layout is a random folder of the published checkpoint's sizes (`families`'s FULL: facebook/nllb-200-
distilled-600M is 2.46 GB of float32 weights, nllb-200-1.3B 5.5 GB), saved by transformers. Every variant is
exported in a process of its own, as `tfm-export FOLDER -o OUT [--quantize int8|int4 | --optimize | --dtype float16]`
does it (validation included); that process reads its peak resident memory per stage from the kernel
(`VmHWM`, reset at each stage's start through /proc/self/clear_refs), so the table says where the peak comes
from. The target (issue #40): every stage within 2.5x the float32 weights' size.

--speed adds, for the first layout, the time per decoding step of the kept exports named by --speed-variants
(default: int8) against CTranslate2 int8 (compute_type="int8" on its float32 conversion of the same folder) at
batch 1 and 16, greedy and beam 4, one interleaved run (`families`'s `measure`: (t(N tokens) - t(1)) / (N - 1),
medians). `--variants ""` measures exports kept in --work without exporting again.
"""

ROOT = Path(__file__).resolve().parents[1]  # the checkout

VARIANT_OPTIONS: dict[str, dict[str, Any]] = {
    "float32": {}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}, "optimize": {"optimize": True},
    "float16": {"dtype": "float16"}}
GB = 1e9


def peak_kb() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def child(folder: Path, out: Path, variant: str) -> None:
    """One export, as the CLI makes it; prints {"stages": {name: {"s", "peak_gb"}}, ...} as JSON."""
    from tfm_export.export.exporter import ExportOptions, export_model
    from tfm_export.importers import load_any

    stages: dict[str, dict[str, float]] = {}

    def on_stage(name: str, seconds: float | None) -> None:
        if seconds is None:
            reset_peak()
        else:
            stages[name] = {"s": round(seconds, 1), "peak_gb": round(peak_kb() * 1e3 / GB, 2)}

    made: list[Any] = []  # the checkpoint, then the manifest
    on_stage("import", None)
    on_stage("import", harness.timed(lambda: made.append(load_any(folder))))
    export_s = harness.timed(lambda: made.append(
        export_model(made[0], out, ExportOptions(**VARIANT_OPTIONS[variant]), on_stage=on_stage)))
    manifest = made[1]
    data = sum(p.stat().st_size for p in out.iterdir() if ".onnx" in p.name)
    print(json.dumps({"stages": stages, "export_s": round(export_s, 1), "onnx_gb": data / GB,
                      "external": sorted(f for g in manifest.graphs.values() for f in g.external_data),
                      "validation": {k: v for k, v in (manifest.validation or {}).items() if k != "graphs"}}))


def build_folder(layout: str, folder: Path) -> float:
    """A random HF folder of the layout (reused when there); its float32 weights' size in GB."""
    prepared(folder, lambda p: build(layout, "full", 0, p))
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) / GB


def run_variant(folder: Path, out: Path, variant: str) -> dict[str, Any]:
    if out.exists():
        import shutil

        from tfm_export.manifest import has_manifest

        if not has_manifest(out):  # not an export this scenario wrote: left as it is
            raise SystemExit(f"{out} exists and holds no tfm-export export; remove it or choose another --work")
        shutil.rmtree(out)  # this scenario's own previous export of the same name (work/<layout>-<variant>)
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "big-models", "--child", str(folder), str(out), variant],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_table(rows: list[dict[str, Any]]) -> str:
    stages = ["import", "load", "export encoder", "export decoder", "transform", "validate", "quality"]
    lines = ["| layout | weights GB | variant | " + " | ".join(f"{s} peak GB" for s in stages)
             + " | max / weights | export s |", "|---|---:|---|" + "---:|" * (len(stages) + 2)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['layout']} | {r['weights_gb']:.2f} | {r['variant']} | failed: {r['error']} |")
            continue
        peaks = [r["stages"].get(s, {}).get("peak_gb") for s in stages]
        worst = max(p for p in peaks if p is not None)
        cells = ["-" if p is None else f"{p:.2f}" for p in peaks]
        lines.append(f"| {r['layout']} | {r['weights_gb']:.2f} | {r['variant']} | {' | '.join(cells)} | "
                     f"{worst / r['weights_gb']:.2f} | {r['export_s']:.0f} |")
    return "\n".join(lines)


def speed(folder: Path, exports: dict[str, Path], work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """ORT's exports (name -> folder: "int8", "int4", ...) vs CTranslate2 int8, one interleaved run per (batch,
    decoding)."""
    import ctranslate2
    import torch
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(folder)
    tokenizer = IdTokenizer(cfg, UNK_ID["nllb"])
    prepared(work / "ct2", lambda p: convert_ct2(folder, p, tokenizer))
    translator = ctranslate2.Translator(str(work / "ct2"), device="cpu", compute_type="int8", inter_threads=1,
                                        intra_threads=args.threads)

    def ct2(src: list[list[int]], k: int, beams: int) -> list[list[int]]:
        results = translator.translate_batch([tokenizer.convert_ids_to_tokens(s) for s in src], beam_size=beams,
                                             max_decoding_length=k, min_decoding_length=k)
        return [[tokenizer.index[t] for t in r.hypotheses[0]] for r in results]

    class Backends:
        family = "nllb"
        runs = {**{f"ort {name}": ort_run(path, args.threads) for name, path in exports.items()}, "ctranslate2": ct2}

        def seconds(self, name: str, src: list[list[int]], k: int, beams: int) -> float:
            return harness.timed(lambda: self.runs[name](src, k, beams))

    rows, generator = [], torch.Generator().manual_seed(0)
    for batch in (1, 16):
        src = torch.randint(FIRST_ID, cfg.vocab_size - 1, (batch, 32), generator=generator).tolist()
        for beams in (1, 4):
            result = measure(Backends(), src, beams, args, reference="ctranslate2")
            ct2_ms = result["ctranslate2"]["step_ms_p50"]
            rows.append({"batch": batch, "decoding": "greedy" if beams == 1 else f"beam {beams}",
                         **{name: round(r["step_ms_p50"], 2) for name, r in result.items()},
                         **{f"{name} / ct2": round(r["step_ms_p50"] / ct2_ms, 2) for name, r in result.items()
                            if name != "ctranslate2"},
                         **{f"{name} same rows": r["same_as_ctranslate2"] for name, r in result.items()
                            if name != "ctranslate2"}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def big_models_main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=BIG_MODELS_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="nllb,nllb_1.3b", help="`families` FULL layouts, comma-separated")
    parser.add_argument("--variants", default="float32,int8,optimize,float16",
                        help=f"comma-separated, of {', '.join(VARIANT_OPTIONS)}")
    parser.add_argument("--work", type=Path, default=None, help="keep the folders here and reuse them")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    parser.add_argument("--speed", action="store_true",
                        help="ms/step of --speed-variants against CTranslate2 int8 (first layout)")
    parser.add_argument("--speed-variants", default="int8",
                        help="the kept exports WORK/LAYOUT-VARIANT that --speed measures, comma-separated")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op and CTranslate2 threads")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per backend for --speed")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row for --speed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfm-big-") as tmp:
        work, rows = args.work or Path(tmp), []
        for layout in args.layout.split(","):
            folder = work / f"{layout}-hf"
            weights = build_folder(layout, folder)
            print(f"{layout}: {weights:.2f} GB of float32 weights", flush=True)
            for variant in [v for v in args.variants.split(",") if v]:  # none: --speed on the kept exports
                row = {"layout": layout, "weights_gb": weights, "variant": variant,
                       **run_variant(folder, work / f"{layout}-{variant}", variant)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        print(memory_table(rows))
        speed_rows = []
        if args.speed:
            first = args.layout.split(",")[0]
            exports = {v: work / f"{first}-{v}" for v in args.speed_variants.split(",")}
            speed_rows = speed(work / f"{first}-hf", exports, work, args)
        if args.json:
            args.json.write_text(json.dumps({"memory": rows, "speed": speed_rows}, indent=2) + "\n")


EXPORTS_DOC = r"""Two or more exports of one family folder against each other and CTranslate2, interleaved in one
process.

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
        tokenizer = IdTokenizer(AutoConfig.from_pretrained(root / "hf"), UNK_ID[family])
        self.family = family
        self.runs: dict[str, Run] = {"ctranslate2": ct2_run(root / "ct2", tokenizer, threads)}
        self.runs |= {name: ort_run(root / name, threads) for name in exports}

    def seconds(self, name: str, src: list[list[int]], k: int, beams: int) -> float:
        return harness.timed(lambda: self.runs[name](src, k, beams))


def exports_main() -> None:
    import torch

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
