"""Speculative greedy decoding at batch 1 (runtime.decode.speculative): ms per generated token with and without
it, interleaved, and the acceptance rate; the ids are checked equal to plain greedy's on every case.

    python -m benchmarks speculative [--threads 2] [--rounds 5] [--new-tokens 64] [--quick] [--json OUT]

Cases (each exported into a temporary folder, without validation):
- `base-random`: the base preset (512 wide, 6 + 6 layers, 8000 ids) with random weights on random 24-id sources.
  Its greedy output settles into repeating a few ids, so prompt lookup's drafts are nearly always right: the
  upper bound of what prompt lookup buys on a copy-heavy output at this size, not a trained model's figure.
- `t5-trained`: the trained t5 fixture (tests/fixtures/trained) on its 20 held-out sources, drafted by the
  trained flan_t5 fixture (the same tokenizer), and by prompt lookup (its outputs copy nothing: the cost of
  drafts that fail).
"""

from __future__ import annotations

import argparse
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
from tfm_export.runtime.decode.loop import DecodeTimings

LOOKUP = 10  # prompt_lookup_num_tokens


def _base(folder: Path, quick: bool) -> Path:
    init_checkpoint(folder / "model.pt", "tiny" if quick else "base", seed=5)
    export_model(load_checkpoint(folder / "model.pt"), folder / "onnx", ExportOptions(validate=False))
    return folder / "onnx"


def _trained(family: str, folder: Path) -> Path:
    from tfm_export.cli import cli

    out = folder / family
    cli.main([str(fixtures.hf().trained_folder(family)), "-o", str(out), "--no-validate"], standalone_mode=False)
    return out


def _side(model: Any, sources: list[list[int]], steps: int, **options: Any) -> Callable[[], dict[str, Any]]:
    """One run: every source alone (batch 1), greedy; ms per generated id (EOS counted) and what was accepted."""

    def run() -> dict[str, Any]:
        timings, ids, start = DecodeTimings(), [], time.perf_counter()
        for src in sources:
            ids += model.generate_ids([src], max_new_tokens=steps, config=GREEDY, timings=timings, **options)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        return {"ms": 1000 * seconds / tokens, "ids": ids, "calls": len(timings.steps_s), "tokens": tokens,
                "drafted": timings.drafted, "accepted": timings.accepted}

    return run


def _rows(case: str, sides: dict[str, Callable[[], dict[str, Any]]], rounds: int) -> list[dict[str, Any]]:
    samples = interleave(sides, Plan(rounds=rounds))
    plain = median(s["ms"] for s in samples["plain"])
    reference = samples["plain"][0]["ids"]
    rows = []
    for name, runs in samples.items():
        ms, last = median(r["ms"] for r in runs), runs[-1]
        rows.append({"case": case, "side": name, "ms_per_token": round(ms, 3), "speedup": round(plain / ms, 2),
                     "calls_per_token": round(last["calls"] / last["tokens"], 3),
                     "acceptance": round(last["accepted"] / last["drafted"], 3) if last["drafted"] else None,
                     "same_ids": all(r["ids"] == reference for r in runs)})
    return rows


COLUMNS = [Column("case"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "decoder calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("same_ids", "same ids")]


def speculative_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--new-tokens", type=int, default=64, help="most ids per source (base-random: exactly)")
    parser.add_argument("--sources", type=int, default=8, help="base-random: sources per run")
    parser.add_argument("--quick", action="store_true", help="the tiny preset alone, instead of base and t5 (smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    options = RuntimeOptions(intra_op_threads=args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = open_export(_base(Path(tmp) / "base", args.quick), "cpu", options)
        rng = np.random.default_rng(1)
        sources = [rng.integers(4, base.config.src_vocab_size, 24).tolist() for _ in range(args.sources)]
        rows += _rows("base-random", {"plain": _side(base, sources, args.new_tokens),
                                      f"prompt lookup {LOOKUP}": _side(base, sources, args.new_tokens,
                                                                       prompt_lookup_num_tokens=LOOKUP),
                                      "self-draft": _side(base, sources, args.new_tokens, assistant=base)},
                      args.rounds)
        if args.quick:  # the smoke run: the tiny preset alone
            return _report(rows, args)
        t5 = open_export(_trained("t5", Path(tmp)), "cpu", options)
        draft = open_export(_trained("flan_t5", Path(tmp)), "cpu", options)
        texts = [e.source for e in fixtures.hf().task_examples("t5")]
        sources = [t5.encode(t) for t in texts]
        rows += _rows("t5-trained", {"plain": _side(t5, sources, args.new_tokens),
                                     f"prompt lookup {LOOKUP}": _side(t5, sources, args.new_tokens,
                                                                      prompt_lookup_num_tokens=LOOKUP),
                                     "flan_t5 draft": _side(t5, sources, args.new_tokens, assistant=draft)},
                      args.rounds)
    _report(rows, args)


def _report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"batch 1, greedy, CPU, {args.threads} threads, medians of {args.rounds} interleaved rounds")
    print(markdown_table(rows, COLUMNS))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(args.threads), "rows": rows}, indent=1))
