r"""int4 on weights of a real model's width (#41): a wide model trained on the fixtures' task, measured.

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

from __future__ import annotations

from pathlib import Path
import argparse
import dataclasses
import json
import tempfile

from benchmarks import fixtures
from benchmarks.quality.report import markdown
from benchmarks.quality.sets import trained_fixture
from benchmarks.quality.table import measure, variant_options, versions
from tfm_export.bench import harness


def wide_fixture_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
