r"""Which weights does 4-bit rounding cost quality on? A trained fixture with some weights rounded to 4 bits (#41).

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

from __future__ import annotations

from pathlib import Path
from typing import Any
import argparse
import json

from benchmarks import fixtures
from tfm_export.bench import harness


BLOCK = 32  # the block `--int4-block-size auto` gives weights under 1024 inputs (every fixture weight)
SENSITIVITY_BATCH = 50


def rtn(weight: Any, block: int = BLOCK) -> Any:
    """`weight` (out, in) rounded to 4 bits in blocks of `block` inputs and back (export.int4's rtn: ORT's packing)."""
    import torch

    out, k = weight.shape
    x = torch.nn.functional.pad(weight, (0, (-k) % block)).reshape(out, -1, block)
    low, high = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    scale = (high - low) / 15
    scale[scale == 0] = 1
    zero = torch.round(-low / scale).clamp(0, 15)
    return ((torch.clamp(torch.round(x / scale + zero), 0, 15) - zero) * scale).reshape(out, -1)[:, :k]


def weight_class(name: str) -> str:
    """encoder.self.q_proj, decoder.cross.out_proj, decoder.ffn.fc2, ... (BART-like and T5 module names)."""
    side = "encoder" if ".encoder." in f".{name}" and "encoder_attn" not in name else "decoder"
    part = ("cross" if "encoder_attn" in name or "EncDecAttention" in name else
            "self" if "self_attn" in name or "SelfAttention" in name else "ffn")
    return f"{side}.{part}.{name.split('.')[-1]}"


class Probe:
    """A fixture's eager model, its float32 outputs on the held-out sources, and decodes with weights rounded."""

    def __init__(self, family: str, numbers: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        folder = fixtures.hf().trained_folder(family)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if any(fixtures.hf().lang_code(family, lang) for lang in fixtures.hf().TARGETS[family]):
            raise SystemExit(f"{family} takes language tokens; this probe decodes families whose source says the "
                             f"target (marian, bart, pegasus, t5, flan_t5, mt5)")
        examples = [fixtures.hf().example(family, n, lang) for lang in fixtures.hf().TARGETS[family] for n in fixtures.hf().split_numbers()[1][:numbers]]
        self.sources, self.references = [e.source for e in examples], [e.target for e in examples]
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.original = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.linears = {name: weight_class(name) for name, m in self.model.named_modules()
                        if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
        self.float32 = self.decode()

    def decode(self) -> list[str]:
        import torch

        out: list[str] = []
        for i in range(0, len(self.sources), SENSITIVITY_BATCH):
            batch = self.tokenizer(self.sources[i:i + SENSITIVITY_BATCH], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = self.model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=64)
            out += [t.strip() for t in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        return out

    def rounded(self, classes: set[str]) -> dict[str, float]:
        """% of outputs identical to float32's and chrF against the references, the weights of `classes` 4-bit."""
        import sacrebleu
        import torch

        self.model.load_state_dict(self.original)
        modules = dict(self.model.named_modules())
        with torch.no_grad():
            for name, cls in self.linears.items():
                if cls in classes:
                    modules[name].weight.copy_(rtn(modules[name].weight))
        outs = self.decode()
        same = sum(a == b for a, b in zip(outs, self.float32))
        return {"identical": round(100 * same / len(outs), 1),
                "chrf": round(sacrebleu.corpus_chrf(outs, [self.references]).score, 2)}


def int4_sensitivity_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", help="a trained fixture: marian, bart, pegasus, t5, ...")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers decoded")
    parser.add_argument("--keep", default="", help="class sets kept float32 (the rest 4-bit), ';' between sets")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    probe = Probe(args.family, args.numbers)
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


