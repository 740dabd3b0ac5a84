r"""ORT (tfm-export) vs transformers' own generate on an opus-mt sized MarianMT (random weights).

    .venv/bin/python -m benchmarks marian [--threads 2] [--repeat 3] [--num-beams 4]

Both decode 64 new tokens (EOS ignored; greedy, or beam search with --num-beams) for batch 1, 32
source tokens, interleaved in one run; per-token time = (t(64 tokens) - t(1 token)) / 63 for both,
so encoder and set-up cancel.
"""

from __future__ import annotations

from pathlib import Path
from transformers import MarianConfig, MarianMTModel
import argparse
import tempfile
import torch

from benchmarks.families.layouts import OPUS_MT
from tfm_export.bench import harness
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export


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

        def ort_run(k: int):
            return lambda: ort_model.generate_ids(src.tolist(), max_new_tokens=k, stop_at_eos=False,
                                                  config=GREEDY.replace(num_beams=args.num_beams))

        sides = {name: (lambda fn=fn: (harness.timed(fn(n)) - harness.timed(fn(1))) / (n - 1))
                 for name, fn in (("transformers", hf_run), ("ort", ort_run))}
        runs = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=1))
    per_token = {name: 1e3 * harness.median(v) for name, v in runs.items()}
    print(f"opus-mt sized Marian (random weights), batch 1, src_len 32, {n} new tokens, {args.num_beams} beam(s), "
          f"{args.threads} threads")
    print(f"export (no validation): {export_s:.1f} s")
    for name, ms in per_token.items():
        print(f"{name:>13}: {ms:.2f} ms/token")
    print(f"ORT/transformers per-token ratio: {per_token['ort'] / per_token['transformers']:.2f}")

