r"""CTranslate2's static batches on `load`'s request pool: the peer of `tfm-export serve`'s batching.

    .venv/bin/python -m benchmarks ct2-batch HF_FOLDER --export EXPORT_FOLDER --batch 16 --beams 4         --new-tokens 4:64 --seed 0 --threads 2 --repeat 3 [--max-src-len N] [--ct2-dir DIR] [--json OUT]

HF_FOLDER (a Marian folder with vocab.json, e.g. from `opus-mt-folder`) is converted with
CTranslate2's TransformersConverter (float32) into --ct2-dir, or a temporary folder; a --ct2-dir that
already holds a converted model is reused. EXPORT_FOLDER is that folder's tfm-export export: `load`'s
`workload` reads its vocabulary size and max_len, so with the same --new-tokens, --seed and
--max-src-len the 200 (source ids, max_new_tokens) pairs are exactly those `load`'s requests cycle
through. Ids become tokens by the folder's vocab.json (CTranslate2's vocabulary is checked to agree).

Each repeat decodes the whole pool in consecutive static batches of --batch with
translate_batch(beam_size=--beams), each batch's max_decoding_length the largest max_new_tokens in it
(a static batch decodes to its longest request), on intra_threads=--threads, inter_threads=1, after
one untimed warm-up batch. Reported per repeat and as the median over repeats: wall time, source
tokens/s (the pool's source lengths over the wall time: the figure to compare with `load`'s
src_tokens_per_s) and generated tokens/s (the best hypotheses' tokens, EOS not counted); also
"useful" tokens/s, each hypothesis cut to its request's max_new_tokens (what a server would return: the
rest is the static batch's overhang past a shorter request's limit), the figure for `load`'s tokens/s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any
import argparse
import json
import tempfile

from tfm_export.bench import harness
from tfm_export.bench.harness import machine_info
from tfm_export.files import write_file_atomically
from tfm_export.manifest import load_manifest
from benchmarks.serving.workload import workload

TOOL = "tfm-export `benchmarks ct2-batch`"  # marks the reports we wrote (replaced, never anything else)


def is_report(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        return False


CT2_OURS = ("a `ct2-batch` JSON report", is_report)


def converted(hf_folder: Path, ct2_dir: Path) -> float | None:
    """Convert into ct2_dir unless it holds a model already; seconds taken, or None when reused."""
    if (ct2_dir / "model.bin").exists():
        return None
    if ct2_dir.exists() and any(ct2_dir.iterdir()):
        raise SystemExit(f"{ct2_dir} is neither empty nor a CTranslate2 model; choose another --ct2-dir")
    from ctranslate2.converters import TransformersConverter

    # float32: no quantization
    return harness.timed(lambda: TransformersConverter(str(hf_folder)).convert(str(ct2_dir), force=True))


def ct2_vocabulary(ct2_dir: Path) -> list[str]:
    for name in ("shared_vocabulary.json", "source_vocabulary.json"):
        if (ct2_dir / name).exists():
            return json.loads((ct2_dir / name).read_text(encoding="utf-8"))
    for name in ("shared_vocabulary.txt", "source_vocabulary.txt"):
        if (ct2_dir / name).exists():
            return (ct2_dir / name).read_text(encoding="utf-8").split("\n")[:-1]
    raise SystemExit(f"{ct2_dir}: no vocabulary file")


def id_tokens(hf_folder: Path, ct2_dir: Path) -> list[str]:
    """The folder's vocab.json as a list (id -> token), checked against the converted vocabulary
    (CTranslate2 drops Marian's trailing <pad>, the decoder start it replaces with a zero embedding)."""
    vocab = json.loads((hf_folder / "vocab.json").read_text(encoding="utf-8"))
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    theirs = ct2_vocabulary(ct2_dir)
    if tokens[: len(theirs)] != theirs or len(tokens) - len(theirs) not in (0, 1):
        raise SystemExit(f"{ct2_dir}'s vocabulary ({len(theirs)} tokens) is not {hf_folder}/vocab.json's "
                         f"({len(tokens)}); a --ct2-dir converted from another folder?")
    return tokens


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_folder", type=Path, help="a Marian folder with vocab.json (transformers' layout)")
    parser.add_argument("--export", type=Path, required=True,
                        help="the folder's tfm-export export (`load`'s workload reads its vocab size and max_len)")
    parser.add_argument("--batch", type=int, default=16, help="requests per static batch (default: 16)")
    parser.add_argument("--beams", type=int, default=4, help="beam_size (default: 4)")
    parser.add_argument("--new-tokens", default="4:64", help="max_new_tokens per request, N or LOW:HIGH, as `load`'s")
    parser.add_argument("--max-src-len", type=int, default=None, help="as `load`'s: sources shorter than half of it "
                        "(default: the export's max_len)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed, as `load`'s (default: 0)")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 intra_threads (default: 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the pool (default: 3)")
    parser.add_argument("--ct2-dir", type=Path, default=None,
                        help="convert into (or reuse) this folder (default: a temporary one, deleted at the end)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    return parser


def static_batches(pool: list[tuple[list[int], int]], tokens: list[str], size: int
                   ) -> list[tuple[list[list[str]], list[int]]]:
    """The pool in consecutive static batches of `size`: (sources as tokens, each request's max_new_tokens)."""
    batches = [pool[i:i + size] for i in range(0, len(pool), size)]
    return [([[tokens[t] for t in ids] for ids, _ in b], [k for _, k in b]) for b in batches]


def passes(translator: Any, batches: list[tuple[list[list[str]], list[int]]], src_tokens: int,
           args: argparse.Namespace) -> list[dict[str, Any]]:
    """--repeat timed passes over the batches, after one untimed warm-up batch; a row per pass."""

    def decode(src: list[list[str]], limits: list[int]) -> tuple[int, int]:
        results = translator.translate_batch(src, beam_size=args.beams, max_decoding_length=max(limits))
        lengths = [len(r.hypotheses[0]) for r in results]
        return sum(lengths), sum(min(n, k) for n, k in zip(lengths, limits))

    decode(*batches[0])  # warm-up
    repeats = []
    for repeat in range(args.repeat):
        counts: list[tuple[int, int]] = []
        wall = harness.timed(lambda: counts.extend(decode(src, limits) for src, limits in batches))
        generated, useful = sum(c[0] for c in counts), sum(c[1] for c in counts)
        repeats.append({"repeat": repeat, "wall_s": wall, "src_tokens": src_tokens, "generated_tokens": generated,
                        "useful_tokens": useful, "src_tokens_per_s": src_tokens / wall,
                        "tokens_per_s": generated / wall, "useful_tokens_per_s": useful / wall})
        print(f"repeat {repeat}: {wall:.2f} s, {src_tokens / wall:.1f} source tokens/s, "
              f"{generated / wall:.1f} generated tokens/s ({generated} tokens; {useful / wall:.1f}/s, {useful}, "
              f"within each request's max_new_tokens)", flush=True)
    return repeats


def ct2_batch_main() -> None:
    args = parser().parse_args()
    if args.json and (args.json.exists() or args.json.is_symlink()) and (args.json.is_symlink()
                                                                         or not is_report(args.json)):
        raise SystemExit(f"{args.json} exists and is not {CT2_OURS[0]}; choose another name")
    import ctranslate2

    machine = {**machine_info(args.threads), "ctranslate2": ctranslate2.__version__}
    print(f"CPU {machine['cpu']}, {machine['cores']} cores, {args.threads} threads; "
          f"ctranslate2 {machine['ctranslate2']}, onnxruntime {machine['onnxruntime']}", flush=True)
    config = load_manifest(args.export, verify_hashes=False).config
    vocab_size = len(json.loads((args.hf_folder / "vocab.json").read_text(encoding="utf-8")))
    if config.src_vocab_size != vocab_size:
        raise SystemExit(f"{args.export} has {config.src_vocab_size} source ids, {args.hf_folder}/vocab.json "
                         f"{vocab_size}: not an export of this folder")
    pool = workload(args.export, args.new_tokens, args.seed, args.max_src_len)
    with tempfile.TemporaryDirectory(prefix="tfm-ct2-batch-") as tmp:
        ct2_dir = args.ct2_dir or Path(tmp) / "model"
        convert_s = converted(args.hf_folder, ct2_dir)
        print(f"CTranslate2 model {ct2_dir}: " + ("reused" if convert_s is None else f"converted in {convert_s:.1f} s"),
              flush=True)
        tokens = id_tokens(args.hf_folder, ct2_dir)
        translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="float32",
                                            inter_threads=1, intra_threads=args.threads)
        batches = static_batches(pool, tokens, args.batch)
        src_tokens = sum(len(ids) for ids, _ in pool)
        repeats = passes(translator, batches, src_tokens, args)
    median = {k: harness.median(r[k] for r in repeats)
              for k in ("wall_s", "src_tokens_per_s", "tokens_per_s", "useful_tokens_per_s")}
    print(f"CTranslate2 beam {args.beams}, static batches of {args.batch} ({len(batches)} per pass, {len(pool)} "
          f"requests, {src_tokens} source tokens), median of {args.repeat}: {median['wall_s']:.2f} s, "
          f"{median['src_tokens_per_s']:.1f} source tokens/s, {median['tokens_per_s']:.1f} generated tokens/s "
          f"({median['useful_tokens_per_s']:.1f} within max_new_tokens)",
          flush=True)
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        report = {"tool": TOOL, "machine": machine, "settings": settings, "convert_s": convert_s,
                  "requests": len(pool), "batches": len(batches), "repeats": repeats, "median": median}
        write_file_atomically(args.json, lambda p: p.write_text(json.dumps(report, indent=1) + "\n"), CT2_OURS)
        print(f"wrote {args.json}")
