"""runtimes/fixtures/expected.json: the Python runtime's output that Node and the browser must match.

    .venv/bin/python runtimes/make_fixture.py             # check the committed fixture (exit 1 if stale)
    .venv/bin/python runtimes/make_fixture.py --update    # rewrite it
    ... [--export-dir DIR]                                # use an existing export of the bundled model

Without --export-dir the bundled model (models/num2words-de) is exported to a temporary folder first.
The fixture holds only export-independent data: inputs, their source ids, and the torch-free runtime's
output: greedy ids and texts, beam search n-best lists and seeded samples (ids and scores), and greedy
decoding with the logits processors. tests/test_runtimes_fixture.py checks the committed file on every
test run: ids equal, scores within SCORE_TOLERANCE relative beyond 1, the rule the Node tests use. Scores
are sums of float32 log-probabilities, and ONNX Runtime's float32 kernels round differently on another
CPU (its vector width picks the kernel): between two x86 machines the same export moved beam scores by
up to 2.5e-7 on -0.73 and sampled ones by 5.8e-6 on -88.7, with every token the same.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = HERE / "fixtures" / "expected.json"
BUNDLED = ROOT / "models" / "num2words-de"
COUNT = 8  # held-out inputs: different lengths, so batches are padded
TRUNCATE_AT = 7  # a max_new_tokens case: rows cut before their EOS
SCORE_TOLERANCE = 1e-6  # times max(1, |score|): another CPU's float32 rounding (see above); Node's rule too
# Decoding settings beyond greedy (GenerationConfig fields) and how many of the inputs each decodes in
# one batch: n-best beam search with each early_stopping rule and length penalties, seeded sampling
# with every warper, and the processors. Temperatures above 1 make the confident model's samples vary.
SEARCHES = (
    ({"num_beams": 4, "num_return_sequences": 4}, COUNT),
    ({"num_beams": 4, "num_return_sequences": 2, "length_penalty": 0.6, "early_stopping": True}, 4),
    ({"num_beams": 3, "num_return_sequences": 3, "length_penalty": 1.5, "early_stopping": "never",
      "max_new_tokens": 12}, 3),
    ({"do_sample": True, "seed": 1, "temperature": 2.0, "num_return_sequences": 2}, 4),
    ({"do_sample": True, "seed": 2024, "temperature": 3.0, "top_k": 6, "top_p": 0.9}, 3),
    ({"repetition_penalty": 1.3, "no_repeat_ngram_size": 3, "min_new_tokens": 30}, 3),
    ({"num_beams": 2, "num_return_sequences": 2, "no_repeat_ngram_size": 2, "repetition_penalty": 2.0}, 2),
)


def build(export_dir: str | Path, count: int = COUNT) -> dict:
    """Inputs from the held-out set, with the torch-free Python runtime's ids and texts."""
    from tfm_export.demo import read_heldout
    from tfm_export.runtime import open_export

    model = open_export(export_dir, device="cpu")
    inputs = [source for source, _ in read_heldout(BUNDLED / "heldout.tsv", count)]
    sources = [model.tokenizer.encode(text) for text in inputs]
    ids = model.generate_ids(sources)  # one padded batch
    short = model.generate_ids(sources[:3], max_new_tokens=TRUNCATE_AT)
    return {
        "model": "models/num2words-de",
        "made_by": "runtimes/make_fixture.py (tfm_export.runtime, device cpu)",
        "cases": [{"input": text, "source_ids": src, "ids": row, "text": model.tokenizer.decode(row)}
                  for text, src, row in zip(inputs, sources, ids)],
        "truncated": {"max_new_tokens": TRUNCATE_AT, "inputs": inputs[:3], "ids": short,
                      "texts": [model.tokenizer.decode(row) for row in short]},
        "searches": [{"options": options, "inputs": inputs[:count],
                      "hypotheses": [[{"ids": h.ids, "score": h.score} for h in hyps]
                                     for hyps in model.generate(sources[:count], **options)]}
                     for options, count in SEARCHES],
    }


def same(a, b) -> bool:
    """Equal fixtures, floats (scores) within SCORE_TOLERANCE * max(1, |score|)."""
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and abs(a - b) <= SCORE_TOLERANCE * max(1.0, abs(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def load() -> dict:
    """The committed fixture."""
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def dumps(fixture: dict) -> str:
    return json.dumps(fixture, ensure_ascii=False, indent=1) + "\n"


def export_bundled(out: Path) -> Path:
    """Export the bundled model to `out` (no validation: the test suite validates it elsewhere)."""
    from tfm_export.model.checkpoint import load_checkpoint
    from tfm_export.export.exporter import ExportOptions, export_model

    export_model(load_checkpoint(BUNDLED / "model.pt"), out, ExportOptions(validate=False))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the fixture instead of checking it")
    parser.add_argument("--export-dir", type=Path, help="an existing export of the bundled model")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build(args.export_dir or export_bundled(Path(tmp) / "model_onnx"))
    if args.update:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(dumps(fresh), encoding="utf-8")
        print(f"wrote {FIXTURE}")
        return 0
    if FIXTURE.exists() and same(load(), fresh):
        print(f"{FIXTURE} is up to date")
        return 0
    print(f"{FIXTURE} is stale or missing: run `python runtimes/make_fixture.py --update`", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing
    sys.exit(main())
