r"""Two or more exports of one family folder against each other and CTranslate2, interleaved in one process.

    .venv/bin/python -m benchmarks exports WORK/bart-full-seed0 --family bart \
        --exports onnx-prev,onnx [--batch 16] [--src-len 512] [--num-beams 4] [--new-tokens 32] [--repeat 3]

For A/B checks of an export change (a graph form, a runtime path) where `families`'s four backends
would take too long: WORK/<family>-<scale>-seed<seed> is a folder `benchmarks families --work` made (hf/, ct2/
and the exports, named relative to it or absolute). Sources are `families`'s random ids; every row
decodes exactly --new-tokens tokens (EOS banned until then). Timed by families.measure: the time per
step is (t(N) - t(1)) / (N - 1), median over the repeats, each repeat running every backend once; the
rows are compared with CTranslate2's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tfm_export.bench import harness


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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

