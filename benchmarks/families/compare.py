r"""ORT (tfm-export) vs transformers' generate vs CTranslate2 (vs Optimum) on Hugging Face families (random weights).

    .venv/bin/python -m benchmarks families --family bart [--scale full] [--batch 1,16] [--num-beams 4] \
        [--new-tokens 32] [--src-len 32] [--threads 2] [--repeat 5] [--work DIR] [--json OUT.json] \
        [--optimum-python /work/optimum-venv/bin/python] [--optimize]

Each family is built at its published checkpoint's sizes (FULL below; --scale tiny shrinks it for
smoke tests) with transformers' own config class and random, seeded weights, saved with
save_pretrained (no tokenizer: sources are random ids, special ids avoided), exported with the
library call `tfm-export FOLDER -o OUT` makes (validation included) and converted with CTranslate2's
TransformersConverter (float32; its vocabulary comes from a stand-in tokenizer that names the ids).
With --optimum-python, Hugging Face Optimum's ORTModelForSeq2SeqLM is a fourth backend: Optimum's
ONNX export needs transformers < 4.58, so it runs in a venv of its own (optimum-onnx[onnxruntime]),
as optimum_worker.py, one process per family that exports the same folder (Optimum's default: past key
values, decoder and decoder-with-past) and answers generate requests over a pipe, timed in there.
With --work the folders are kept and a rerun reuses them.

Every backend does the same work: `--new-tokens` new tokens per row (EOS banned until then: min ==
max new tokens), greedy and beam search (--num-beams), for each batch size, on `--threads` threads.
Per (family, decoding, batch) every backend runs once as a warm-up (its output lengths are checked),
then each repeat runs every backend in turn. The time per decoding step (one new token for each
row of the batch; at batch 1 the time per generated token) is (t(N tokens) - t(1 token)) / (N - 1),
so the encoder and set-up cancel, as in `marian`; the table shows its median over
the repeats, and the ORT/transformers, ORT/CTranslate2 and ORT/Optimum ratios of the medians (below 1:
ORT is faster).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
import argparse
import json
import tempfile
import torch
import transformers

from benchmarks.families.backends import Backends
from benchmarks.families.layouts import FIRST_ID, FULL
from benchmarks.families.steps import measure
from benchmarks.optimum_client import optimum_versions
from tfm_export.bench.harness import machine_info

BACKENDS = ("transformers", "ort", "ctranslate2", "optimum")


def ratio(backends: dict[str, Any], a: str, b: str) -> float | None:
    if a not in backends or b not in backends:
        return None
    return backends[a]["step_ms_p50"] / backends[b]["step_ms_p50"]


def table(rows: list[dict[str, Any]]) -> str:
    def cell(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| family | decoding | batch | transformers ms/step | ORT ms/step | CT2 ms/step | Optimum ms/step "
             "| ORT/transformers | ORT/CT2 | ORT/Optimum |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = r["backends"]
        ms = [cell(b[name]["step_ms_p50"] if name in b else None, 2) for name in BACKENDS]
        ratios = [cell(r[f"ort_vs_{name}"], 2) for name in BACKENDS if name != "ort"]
        lines.append(f"| {r['family']} | {r['decoding']} | {r['batch']} | {' | '.join(ms)} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def versions(optimum_python: Path | None) -> dict[str, str | None]:
    try:
        import ctranslate2

        ct2 = ctranslate2.__version__
    except ImportError:
        ct2 = None
    return {"transformers": transformers.__version__, "ctranslate2": ct2} | optimum_versions(optimum_python)



def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="bart",
                        help=f"one or more of {', '.join(FULL)}, comma-separated (default: bart)")
    parser.add_argument("--scale", choices=("full", "tiny"), default="full",
                        help="full: the published checkpoint's sizes; tiny: 2+2 layers, d_model 64, 512 ids "
                             "(smoke tests)")
    parser.add_argument("--batch", default="1,16", help="batch sizes, comma-separated (default: 1,16)")
    parser.add_argument("--num-beams", type=int, default=4,
                        help="beams of the beam-search runs; greedy always runs too (1: greedy only; default: 4)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row, EOS banned (default: 32)")
    parser.add_argument("--src-len", type=int, default=32, help="source tokens per row (default: 32)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads, ORT intra-op threads, CTranslate2 intra_threads (default: 2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds of every backend (default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="weights and source ids (default: 0)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the HF, ONNX and CTranslate2 folders here (FAMILY-SCALE-seedN/) and reuse them "
                             "on reruns (default: a temporary folder, deleted at the end)")
    parser.add_argument("--no-validate", action="store_true", help="export without the ORT-vs-eager validation")
    parser.add_argument("--optimize", action="store_true",
                        help="the ORT rows run an export made with --optimize (ORT's fusions), kept in onnx-optimize/")
    parser.add_argument("--json", type=Path, default=None, help="also write the samples and medians to this file")
    parser.add_argument("--optimum-python", type=Path, default=None,
                        help="python of a venv with optimum-onnx[onnxruntime] (it needs transformers < 4.58), e.g. "
                             "/work/optimum-venv/bin/python: adds Optimum's ORTModelForSeq2SeqLM as a backend, run by "
                             "optimum_worker.py (default: none, Optimum skipped)")
    return parser


def family_rows(backends: Backends, family: str, args: argparse.Namespace, batches: list[int],
                decodings: list[int]) -> list[dict[str, Any]]:
    """One row per batch and decoding of one family's backends (each printed as it is measured)."""
    rows = []
    generator = torch.Generator().manual_seed(args.seed)
    for batch in batches:
        src = torch.randint(FIRST_ID, backends.vocab_size - 1, (batch, args.src_len),
                            generator=generator).tolist()
        for beams in decodings:
            result = measure(backends, src, beams, args)
            rows.append({"family": family, "decoding": "greedy" if beams == 1 else f"beam {beams}",
                         "num_beams": beams, "batch": batch, "backends": result,
                         **{f"ort_vs_{name}": ratio(result, "ort", name) for name in BACKENDS
                            if name != "ort"}})
            print(json.dumps({k: rows[-1][k] for k in ("family", "decoding", "batch")}
                             | {name: round(r["step_ms_p50"], 3) for name, r in result.items()}
                             | {f"{name}_same_rows": r["same_as_transformers"] for name, r in result.items()
                                if name != "transformers"}), flush=True)
    return rows


def print_machine(machine: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"CPU {machine['cpu']}, {machine['cores']} cores, {args.threads} threads; torch {machine['torch']}, "
          f"onnxruntime {machine['onnxruntime']}, ctranslate2 {machine['ctranslate2']}, "
          f"transformers {machine['transformers']}", flush=True)
    if args.optimum_python:
        print(f"Optimum: optimum {machine['optimum']}, optimum-onnx {machine['optimum_onnx']}, transformers "
              f"{machine['optimum_transformers']}, onnxruntime {machine['optimum_onnxruntime']}", flush=True)


def families_main() -> None:
    cli = parser()
    args = cli.parse_args()
    families = args.family.split(",")
    unknown = [f for f in families if f not in FULL]
    if unknown:
        cli.error(f"unknown family {', '.join(unknown)}; choose from {', '.join(FULL)}")
    if args.new_tokens < 2:
        cli.error("--new-tokens must be 2 or more (the per-step time is (t(N) - t(1)) / (N - 1))")
    batches = [int(b) for b in args.batch.split(",")]
    decodings = sorted({1, args.num_beams})
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    machine = {**machine_info(args.threads), **versions(args.optimum_python)}
    print_machine(machine, args)
    with tempfile.TemporaryDirectory(prefix="tfm-families-") as tmp:
        work = args.work or Path(tmp)
        rows, made, skipped = [], {}, {}
        for family in families:
            backends = Backends(family, args, work / f"{family}-{args.scale}-seed{args.seed}")
            made[family], skipped[family] = backends.made, backends.skipped
            print(f"{family} ({args.scale}): " + ", ".join(
                f"{k} {'reused' if v is None else f'{v:.1f}'}" for k, v in backends.made.items()), flush=True)
            rows += family_rows(backends, family, args, batches, decodings)
            backends.close()
    print(f"\n{args.scale} sizes, random weights, src_len {args.src_len}, {args.new_tokens} new tokens (EOS banned), "
          f"median of {args.repeat}; ms/step = (t({args.new_tokens}) - t(1)) / {args.new_tokens - 1}\n")
    print(table(rows))
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"machine": machine, "settings": settings, "prepared_s": made,
                                         "skipped": skipped, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")
