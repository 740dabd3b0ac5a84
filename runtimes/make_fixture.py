"""Write runtimes/fixtures/expected.json: the Python runtime's output that Node and the browser must match.

    .venv/bin/python runtimes/make_fixture.py EXPORT_DIR
The test suite (tests/test_runtimes.py) checks the committed file against a fresh export.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "expected.json"
HELDOUT = HERE.parent / "models" / "num2words-de" / "heldout.tsv"


def build(export_dir: str | Path, count: int = 8) -> dict:
    """Inputs from the held-out set, with the torch-free Python runtime's ids and texts."""
    from tfm_export.demo import read_heldout
    from tfm_export.runtime import open_export

    model = open_export(export_dir, device="cpu")
    inputs = [source for source, _ in read_heldout(HELDOUT, count)]
    sources = [model.tokenizer.encode(text) for text in inputs]
    ids = model.generate_ids(sources)
    return {"model": "models/num2words-de", "cases": [
        {"input": text, "source_ids": src, "ids": row, "text": model.tokenizer.decode(row)}
        for text, src, row in zip(inputs, sources, ids)]}


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(build(sys.argv[1]), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
