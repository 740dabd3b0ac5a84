"""Hugging Face families on random weights, one scenario each: `families` (t5, flan-t5, bart, nllb layouts: ORT vs
transformers vs CTranslate2 vs Optimum), `marian` (an opus-mt-sized MarianMTModel: ORT vs transformers generate),
`opus-mt-folder` (writes the opus-mt-sized Marian folder `step` and `ct2-batch` read). The backends, layouts and
the step measure are tfm_export.bench.families'; exports of one family folder (`big-models`, `exports`) are
benchmarks/exports.py."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import MarianConfig, MarianMTModel

from tfm_export.bench import fixtures, harness
from tfm_export.bench.families import FIRST_ID, FULL, OPUS_MT, Backends, measure
from tfm_export.bench.harness import machine_info
from tfm_export.bench.optimum_client import optimum_versions
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export


FAMILIES_DOC = r"""ORT (tfm-export) vs transformers' generate vs CTranslate2 (vs Optimum) on Hugging Face families
(random weights).

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
    parser = argparse.ArgumentParser(description=FAMILIES_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
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


# ORT (tfm-export) vs transformers' own generate on an opus-mt sized MarianMT (random weights).
#
#     .venv/bin/python -m benchmarks marian [--threads 2] [--repeat 3] [--num-beams 4]
#
# Both decode 64 new tokens (EOS ignored; greedy, or beam search with --num-beams) for batch 1, 32
# source tokens, interleaved in one run; per-token time = (t(64 tokens) - t(1 token)) / 63 for both,
# so encoder and set-up cancel.
def marian_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--num-beams", type=int, default=1, help="beam search with this many beams on both sides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hf = MarianMTModel(MarianConfig(**OPUS_MT)).eval()
    src = torch.randint(1, 58000, (1, 32))
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(Path(tmp) / "hf")
        export_s = harness.timed(lambda: export_model(load_any(Path(tmp) / "hf"), Path(tmp) / "onnx",
                                                      ExportOptions(validate=False)))
        ort_model = open_export(Path(tmp) / "onnx", "cpu", RuntimeOptions(intra_op_threads=args.threads))
        n = args.new_tokens

        def hf_run(k: int):
            return lambda: hf.generate(input_ids=src, num_beams=args.num_beams, do_sample=False, max_new_tokens=k,
                                       min_new_tokens=k)

        def ort_call(k: int):
            return lambda: ort_model.generate_ids(src.tolist(), max_new_tokens=k, stop_at_eos=False,
                                                  config=GREEDY.replace(num_beams=args.num_beams))

        sides = {name: (lambda fn=fn: (harness.timed(fn(n)) - harness.timed(fn(1))) / (n - 1))
                 for name, fn in (("transformers", hf_run), ("ort", ort_call))}
        runs = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=1))
    per_token = {name: 1e3 * harness.median(v) for name, v in runs.items()}
    print(f"opus-mt sized Marian (random weights), batch 1, src_len 32, {n} new tokens, {args.num_beams} beam(s), "
          f"{args.threads} threads")
    print(f"export (no validation): {export_s:.1f} s")
    for name, ms in per_token.items():
        print(f"{name:>13}: {ms:.2f} ms/token")
    print(f"ORT/transformers per-token ratio: {per_token['ort'] / per_token['transformers']:.2f}")


OPUS_MT_FOLDER_DOC = r"""An opus-mt-sized Marian folder as Helsinki-NLP publishes it, with random (seeded) weights.

    .venv/bin/python -m benchmarks opus-mt-folder OUT [--vocab 15600] [--seed 0] [--tiny]

Built by the test fixtures (tests/marian_fixtures.py: marian_folder(..., **OPUS_MT)): 6 + 6 layers of
512 wide, 8 heads, ffn 2048, 512 positions, vocab.json padded to --vocab ids, real SentencePiece files,
and the published generation_config.json (num_beams 4, the pad id banned, max_length 512, renormalised
logits, forced EOS), so that an export of it decodes with beam 4 by default. --tiny: the fixtures' tiny
sizes instead (2 + 2 layers of 32 wide; the vocabulary unpadded unless --vocab is given), for smoke tests.

OUT is built in a temporary sibling folder and renamed into place; an existing OUT is never replaced.
"""


def opus_mt_folder_main() -> None:
    parser = argparse.ArgumentParser(description=OPUS_MT_FOLDER_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write (must not exist)")
    parser.add_argument("--vocab", type=int, default=None,
                        help="ids in vocab.json (default: 15600, opus-mt-en-de's size; --tiny: unpadded)")
    parser.add_argument("--seed", type=int, default=0, help="weights (default: 0)")
    parser.add_argument("--tiny", action="store_true", help="the fixtures' tiny sizes (smoke tests)")
    args = parser.parse_args()
    out = args.out
    if out.exists() or out.is_symlink():
        raise SystemExit(f"{out} exists; choose another name")
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = args.vocab if args.vocab is not None or args.tiny else 15_600
    sizes = {} if args.tiny else fixtures.marian().OPUS_MT
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    partial.chmod(0o777 & ~umask)  # mkdtemp's 0700 -> as a plain mkdir would make it
    try:
        fixtures.marian().marian_folder(partial, seed=args.seed, vocab_size=vocab, **sizes)
        if out.exists() or out.is_symlink():  # made while we built (a rename would replace an empty folder)
            raise SystemExit(f"{out} appeared while building; left as it is")
        os.rename(partial, out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    print(f"wrote {out}: d_model {config['d_model']}, {config['encoder_layers']}+{config['decoder_layers']} layers, "
          f"{config['encoder_attention_heads']} heads, ffn {config['encoder_ffn_dim']}, vocab {config['vocab_size']}; "
          f"generation_config num_beams {generation.get('num_beams')}, max_length {generation.get('max_length')}")
