"""Speculative greedy decoding at batch 1 (runtime.decode.speculative): ms per generated token with and without
it, interleaved, and the acceptance rate; the ids are checked equal to plain greedy's on every case. Each
proposer runs twice: with the draft-length policy as it ships (runtime.decode.draft_length: transformers' schedule
and the switch-off, which stops speculating for a while when it does not pay) and with the schedule alone (a
second opening of the model, its policy made with switch_off=False). A first table gives the cost of one decoder
call over 1 + k positions against a plain step's: what a check of k drafted ids costs on this machine.

    python -m benchmarks speculative [--device cpu] [--threads 2] [--rounds 5] [--new-tokens 64] [--quick]
        [--case NAME] [--json OUT]

Cases (each exported into a temporary folder, without validation):
- `base-random`: the base preset (512 wide, 6 + 6 layers, 8000 ids) with random weights on random 24-id sources.
  Its greedy output repeats ids, so prompt lookup finds drafts (about 40 % accepted); the self-draft (the
  model as its own assistant) accepts every id: the upper bound of acceptance, at a draft as dear as the model.
- `t5-trained`: the trained t5 fixture (tests/fixtures/trained) on its 20 held-out sources, drafted by the
  trained flan_t5 fixture (the same tokenizer), and by prompt lookup (its outputs copy nothing: the cost of
  drafts that fail).
- `bart-copy`: the copy-heavy BART fixture (tests/fixtures/trained_copy/bart: d_model 128, 3 + 3 layers, 718 ids;
  its answers are the 20-40 ids of its source before a marker) on its 20 held-out sources
  (tests/copy_fixtures.py), by prompt lookup: issue #63's summarization case.
- `nllb-600m-int4-draft` (only when named; tfm_export.bench.nllb_draft): the NLLB-600M layout (random weights)
  float32 drafted by its own `--quantize int4` export, with the shipped policy and a fixed draft length, on
  random sources and on words; the exports take minutes each: `--work DIR` keeps them for the next run.
- `nllb-600m-trained-int4-draft` (only when named): the same on a model that translates: the trained nllb fixture
  widened into the NLLB-600M layout (tfm_export.bench.widen: Net2Net copies, 10 + 10 added layers, its proxy
  distilled from the fixture, every layer) on the fixture's held-out sources (`--sources` per target language),
  its greedy output checked equal to the fixture's; `--work DIR` keeps the folder and its exports.
- `whisper-digits`: the trained Whisper fixture (models/whisper-digits: d_model 128, 2 + 2 layers) transcribing
  long held-out English recordings (espeak-ng; the language given, timestamps on; runtime.speech.assisted),
  drafted by its draft (models/whisper-digits/draft: 2 + 1 layers, the same tokenizer; its encoder runs once per
  window) and by prompt lookup. The time is the whole `transcribe` (features, encoders and decoders), what a
  caller waits for; the call-cost table gives the model's decoder step and the draft's.
- `whisper-wide` (only when named): whisper-digits widened to d_model 512 and 2 + 8 layers (41M parameters:
  `train.py 12 --layout wide --out DIR`, its function kept and its decoder trained on for 12 minutes), a target
  whose decoder dominates, drafted by the shipped whisper-digits (2 + 2) and its draft (2 + 1), by whisper-digits
  distilled from it (`train.py 14 --distil-from WIDE --out DIR`: trained on the wide model's outputs, not the ground
  truth, models/whisper-digits/distil.py) and by prompt lookup, on the same recordings; `--work DIR` keeps the
  trained folders and their exports for the next run.
- `whisper-deep` (only when named): the same at 2 + 16 layers (`train.py 12 --layout deep --out DIR`), nearer
  large-v2's decoder share (the 2 + 8 model's encoder is 40 % of its transcription), drafted by whisper-digits
  (2 + 2), its draft (2 + 1) and by prompt lookup.
`--case NAME` (repeatable) runs only the cases named. `speculative-served` (SPECULATIVE_SERVED_DOC below): prompt
lookup in the server's in-flight rows. The sides, call costs and rows are tfm_export.bench.speculative's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tfm_export.bench import fixtures, nllb_draft
from tfm_export.bench.harness import Plan, interleave, machine_info, markdown_table
from tfm_export.bench.nllb_draft import trained_export
from tfm_export.bench.speculative import (
    COLUMNS, COST_COLUMNS, SERVED_COLUMNS, Rows, call_costs, decode_sides, served_rows, served_side, timing_rows,
    transcribed)
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.model.presets import init_checkpoint
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.serve.batcher import EngineConfig
from tfm_export.serve.engine import ServeSettings, open_engine
from tfm_export.serve.jobs import SPECULATE_BELOW

LOOKUP = 10  # prompt_lookup_num_tokens
SECONDS, RECORDINGS = 20.0, 3  # whisper-digits: three recordings of 20 s (five 4-s windows or more each)
T5_REPEAT = 5  # t5-trained: its 20 short sources (about 6 ids each) decoded 5 times a run, in 3x the rounds


def _base(folder: Path, quick: bool) -> Path:
    init_checkpoint(folder / "model.pt", "tiny" if quick else "base", seed=5)
    export_model(load_checkpoint(folder / "model.pt"), folder / "onnx", ExportOptions(validate=False))
    return folder / "onnx"


def _base_random(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The base preset (tiny with --quick), random weights, random 24-id sources: prompt lookup and self-draft."""
    folder = _base(tmp / "base", args.quick)
    base, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, base.config.src_vocab_size, 24).tolist() for _ in range(args.sources)]
    costs = call_costs("base-random", base, sources[0], args.rounds)
    return timing_rows("base-random", decode_sides(base, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP},
        "self-draft": {"assistant": base}}), args.rounds), costs


def _t5_trained(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The trained t5 fixture on its 20 held-out sources: prompt lookup and the flan_t5 fixture as draft."""
    t5_folder = trained_export("t5", tmp)
    t5, again = open_export(t5_folder, args.device, options), open_export(t5_folder, args.device, options)
    draft = open_export(trained_export("flan_t5", tmp), args.device, options)
    sources = [t5.encode(e.source) for e in fixtures.hf().task_examples("t5")]
    costs = call_costs("t5-trained", t5, sources[0], args.rounds)
    return timing_rows("t5-trained", decode_sides(t5, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP},
        "flan_t5 draft": {"assistant": draft}}, repeat=T5_REPEAT), 3 * args.rounds), costs


def _bart_copy(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The copy-heavy BART fixture on its 20 held-out sources: plain greedy against prompt lookup."""
    copy = fixtures.copy()
    folder = trained_export("bart-copy", tmp, copy.copy_folder(COPY_FAMILY))
    model, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    sources = [model.encode(s) for s, _ in copy.copy_examples(20)]
    costs = call_costs("bart-copy", model, sources[0], args.rounds)
    return timing_rows("bart-copy", decode_sides(model, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP}}), args.rounds), costs


def _whisper(case: str, folder: Path, drafts: dict[str, Path], tmp: Path, args: argparse.Namespace,
             options: RuntimeOptions) -> Rows:
    """A Whisper case: plain greedy, each draft and prompt lookup (each with the shipped policy and with the
    schedule alone, on a second opening), and the call costs of the model's decoder and of the drafts'."""
    from tfm_export.bench.fixtures import long_recording

    model, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    assistants = {name: open_export(path, args.device, options) for name, path in drafts.items()}
    recordings = [long_recording(fixtures.WHISPER_DIGITS, SECONDS, seed, tmp)[0] for seed in range(RECORDINGS)]
    window = np.zeros((model.config.n_mels, 400), np.float32)  # one 4-s window of features
    costs = call_costs(case, model, window, args.rounds)
    for name, draft in assistants.items():
        costs += call_costs(f"{case}: {name}", draft, window, args.rounds)
    sides = {"plain": transcribed(model, recordings)}
    proposers = {name: {"assistant": draft} for name, draft in assistants.items()}
    for name, proposer in {**proposers, f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP}}.items():
        sides[name] = transcribed(model, recordings, **proposer)
        sides[f"{name}, schedule only"] = transcribed(again, recordings, schedule_only=True, **proposer)
    rows = timing_rows(case, sides, args.rounds)
    assert all(r["same_ids"] for r in rows), "speculation changed the transcripts' ids"
    return rows, costs


def _whisper_digits(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The trained Whisper fixture drafted by its draft (2 + 1 layers) and by prompt lookup."""
    folder = trained_export("whisper-digits", tmp, fixtures.WHISPER_DIGITS)
    draft = trained_export("whisper-digits-draft", tmp, fixtures.WHISPER_DIGITS / "draft")
    return _whisper("whisper-digits", folder, {"draft (2 + 1 layers)": draft}, tmp, args, options)


def _widened(work: Path, name: str, recipe: tuple[str, ...]) -> Path:
    """The Whisper folder `train.py *recipe` writes (minutes of training), exported: both kept in `work` as
    NAME-hf and NAME for the next run."""
    import subprocess
    import sys

    from tfm_export.bench.families import prepared

    hf = work / f"{name}-hf"
    if not (hf / "model.safetensors").exists():
        subprocess.run([sys.executable, str(fixtures.WHISPER_DIGITS / "train.py"), *recipe, str(hf)], check=True)
    prepared(work / name, lambda out: trained_export(out.name, out.parent, hf))
    return work / name


def _digits_drafts(tmp: Path) -> dict[str, Path]:
    """The shipped whisper-digits (2 + 2) and its draft (2 + 1), exported: drafts for the widened models."""
    return {"whisper-digits (2 + 2)": trained_export("whisper-digits", tmp, fixtures.WHISPER_DIGITS),
            "whisper-digits draft (2 + 1)": trained_export("whisper-digits-draft", tmp,
                                                           fixtures.WHISPER_DIGITS / "draft")}


def _whisper_wide(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """whisper-digits widened (WIDE_TRAIN: d_model 512, 2 + 8 layers, models/whisper-digits/wide.py) and
    whisper-digits distilled from it (DISTIL_TRAIN), each trained and exported into --work once; the wide model
    drafted by the shipped model (2 + 2), its draft (2 + 1) and the distilled one: the same tokenizer."""
    work = args.work or tmp
    wide = _widened(work, "whisper-wide", WIDE_TRAIN)
    distilled = _widened(work, "whisper-distilled", (*DISTIL_TRAIN, str(work / "whisper-wide-hf"), "--out"))
    drafts = {**_digits_drafts(tmp), "distilled whisper-digits (2 + 2)": distilled}
    return _whisper("whisper-wide", wide, drafts, tmp, args, options)


def _whisper_deep(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """whisper-digits widened to 2 + 16 layers (DEEP_TRAIN), trained and exported into --work once, drafted by
    the shipped model (2 + 2) and its draft (2 + 1)."""
    deep = _widened(args.work or tmp, "whisper-deep", DEEP_TRAIN)
    return _whisper("whisper-deep", deep, _digits_drafts(tmp), tmp, args, options)


COPY_FAMILY = "bart"  # bart-copy: tests/fixtures/trained_copy/<COPY_FAMILY>
CASES = {"base-random": _base_random, "t5-trained": _t5_trained, "bart-copy": _bart_copy,
         "nllb-600m-int4-draft": nllb_draft.random_int4_draft,
         "nllb-600m-trained-int4-draft": nllb_draft.trained_int4_draft,
         "whisper-digits": _whisper_digits, "whisper-wide": _whisper_wide, "whisper-deep": _whisper_deep}
# run only when named (minutes to build); --quick: tiny alone
ON_REQUEST = {"nllb-600m-int4-draft", "nllb-600m-trained-int4-draft", "whisper-wide", "whisper-deep"}
WIDE_TRAIN = ("12", "--layout", "wide", "--out")  # whisper-wide: train.py's arguments before the folder
DEEP_TRAIN = ("12", "--layout", "deep", "--out")  # whisper-deep's
DISTIL_TRAIN = ("14", "--distil-from")  # whisper-wide's distilled draft: train.py's, then the wide folder, --out DIR


def speculative_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--no-spin", action="store_true",
                        help="every session's idle threads sleep (RuntimeOptions.spin_wait=False): a model and its "
                             "draft take turns, and a spinning pool takes the other's cores")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--new-tokens", type=int, default=64, help="most ids per source (base-random: exactly)")
    parser.add_argument("--sources", type=int, default=8, help="base-random: sources per run")
    parser.add_argument("--quick", action="store_true",
                        help="the tiny preset alone, instead of base and t5 (smoke run)")
    parser.add_argument("--case", action="append", choices=list(CASES), default=None,
                        help="run only this case (repeatable; default: every case but " + ", ".join(sorted(ON_REQUEST)) + ")")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--work", type=Path, default=None,
                        help="the nllb-600m cases, whisper-wide: keep their models and exports here, reused (minutes each)")
    args = parser.parse_args()
    options = RuntimeOptions(intra_op_threads=args.threads, spin_wait=not args.no_spin)
    cases = ["base-random"] if args.quick else args.case or [c for c in CASES if c not in ON_REQUEST]
    rows, costs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in cases:
            case_rows, case_costs = CASES[name](Path(tmp), args, options)
            rows, costs = rows + case_rows, costs + case_costs
    _report(rows, costs, args)


def _report(rows: list[dict[str, Any]], costs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"batch 1, greedy, {args.device}, {args.threads} threads, medians of {args.rounds} interleaved rounds")
    print(markdown_table(costs, COST_COLUMNS))
    print()
    print(markdown_table(rows, COLUMNS))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(args.threads), "call_costs": costs, "rows": rows},
                                        indent=1))


SPECULATIVE_SERVED_DOC = r"""Prompt lookup in the server's rows in flight (runtime.inflight.Speculating) against
plain greedy rows, on the copy-heavy BART fixture (tests/fixtures/trained_copy/bart: its answers copy 20-40 ids of
the source).

    python -m benchmarks speculative-served [--device cpu] [--threads 2] [--rounds 5] [--new-tokens 64]
        [--sources 20] [--max-batch 8] [--speculate-below N] [--middle N] [--json OUT]

The fixture is exported with its static-cache decoders (`--static-slots 64`) and served by the in-flight engine
(serve.batcher.InflightBatcher, no HTTP). Three workloads, each plain and with prompt_lookup_num_tokens 10, sides
interleaved: `one at a time` (a job submitted when the last is answered: batch-1 latency, what a speculating request
gains), `N at a time` (--middle N, by default SPECULATE_BELOW - 1: the most the rule lets speculate together) and
`all at once` (every source queued together: throughput, where plain rows share one decoder step and each
speculating request would run calls of its own). The engine keeps its default --speculate-below
(serve.jobs.SPECULATE_BELOW; `--speculate-below N` sets it): at that load a prompt-lookup request decodes as a plain
row. ms per generated id (EOS counted), the speculating requests' decoder calls per id and acceptance, the requests
declined for load (the engine's counters), and whether both sides' ids are equal.
"""

SLOTS = 64  # --static-slots: the most ids a row generates


def speculative_served_main() -> None:
    parser = argparse.ArgumentParser(description=SPECULATIVE_SERVED_DOC.split("\n\n")[0])
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
        folder = trained_export("bart-copy", Path(tmp), copy.copy_folder(COPY_FAMILY), "--static-slots", str(SLOTS))
        engine = open_engine(ServeSettings(str(folder), device=args.device, threads=args.threads, engine=EngineConfig(
            max_batch=args.max_batch, max_queue=max(64, args.sources), speculate_below=args.speculate_below)))
        engine.start()
        sources = [engine.model.encode(s) for s, _ in copy.copy_examples(args.sources)]
        steps = min(args.new_tokens, SLOTS)
        for workload, together in (("one at a time", 1), (f"{args.middle} at a time", args.middle),
                                   ("all at once", len(sources))):
            sides = {"plain": served_side(engine, sources, steps, 0, together),
                     f"prompt lookup {LOOKUP}": served_side(engine, sources, steps, LOOKUP, together)}
            rows += served_rows(workload, interleave(sides, Plan(rounds=args.rounds)))
        engine.close()
    print(f"in-flight engine, greedy, {args.device}, {args.threads} threads, max_batch {args.max_batch}, "
          f"speculate_below {args.speculate_below}, {args.sources} sources, medians of {args.rounds} interleaved "
          f"rounds")
    print(markdown_table(rows, SERVED_COLUMNS))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(args.threads), "rows": rows}, indent=1))
