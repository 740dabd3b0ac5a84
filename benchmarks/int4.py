"""What 4 bits cost on trained models, one scenario each (investigations of the quality table's int4 rows, #41):
`int4-sensitivity` (which weight classes the 4 bits cost, in the eager model) and `wide-fixture` (a fixture trained
512 or 1024 wide, measured by the quality table)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from tfm_export.bench import fixtures
from benchmarks.quality import measure, trained_fixture, variant_options, versions
from tfm_export.bench import harness
from tfm_export.bench.quality import markdown


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
    parser = argparse.ArgumentParser(description=INT4_SENSITIVITY_DOC.split("\n\n")[0])
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
    metrics = None
    if folder.exists() and not (folder / "model.safetensors").exists():
        raise SystemExit(f"{folder} exists and holds no trained model; remove it or choose another --work")
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))  # train() replaces its folder
        layers = fixtures.hf().SHAPES["trained"][args.family]
        # heads of 64, as Marian's, NLLB's and T5's (d_kv)
        shape = fixtures.hf().Shape(args.d_model, layers.encoder_layers, layers.decoder_layers, args.d_model // 64, args.ffn,
                        64 if layers.d_kv else 0)
        metrics = fixtures.train().train(args.family, args.steps, folder=stage, shape=shape, lr=args.lr, threads=args.threads)
        stage.rename(folder)
    fixture = dataclasses.replace(trained_fixture(args.family, args.numbers), name=name, model=folder)
    blocks = tuple(int(b) for b in args.blocks.split(",") if b)
    methods = tuple(m for m in args.methods.split(",") if m)
    variants = variant_options((4,), blocks, methods, (), ())
    rows = measure(fixture, args.work, variants)
    if args.json:
        harness.write_text(args.json, json.dumps({"versions": versions(), "training": metrics, "rows": rows}, indent=1))
    print(markdown(rows))
