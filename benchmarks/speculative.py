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
- `nllb-600m-int4-draft` (only when named): the NLLB-600M layout (random weights, benchmarks/exports.py)
  float32 drafted by its own `--quantize int4` export, with the shipped policy and a fixed draft length, on
  random sources and on words; the exports take minutes each: `--work DIR` keeps them for the next run.
- `whisper-digits`: the trained Whisper fixture transcribing long held-out recordings, drafted by its 2 + 1 layer
  draft (models/whisper-digits/draft) and by prompt lookup (benchmarks.speculative_whisper).
`--case NAME` (repeatable) runs only the cases named.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks import fixtures
from tfm_export.bench.harness import Column, Plan, interleave, machine_info, markdown_table, median
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.model.presets import init_checkpoint
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
from tfm_export.runtime.decode import speculative
from tfm_export.runtime.decode.draft_length import DraftLength
from tfm_export.runtime.decode.loop import DecodeTimings

LOOKUP = 10  # prompt_lookup_num_tokens
POSITIONS = (1, 2, 3, 5, 9, 11)  # the call-cost table: 1 + k positions
NLLB_VARIANTS = {"float32": (), "int4": ("--quantize", "int4")}  # nllb-600m-int4-draft: the model, its draft
NLLB_FIXED = 5  # nllb-600m-int4-draft: the fixed num_assistant_tokens (transformers' "constant" schedule)
T5_REPEAT = 5  # t5-trained: its 20 short sources (about 6 ids each) decoded 5 times a run, in 3x the rounds


def _base(folder: Path, quick: bool) -> Path:
    init_checkpoint(folder / "model.pt", "tiny" if quick else "base", seed=5)
    export_model(load_checkpoint(folder / "model.pt"), folder / "onnx", ExportOptions(validate=False))
    return folder / "onnx"


def _trained(family: str, folder: Path, source: Path | None = None, *flags: str) -> Path:
    """The trained fixture of `family` (or the folder `source`) exported into `folder` without validation, as
    `tfm-export SOURCE -o OUT --no-validate FLAGS` exports it."""
    from tfm_export.cli import cli

    out = folder / family
    source = source or fixtures.hf().trained_folder(family)
    cli.main([str(source), "-o", str(out), "--no-validate", *flags], standalone_mode=False)
    return out


def _nllb_exports(work: Path) -> tuple[Path, Path]:
    """The NLLB-600M layout (random weights: benchmarks/exports.py) exported float32 and `--quantize
    int4` into `work`, each reused when there (a 600M export takes minutes on 2 cores)."""
    from benchmarks.exports import build_folder
    from tfm_export.bench.families import prepared

    hf = work / "nllb-hf"
    build_folder("nllb", hf)
    for variant, flags in NLLB_VARIANTS.items():
        prepared(work / f"nllb-{variant}", lambda out: _trained(out.name, out.parent, hf, *flags))
    return work / "nllb-float32", work / "nllb-int4"


class _Policy:
    """While in force, new draft-length policies are made by `made` (None: as the library makes them)."""

    def __init__(self, made: Callable[..., DraftLength] | None):
        self.made = made

    def __enter__(self) -> None:
        self.shipped = speculative.DraftLength
        speculative.DraftLength = self.made or self.shipped

    def __exit__(self, *exc: Any) -> None:
        speculative.DraftLength = self.shipped


class FixedLength(DraftLength):
    """transformers' "constant" schedule: `start` ids drafted every step, never switched off."""

    def __init__(self, start: int, cap: int | None = None):
        super().__init__(start, cap, switch_off=False)

    def record(self, drafted: int, accepted: int, emitted: int, seconds: float) -> None:
        pass  # k stays `start`


SCHEDULE_ONLY = functools.partial(DraftLength, switch_off=False)  # the schedule without the switch-off


def _side(model: Any, sources: list[list[int]], steps: int, schedule_only: bool = False, repeat: int = 1,
          policy: Callable[..., DraftLength] | None = None, config: Any = GREEDY,
          **options: Any) -> Callable[[], dict[str, Any]]:
    """One run: every source alone (batch 1), greedy, `repeat` times; ms per generated id (EOS counted), what was
    accepted and how often the policy switched speculation off. `schedule_only`: `model` is an opening of its
    own, whose policies (made on its first run, kept by the runner) have no switch-off; `policy`: what makes
    them instead (its own opening too, or options that key a policy of their own: num_assistant_tokens)."""
    policy = SCHEDULE_ONLY if schedule_only else policy

    def run() -> dict[str, Any]:
        timings, ids = DecodeTimings(), []
        pauses = sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values())
        with _Policy(policy):
            start = time.perf_counter()
            for src in sources * repeat:
                ids += model.generate_ids([src], max_new_tokens=steps, config=config, timings=timings, **options)
            seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        pauses = sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values()) - pauses
        return {"ms": 1000 * seconds / tokens, "ids": ids, "calls": len(timings.steps_s), "tokens": tokens,
                "drafted": timings.drafted, "accepted": timings.accepted, "pauses": pauses}

    return run


def _sides(model: Any, again: Any, sources: list[list[int]], steps: int, proposers: dict[str, dict[str, Any]],
           repeat: int = 1) -> dict[str, Callable[[], dict[str, Any]]]:
    """Plain greedy, then each proposer (name -> its generate_ids options) with the policy as it ships on
    `model` and with the schedule alone on `again` (another opening of the same export)."""
    sides = {"plain": _side(model, sources, steps, repeat=repeat)}
    for name, options in proposers.items():
        sides[name] = _side(model, sources, steps, repeat=repeat, **options)
        sides[f"{name}, schedule only"] = _side(again, sources, steps, schedule_only=True, repeat=repeat, **options)
    return sides


def _call_costs(case: str, model: Any, src: list[int], rounds: int) -> list[dict[str, Any]]:
    """ms of a decoder call feeding 1 + k positions after a 20-position past, with the speculative step's
    pick of every position and its cache trim (runtime.states.positions), against a plain step's."""
    cache, cfg = model.checking_cache(), model.config
    bias = np.zeros(cfg.tgt_vocab_size, np.float32)

    def call(n: int) -> Callable[[], float]:
        def run() -> float:
            state = cache.start(model.source_input([src]))
            state.feed(np.array([[cfg.bos_id] + [5] * 19]))
            start = time.perf_counter()
            for _ in range(10):
                state.feed(np.full((1, n), 5, np.int64))
                if n == 1:  # a plain step: its id, the past grown by one
                    state.next_ids()
                else:  # a check: every position's id, the past cut back to 20 + the kept (here 0)
                    state.position_ids(bias)
                    state.truncate(20)
            return 100 * (time.perf_counter() - start)  # ms a call

        return run

    samples = interleave({n: call(n) for n in POSITIONS}, Plan(rounds=rounds))
    one = median(samples[1])
    return [{"case": case, "positions": n, "ms_per_call": round(median(samples[n]), 3),
             "x_plain_step": round(median(samples[n]) / one, 2)} for n in POSITIONS]


def _rows(case: str, sides: dict[str, Callable[[], dict[str, Any]]], rounds: int) -> list[dict[str, Any]]:
    """One row per side: median ms/token, x plain, and the last run's calls, acceptance and switch-offs."""
    samples = interleave(sides, Plan(rounds=rounds))
    plain = median(s["ms"] for s in samples["plain"])
    reference = samples["plain"][0]["ids"]
    rows = []
    for name, runs in samples.items():
        ms, last = median(r["ms"] for r in runs), runs[-1]
        rows.append({"case": case, "side": name, "ms_per_token": round(ms, 3), "speedup": round(plain / ms, 2),
                     "calls_per_token": round(last["calls"] / last["tokens"], 3) if last["calls"] else None,
                     "acceptance": round(last["accepted"] / last["drafted"], 3) if last["drafted"] else None,
                     "switch_offs": last["pauses"], "same_ids": all(r["ids"] == reference for r in runs),
                     "distinct": len({i for row in last["ids"] for i in row}),  # 1: a degenerate output
                     "ms_rounds": [round(r["ms"], 3) for r in runs]})
    return rows


COLUMNS = [Column("case"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "decoder calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("switch_offs", "switch-offs (last run)"),
           Column("same_ids", "same ids"), Column("distinct", "distinct ids out")]
COST_COLUMNS = [Column("case"), Column("positions", "positions fed (1 + k)"),
                Column("ms_per_call", "ms/call", "{:.3f}"), Column("x_plain_step", "x plain step", "{:.2f}")]


Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (timing rows, call-cost rows)


def _base_random(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The base preset (tiny with --quick), random weights, random 24-id sources: prompt lookup and self-draft."""
    folder = _base(tmp / "base", args.quick)
    base, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, base.config.src_vocab_size, 24).tolist() for _ in range(args.sources)]
    costs = _call_costs("base-random", base, sources[0], args.rounds)
    return _rows("base-random", _sides(base, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP},
        "self-draft": {"assistant": base}}), args.rounds), costs


def _t5_trained(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The trained t5 fixture on its 20 held-out sources: prompt lookup and the flan_t5 fixture as draft."""
    t5_folder = _trained("t5", tmp)
    t5, again = open_export(t5_folder, args.device, options), open_export(t5_folder, args.device, options)
    draft = open_export(_trained("flan_t5", tmp), args.device, options)
    sources = [t5.encode(e.source) for e in fixtures.hf().task_examples("t5")]
    costs = _call_costs("t5-trained", t5, sources[0], args.rounds)
    return _rows("t5-trained", _sides(t5, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP},
        "flan_t5 draft": {"assistant": draft}}, repeat=T5_REPEAT), 3 * args.rounds), costs


def _bart_copy(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The copy-heavy BART fixture on its 20 held-out sources: plain greedy against prompt lookup."""
    copy = fixtures.copy()
    folder = _trained("bart-copy", tmp, copy.copy_folder(COPY_FAMILY))
    model, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    sources = [model.encode(s) for s, _ in copy.copy_examples(20)]
    costs = _call_costs("bart-copy", model, sources[0], args.rounds)
    return _rows("bart-copy", _sides(model, again, sources, args.new_tokens, {
        f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP}}), args.rounds), costs


def _nllb_int4_draft(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The NLLB-600M layout (random weights) float32, drafted by its own `--quantize int4` export: the shipped
    policy and a fixed draft length, on random ids and on words (the trained nllb fixture's held-out targets
    through its tokenizer: ids of real text, if of a smaller vocabulary)."""
    from transformers import AutoTokenizer

    model_folder, draft_folder = _nllb_exports(args.work or tmp)
    model, draft = open_export(model_folder, args.device, options), open_export(draft_folder, args.device, options)
    rng, hf = np.random.default_rng(1), fixtures.hf()
    tokenizer = AutoTokenizer.from_pretrained(hf.trained_folder("nllb"))
    sources = {"random ids": [rng.integers(4, model.config.src_vocab_size - 1, 24).tolist()
                              for _ in range(args.sources)],
               "words": [tokenizer(e.target)["input_ids"] for e in hf.task_examples("nllb")[:args.sources]]}
    costs = [*_call_costs("nllb-600m float32", model, sources["words"][0], args.rounds),
             *_call_costs("nllb-600m int4 (the draft)", draft, sources["words"][0], args.rounds)]
    rows, steps = [], args.new_tokens
    config = GREEDY.replace(min_new_tokens=steps)  # EOS banned: the random layout ends every source at once
    for kind, srcs in sources.items():
        rows += _rows(f"nllb-600m-int4-draft, {kind}", {
            "plain": _side(model, srcs, steps, config=config),
            "int4 self-draft": _side(model, srcs, steps, config=config, assistant=draft),
            f"int4 self-draft, fixed {NLLB_FIXED}": _side(model, srcs, steps, policy=FixedLength, config=config,
                                                         assistant=draft, num_assistant_tokens=NLLB_FIXED)},
            args.rounds)
    assert all(r["same_ids"] for r in rows), "speculation changed the ids"
    return rows, costs


def _whisper_digits(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    from benchmarks.speculative_whisper import whisper_digits  # imports this module: loaded when run

    return whisper_digits(tmp, args, options)


COPY_FAMILY = "bart"  # bart-copy: tests/fixtures/trained_copy/<COPY_FAMILY>
CASES = {"base-random": _base_random, "t5-trained": _t5_trained, "bart-copy": _bart_copy,
         "nllb-600m-int4-draft": _nllb_int4_draft, "whisper-digits": _whisper_digits}
ON_REQUEST = {"nllb-600m-int4-draft"}  # run only when named (a 600M export); --quick: the tiny preset alone


def speculative_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--new-tokens", type=int, default=64, help="most ids per source (base-random: exactly)")
    parser.add_argument("--sources", type=int, default=8, help="base-random: sources per run")
    parser.add_argument("--quick", action="store_true",
                        help="the tiny preset alone, instead of base and t5 (smoke run)")
    parser.add_argument("--case", action="append", choices=list(CASES), default=None,
                        help="run only this case (repeatable; default: every case but nllb-600m-int4-draft)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--work", type=Path, default=None,
                        help="nllb-600m-int4-draft: keep its layout and exports here and reuse them (minutes each)")
    args = parser.parse_args()
    options = RuntimeOptions(intra_op_threads=args.threads)
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
