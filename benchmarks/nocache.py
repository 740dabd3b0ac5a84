r"""What a decoder without a KV cache costs (#42): the tutorial model of ../shared/seeds/000, exported both ways.

    .venv/bin/python -m benchmarks nocache [--threads 2] [--repeat 5] [--json out.json]

Seed 000's model (tests/reference_models.TutorialTransformer at its tutorial size: d_model 512, 6+6
layers, 8 heads, d_ff 2048; random weights, vocabularies of 8,000) is exported by the native path
(load_any on its state_dict, decoder.onnx with a KV cache) and by the generic one (`tfm-export MODEL.pt
--trust-pickle --adapter benchmarks.nocache:ADAPTER`: export_with_adapter with this module's ADAPTER, so
decoder_nocache.onnx, which reads the whole prefix every step). Both are timed on CPU in one
interleaved run: batch 1 and 8 (sources of 24 tokens), greedy and beam search with 4 beams, 16 and 64
new tokens (EOS ignored: stop_at_eos=False, every row decodes all of them). Each round times every
(export, batch, decoding, N) in turn; per step, (t(N) - t(1)) / (N - 1), so the encoder and set-up
cancel; ms per generated token = that / batch (a beam search still yields one token per source per
step). Medians over --repeat rounds; both exports' ids are checked equal before timing.

A smoke run (tiny model, one round): --tiny --repeat 1.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch

from tfm_export.bench import fixtures, harness
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.module_export import export_with_adapter, load_adapter
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export

PAD, BOS, EOS = 0, 1, 2
# the tutorial's own size (its defaults), and a tiny one for a smoke run
SIZES = {"tutorial": dict(embed_size=512, num_layers=6, forward_expansion=4, heads=8, vocab=8000),
         "tiny": dict(embed_size=32, num_layers=2, forward_expansion=2, heads=4, vocab=60)}
DECODINGS = {"greedy": 1, "beam 4": 4}  # name -> num_beams
BATCHES = (1, 8)
NEW_TOKENS = (16, 64)
SRC_LEN = 24
MAX_LEN = 96  # positions: the source, or BOS + 64 new tokens


def encode(model: Any, src_ids, src_mask):
    return model.encoder(src_ids, src_mask[:, None, None, :])


def decode(model: Any, tgt_ids, memory, src_mask):
    return model.decoder(tgt_ids, memory, src_mask[:, None, None, :], model.make_trg_mask(tgt_ids))


# What `--adapter benchmarks.nocache:ADAPTER` names; vocabularies set per size.
ADAPTER = SimpleNamespace(encode=encode, decode=decode, bos_id=BOS, eos_id=EOS, src_pad_id=PAD, tgt_pad_id=PAD,
                          max_len=MAX_LEN)


def exports(size: dict[str, int], folder: Path) -> dict[str, Path]:
    """The model exported natively (KV cache) and through the adapter (no cache); the folders by name."""
    torch.manual_seed(0)
    vocab = size["vocab"]
    module = fixtures.reference_models().TutorialTransformer(vocab, vocab, PAD, PAD, embed_size=size["embed_size"], num_layers=size["num_layers"],
                                 forward_expansion=size["forward_expansion"], heads=size["heads"],
                                 max_length=MAX_LEN).eval()
    torch.save(module.state_dict(), folder / "model.pt")
    checkpoint = load_any(folder / "model.pt", options={"heads": size["heads"], "src_pad_id": PAD, "bos_id": BOS,
                                                        "eos_id": EOS})
    export_model(checkpoint, folder / "cache", ExportOptions(validate=False))
    export_with_adapter(module, load_adapter("benchmarks.nocache:ADAPTER"), folder / "nocache", src_vocab_size=vocab,
                        tgt_vocab_size=vocab, validate=False)
    return {"KV cache": folder / "cache", "no cache": folder / "nocache"}


def runner(model: Any, src: list[list[int]], beams: int) -> Callable[[int], Callable[[], Any]]:
    """k -> a call decoding exactly k new tokens per source."""
    config = GREEDY.replace(num_beams=beams)
    return lambda k: lambda: model.generate_ids(src, max_new_tokens=k, stop_at_eos=False, config=config)


def nocache_measure(models: dict[str, Any], vocab: int, repeat: int) -> list[dict[str, Any]]:
    """Every (export, batch, decoding, N), interleaved round by round; medians of the per-step times."""
    gen = torch.Generator().manual_seed(1)
    cases = []
    for batch in BATCHES:
        src = torch.randint(3, vocab, (batch, SRC_LEN), generator=gen).tolist()
        for decoding, beams in DECODINGS.items():
            runs = {name: runner(model, src, beams) for name, model in models.items()}
            same = len({json.dumps(run(max(NEW_TOKENS))()) for run in runs.values()}) == 1  # and a warm-up
            for n in NEW_TOKENS:
                cases += [{"export": name, "batch": batch, "decoding": decoding, "new_tokens": n, "run": run,
                           "same_ids": same, "step_s": []} for name, run in runs.items()]
    for _ in range(repeat):
        for case in cases:
            n, run = case["new_tokens"], case["run"]
            case["step_s"].append((harness.timed(run(n)) - harness.timed(run(1))) / (n - 1))
    rows = []
    for case in cases:
        step_ms = 1e3 * harness.median(case.pop("step_s"))
        case.pop("run")
        rows.append({**case, "step_ms_p50": step_ms, "ms_per_token_p50": step_ms / case["batch"]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per (batch, decoding, N), both exports' ms per generated token and their ratio."""
    lines = ["| batch | decoding | new tokens | KV cache ms/token | no cache ms/token | no cache / KV cache |",
             "|---:|---|---:|---:|---:|---:|"]
    keyed = {(r["batch"], r["decoding"], r["new_tokens"], r["export"]): r["ms_per_token_p50"] for r in rows}
    for batch in BATCHES:
        for decoding in DECODINGS:
            for n in NEW_TOKENS:
                cache, nocache = keyed[batch, decoding, n, "KV cache"], keyed[batch, decoding, n, "no cache"]
                lines.append(f"| {batch} | {decoding} | {n} | {cache:.2f} | {nocache:.2f} | {nocache / cache:.2f} |")
    return "\n".join(lines)


def nocache_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of the tutorial's size (smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = SIZES["tiny" if args.tiny else "tutorial"]
    with tempfile.TemporaryDirectory() as tmp:
        folders = exports(size, Path(tmp))
        options = RuntimeOptions(intra_op_threads=args.threads)
        models = {name: open_export(folder, "cpu", options) for name, folder in folders.items()}
        rows = nocache_measure(models, size["vocab"], args.repeat)
    print(f"seed 000's tutorial model ({'tiny' if args.tiny else 'tutorial size'}: {size}), random weights, "
          f"src_len {SRC_LEN}, CPU, {args.threads} threads, medians of {args.repeat} interleaved rounds")
    print(table(rows))
    if not all(r["same_ids"] for r in rows):
        print("note: the two exports' ids differ somewhere (random weights: near ties at float precision)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))

