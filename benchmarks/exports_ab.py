r"""Two or more exports of one family folder against each other and CTranslate2, interleaved in one process.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/exports_ab.py WORK/bart-full-seed0 --family bart \
        --exports onnx-prev,onnx [--batch 16] [--src-len 512] [--num-beams 4] [--new-tokens 32] [--repeat 3]

For A/B checks of an export change (a graph form, a runtime path) where families.py's four backends
would take too long: WORK/<family>-<scale>-seed<seed> is a folder families.py --work made (hf/, ct2/
and the exports, named relative to it or absolute). Sources are families.py's random ids; every row
decodes exactly --new-tokens tokens (EOS banned until then). The time per step is (t(N) - t(1)) / (N - 1),
median over the repeats, each repeat running every backend once; the hypotheses are checked against
CTranslate2's first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable

import ctranslate2
import torch
from transformers import AutoConfig

from families import FIRST_ID, UNK_ID, IdTokenizer
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export

Decode = Callable[[int], list[list[int]]]  # new tokens -> each source's best hypothesis


def backends(root: Path, family: str, exports: list[str], src: list[list[int]], args: argparse.Namespace
             ) -> dict[str, Decode]:
    """CTranslate2 and every export, each a function of the number of new tokens."""
    tok = IdTokenizer(AutoConfig.from_pretrained(root / "hf"), UNK_ID[family])
    translator = ctranslate2.Translator(str(root / "ct2"), device="cpu", compute_type="float32",
                                       inter_threads=1, intra_threads=args.threads)
    tokens = [tok.convert_ids_to_tokens(s) for s in src]

    def ct2(n: int) -> list[list[int]]:
        out = translator.translate_batch(tokens, beam_size=args.num_beams, max_decoding_length=n,
                                         min_decoding_length=n)
        return [[tok.index[t] for t in r.hypotheses[0]] for r in out]

    runs: dict[str, Decode] = {"ctranslate2": ct2}
    for name in exports:
        model = open_export(root / name, "cpu", RuntimeOptions(intra_op_threads=args.threads))
        runs[name] = lambda n, model=model: model.generate_ids(
            src, max_new_tokens=n, stop_at_eos=False, config=GREEDY.replace(num_beams=args.num_beams, min_new_tokens=n))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a family folder of families.py --work (hf/, ct2/, exports)")
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
    runs = backends(args.root, args.family, args.exports.split(","), src, args)
    first = {name: run(args.new_tokens) for name, run in runs.items()}  # warm-up, and the rows to compare
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            run(args.new_tokens)
            middle = time.perf_counter()
            run(1)
            samples[name].append(1e3 * ((middle - start) - (time.perf_counter() - middle)) / (args.new_tokens - 1))
    ct2 = statistics.median(samples["ctranslate2"])
    for name, values in samples.items():
        same = sum(a == b for a, b in zip(first[name], first["ctranslate2"])) / len(src)
        ms = statistics.median(values)
        print(f"{name:24s} {ms:8.1f} ms/step  tokens/s vs CTranslate2 {ct2 / ms:5.2f}x  rows as CTranslate2's "
              f"{same:.0%}  samples {[round(v, 1) for v in values]}")


if __name__ == "__main__":
    main()
