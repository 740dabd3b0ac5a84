"""What an export's forms cost, one scenario each: `nocache` (a decoder without a KV cache), `int4-sensitivity` and
`wide-fixture` (what 4-bit weights cost on trained models, #41), and the vocabulary head alone: `head-bits` (8, 4
and 2 bits), `head-scan-size` (the scanned int4 head against int8, by size), `scan-recall` (how often the scan
misses float32's token) and `earlier-head` (what a plain step pays for earlier_logits). What they build and time
is tfm_export.bench.nocache's, int4_probe's and heads'."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.quality import measure, trained_fixture, variant_options, versions
from tfm_export.bench import harness, heads, int4_probe, nocache
from tfm_export.bench.quality import markdown

NOCACHE_DOC = r"""What a decoder without a KV cache costs (#42): the tutorial model of ../shared/seeds/000, exported
both ways.

    .venv/bin/python -m benchmarks nocache [--threads 2] [--repeat 5] [--json out.json]

Seed 000's model (tests/reference_models.TutorialTransformer at its tutorial size: d_model 512, 6+6
layers, 8 heads, d_ff 2048; random weights, vocabularies of 8,000) is exported by the native path
(load_any on its state_dict, decoder.onnx with a KV cache) and by the generic one (`tfm-export MODEL.pt
--trust-pickle --adapter tfm_export.bench.nocache:ADAPTER`: export_with_adapter with that ADAPTER, so
decoder_nocache.onnx, which reads the whole prefix every step). Both are timed on CPU in one
interleaved run: batch 1 and 8 (sources of 24 tokens), greedy and beam search with 4 beams, 16 and 64
new tokens (EOS ignored: stop_at_eos=False, every row decodes all of them). Each round times every
(export, batch, decoding, N) in turn; per step, (t(N) - t(1)) / (N - 1), so the encoder and set-up
cancel; ms per generated token = that / batch (a beam search still yields one token per source per
step). Medians over --repeat rounds; both exports' ids are checked equal before timing.

A smoke run (tiny model, one round): --tiny --repeat 1.
"""


def nocache_main() -> None:
    import torch

    from tfm_export.runtime import RuntimeOptions, open_export

    parser = argparse.ArgumentParser(description=NOCACHE_DOC.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of the tutorial's size (smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = nocache.SIZES["tiny" if args.tiny else "tutorial"]
    with tempfile.TemporaryDirectory() as tmp:
        folders = nocache.exports(size, Path(tmp))
        options = RuntimeOptions(intra_op_threads=args.threads)
        models = {name: open_export(folder, "cpu", options) for name, folder in folders.items()}
        rows = nocache.measure(models, size["vocab"], args.repeat)
    print(f"seed 000's tutorial model ({'tiny' if args.tiny else 'tutorial size'}: {size}), random weights, "
          f"src_len {nocache.SRC_LEN}, CPU, {args.threads} threads, medians of {args.repeat} interleaved rounds")
    print(nocache.table(rows))
    if not all(r["same_ids"] for r in rows):
        print("note: the two exports' ids differ somewhere (random weights: near ties at float precision)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


INT4_SENSITIVITY_DOC = r"""Which weights does 4-bit rounding cost quality on? A trained fixture with some weights
rounded to 4 bits (#41).

    .venv/bin/python -m benchmarks int4-sensitivity pegasus [--numbers 500] [--keep CLASSES[;CLASSES...]] [--json OUT]

The int4 export of the 64-wide trained fixtures stays below CTranslate2 int8's quality on some of them (BENCHMARKS.md,
Quality). This asks where the loss comes from, in transformers' eager model: each Linear weight (the vocabulary head
left float32, as int4 keeps it 8-bit) is fake-quantised as `--quantize int4` rounds it by default on these widths
(rtn: each block of 32 inputs of a column min/max-scaled to 0..15 with a zero point, as MatMulNBits stores it), and
greedy decodes of the held-out numbers (the first target language) are compared with float32's outputs (% identical)
and the references (chrF). Rows: every class rounded; one class only; every class but one. `--keep` instead rounds
everything but the listed classes (comma-separated; `;` between sets), e.g. the whole decoder kept: what the encoder's
4 bits cost alone. Classes are `encoder.` / `decoder.` + `self.` / `cross.` / `ffn.` + the Linear's name.
The fake quantisation reproduces the export's int4 (pegasus: 89.6 % identical and chrF 89.40, the export 89.6 and
89.38): activations at 8 bits (accuracy level 4) matter little next to the weights' 4.
"""


def int4_sensitivity_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=INT4_SENSITIVITY_DOC.split("\n\n")[0])
    parser.add_argument("family", help="a trained fixture: marian, bart, pegasus, t5, ...")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers decoded")
    parser.add_argument("--keep", default="", help="class sets kept float32 (the rest 4-bit), ';' between sets")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    probe = int4_probe.Probe(args.family, args.numbers)
    classes = sorted(set(probe.linears.values()))
    rows: dict[str, Any] = {"float32 chrF": probe.rounded(set())["chrf"], "all 4-bit": probe.rounded(set(classes))}
    print(args.family, rows, flush=True)
    for keep in filter(None, args.keep.split(";")):
        rows[f"keep {keep}"] = probe.rounded(set(classes) - set(keep.split(",")))
        print(f"keep {keep}: {rows[f'keep {keep}']}", flush=True)
    if not args.keep:
        for cls in classes:
            rows[cls] = {"only": probe.rounded({cls}), "all but": probe.rounded(set(classes) - {cls})}
            print(cls, rows[cls], flush=True)
    if args.json:
        harness.write_text(args.json, json.dumps(rows, indent=1) + "\n")


WIDE_FIXTURE_DOC = r"""int4 on weights of a real model's width (#41): a wide model trained on the fixtures' task,
measured.

    .venv/bin/python -m benchmarks wide-fixture --work W [--family marian] [--d-model 512] [--ffn 2048] \
        [--steps 200] [--lr 1e-3] [--blocks 32,64,128] [--methods gptq] [--numbers 500] [--json OUT.json]

The trained fixtures (tests/fixtures/trained) are 64 wide: a block of 64 or 128 is a whole column there, the
coarsest a block can be, so their block-size rows say little about a model of NLLB's width (1024, blocks of 128
an eighth of a column), and the fixtures' shortfall against CTranslate2 int8 may be their width's. This trains a
family's fixture task (`--family`, marian by default; tests/fixtures/train_fixtures.py, the same data, tokenizer and
schedule; the fixture's layer counts) at `--d-model` (heads of 64, `--ffn`), saves it as the fixtures are saved
(W/trained/<family>-d512, reused when there), and runs quality_table's measurement on it: float32, int8, int4 at each
block size and CTranslate2 int8, greedy and the folder's default decoding, the held-out numbers in every target
language.
"""


def wide_fixture_main() -> None:
    parser = argparse.ArgumentParser(description=WIDE_FIXTURE_DOC.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="the trained folder, exports and conversions")
    parser.add_argument("--family", default="marian", help="the trained fixture whose task and layout to widen")
    parser.add_argument("--d-model", type=int, default=512, help="the model's width (heads of 64)")
    parser.add_argument("--ffn", type=int, default=2048, help="the feed-forward width")
    parser.add_argument("--steps", type=int, default=200, help="training steps of 64 pairs (200: 55 %% of held-out "
                        "numbers exact, as the fixtures stop on the way; 900: all of them)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (the fixtures': 2e-3)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for training")
    parser.add_argument("--blocks", default="32,64,128", help="int4 block sizes to measure")
    parser.add_argument("--methods", default="", help="int4 methods besides the default (e.g. gptq)")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers per target language")
    parser.add_argument("--json", type=Path, help="write the training metrics and the rows here")
    args = parser.parse_args()
    name = f"{args.family}-d{args.d_model}"
    folder = args.work / "trained" / name  # beside, not under, work/<name> (the exports)
    metrics = int4_probe.train_wide(args.family, args.d_model, args.ffn, folder, steps=args.steps, lr=args.lr,
                                    threads=args.threads)
    fixture = dataclasses.replace(trained_fixture(args.family, args.numbers), name=name, model=folder)
    blocks = tuple(int(b) for b in args.blocks.split(",") if b)
    methods = tuple(m for m in args.methods.split(",") if m)
    rows = measure(fixture, args.work, variant_options((4,), blocks, methods, (), ()))
    if args.json:
        harness.write_text(args.json, json.dumps({"versions": versions(), "training": metrics, "rows": rows}, indent=1))
    print(markdown(rows))


HEAD_BITS_DOC = r"""The vocabulary head at batch 1 by weight format: float32, our int8 (DynamicQuantizeLinear +
MatMulInteger), MatMulNBits 4-bit and 8-bit (block 32, accuracy level 4). One MatMul of K x N random weights; the
largest error against float32 and ms per run (median and best of --rounds interleaved rounds of 5 runs).

    .venv/bin/python -m benchmarks head-bits [--k 1024] [--n 65536] [--threads 2] [--rounds 30]
"""


def sessions_of(paths: dict[str, Path], threads: int) -> dict[str, Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return {name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            for name, path in paths.items()}


def head_bits_main() -> None:
    parser = argparse.ArgumentParser(description=HEAD_BITS_DOC.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=1024, help="input width (default: 1024, NLLB-600M's)")
    parser.add_argument("--n", type=int, default=65536, help="vocabulary (default: 65536, a quarter of NLLB's)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default: 2)")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default: 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        w = heads.graphs(args.k, args.n, Path(tmp))
        sessions = sessions_of({name: Path(tmp) / f"{name}.onnx" for name in ("f32", "int8", "nb4", "nb8")},
                               args.threads)
        x = np.random.default_rng(1).standard_normal((1, args.k)).astype(np.float32)
        sides = {name: (lambda session=session: harness.timed(lambda: [session.run(None, {"x": x})
                                                                       for _ in range(5)]) / 5)
                 for name, session in sessions.items()}
        times = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=0))
        for name, session in sessions.items():
            error = np.abs(session.run(None, {"x": x})[0] - x @ w).max()
            print(f"{name:5s} {1e3 * harness.median(times[name]):7.3f} ms  best {1e3 * min(times[name]):7.3f}  "
                  f"largest error {error:.3g}")


HEAD_SCAN_SIZE_DOC = r"""The vocabulary head alone by size: int8 (`--int4-head int8`) against the 4-bit scan
(`scan`), batch 1 and 16.

    .venv/bin/python -m benchmarks head-scan-size --work DIR [--threads 1] [--rounds 12]

For each (K, N) a graph of a tied head (an embedding Gather and the MatMul of its transpose, as the exporter stores
a tied head) goes through `quantize_int4` with either head, so the graphs are the exporter's own; each run is
timed with the head cold (64 MB read between runs: in a step the head comes after the layers' weights), on huge
pages as the runtime opens sessions. 1 thread times CPU time (`time.thread_time`, robust to the shared VM's other
load); more threads time wall clock. What `--int4-head auto`'s threshold (export.int4.SCAN_MIN_WEIGHTS) rests on.
"""


def head_scan_size_main() -> None:
    parser = argparse.ArgumentParser(description=HEAD_SCAN_SIZE_DOC.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="the graphs, kept and reused")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: CPU time)")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds of 3 cold runs per head")
    args = parser.parse_args()
    print("| head (K x N) | weights | batch 1: int8 / scan ms | scan / int8 | batch 16: int8 / scan ms | scan / int8 |")
    print("|---|---:|---|---:|---|---:|")
    for k, n in heads.SCAN_SIZES:
        heads.build(args.work / f"{k}x{n}", k, n)
        r = heads.cold_ms(args.work / f"{k}x{n}", k, args.threads, args.rounds)
        cells = [f"{r[b]['int8']:.2f} / {r[b]['scan']:.2f} | {r[b]['scan'] / r[b]['int8']:.2f}" for b in (1, 16)]
        print(f"| {k} x {n} | {k * n / 1e6:.1f}M | {cells[0]} | {cells[1]} |", flush=True)


SCAN_RECALL_DOC = r"""How often the scanned head (export.head_scan) misses the token float32 would pick, on a
vocabulary of NLLB's size: a random head (K x V) rounded as MatMulNBits rounds it (asymmetric blocks of 128 along K,
at 2 and 4 bits) and hidden states whose winning token has a chosen probability over a Gaussian bulk of logits with
a chosen spread (the trained fixtures' vocabularies, under 600 tokens, are too small to show this). Per setting: the
share of states whose float32 argmax is not among the scan's CANDIDATES best (then the head picks another token),
and the error of the log-normaliser (beam search's log-softmax) when the rest keep the scan's values.

    .venv/bin/python -m benchmarks scan-recall [--vocab 256206] [--k 1024] [--states 200]
"""


def scan_recall_main() -> None:
    parser = argparse.ArgumentParser(description=SCAN_RECALL_DOC.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=256206, help="vocabulary (default: NLLB's 256,206)")
    parser.add_argument("--k", type=int, default=1024, help="hidden size (default: NLLB-600M's 1024)")
    parser.add_argument("--states", type=int, default=200, help="hidden states per setting (default: 200)")
    args = parser.parse_args()
    print("| logit spread s | p(winner) | bits | candidates | missed | log-normaliser error, median / worst |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in heads.scan_recall(args.vocab, args.k, args.states):
        print(f"| {r['spread']:g} | {r['p_win']:g} | {r['bits']} | {r['candidates']} | {100 * r['missed']:.1f} % | "
              f"{r['error_median']:.3f} / {r['error_worst']:.3f} |", flush=True)


EARLIER_HEAD_DOC = r"""What a plain one-id step pays for decoder.onnx's earlier_logits (export.earlier_head), the
head's tail alone: hidden (batch, tgt_len, K) -> logits, next_ids and earlier_logits, K x N random weights, one graph per
form of the earlier positions' head. Medians over --rounds interleaved rounds of 50 runs each, and of each round's
difference to "none": what the form adds to every plain step.

    .venv/bin/python -m benchmarks earlier-head [--k 128] [--n 24] [--threads 1] [--rounds 300]

if (today's): If(Size(rows) > 0, then: head(rows), else: Reshape(rows, [0, 0, N])), rows = Slice(hidden, :-1);
none: no earlier_logits (the decoder before #63); unguarded: head(rows) over zero rows (ORT 1.30's TopK, the
scan's, dies there); if, no kernel in else: If(tgt_len > 1) with the Slice in the then branch and a Constant else,
whose (0, 0, N) loses the batch dim; all positions: one head over every position, logits its last (a Gather: a copy
of batch x N), earlier_logits a Slice.
"""


def earlier_head_main() -> None:
    parser = argparse.ArgumentParser(description=EARLIER_HEAD_DOC.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=128, help="hidden width (default: 128, the bundled model's)")
    parser.add_argument("--n", type=int, default=24, help="vocabulary (default: 24, the bundled model's)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: 1)")
    parser.add_argument("--batch", default="1,32", help="plain steps' rows, comma-separated (default: 1,32)")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved rounds (default: 300)")
    args = parser.parse_args()
    sessions = heads.earlier_sessions(args.k, args.n, args.threads)
    rng = np.random.default_rng(1)
    for batch in map(int, args.batch.split(",")):
        feeds = {"h": rng.standard_normal((batch, 1, args.k)).astype(np.float32)}
        sides = {form: (lambda s=session: harness.timed(lambda: [s.run(None, feeds) for _ in range(50)]) / 50)
                 for form, session in sessions.items()}
        times = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=3))
        for form in sessions:  # round by round: both runs of a round shared the machine's state
            extra = harness.median([a - b for a, b in zip(times[form], times["none"])])
            print(f"batch {batch:3d}  {form:22s} {1e6 * harness.median(times[form]):7.2f} µs a run, "
                  f"{1e6 * extra:+5.2f} µs over none")
