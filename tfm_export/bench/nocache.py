"""What `nocache` measures (benchmarks/forms.py): seed 000's tutorial model (tests/reference_models.py's
TutorialTransformer, read through fixtures) exported natively (decoder.onnx with a KV cache) and through this
module's ADAPTER (`--adapter tfm_export.bench.nocache:ADAPTER`: decoder_nocache.onnx, which reads the whole prefix
every step); ms per generated token of both, interleaved, and the table of their ratios."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from . import fixtures, harness

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


# What `--adapter tfm_export.bench.nocache:ADAPTER` names; vocabularies set per size.
ADAPTER = SimpleNamespace(encode=encode, decode=decode, bos_id=BOS, eos_id=EOS, src_pad_id=PAD, tgt_pad_id=PAD,
                          max_len=MAX_LEN)


def exports(size: dict[str, int], folder: Path) -> dict[str, Path]:
    """The model exported natively (KV cache) and through the adapter (no cache); the folders by name."""
    import torch

    from ..export.exporter import ExportOptions, export_model
    from ..export.module_export import export_with_adapter, load_adapter
    from ..importers import load_any

    torch.manual_seed(0)
    vocab = size["vocab"]
    module = fixtures.reference_models().TutorialTransformer(
        vocab, vocab, PAD, PAD, embed_size=size["embed_size"], num_layers=size["num_layers"],
        forward_expansion=size["forward_expansion"], heads=size["heads"], max_length=MAX_LEN).eval()
    torch.save(module.state_dict(), folder / "model.pt")
    checkpoint = load_any(folder / "model.pt", options={"heads": size["heads"], "src_pad_id": PAD, "bos_id": BOS,
                                                        "eos_id": EOS})
    export_model(checkpoint, folder / "cache", ExportOptions(validate=False))
    export_with_adapter(module, load_adapter(f"{__name__}:ADAPTER"), folder / "nocache", src_vocab_size=vocab,
                        tgt_vocab_size=vocab, validate=False)
    return {"KV cache": folder / "cache", "no cache": folder / "nocache"}


def runner(model: Any, src: list[list[int]], beams: int) -> Callable[[int], Callable[[], Any]]:
    """k -> a call decoding exactly k new tokens per source."""
    from ..runtime import GREEDY

    config = GREEDY.replace(num_beams=beams)
    return lambda k: lambda: model.generate_ids(src, max_new_tokens=k, stop_at_eos=False, config=config)


def measure(models: dict[str, Any], vocab: int, repeat: int) -> list[dict[str, Any]]:
    """Every (export, batch, decoding, N), interleaved round by round; medians of the per-step times."""
    import torch

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
