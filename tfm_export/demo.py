"""The demo's library side: translate sample inputs with ORT next to eager, and read held-out files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .errors import InputError


def read_heldout(path: str | os.PathLike, limit: int | None = None) -> list[tuple[str, str]]:
    """`source<TAB>expected` lines (a model card's held-out set); InputError when there are none (a wrong
    file, found before the demo exports rather than after)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; pass a file of source<TAB>expected lines") from None
    lines = [line.partition("\t") for line in text.splitlines() if "\t" in line]
    if not lines:
        raise InputError(f"{path} has no source<TAB>expected lines")
    return [(source, expected) for source, _, expected in lines][:limit]


def compare_samples(runtime: Any, eager: Any, texts: Sequence[str], expected: Sequence[str | None]
                    ) -> list[dict[str, Any]]:
    """One row per input: ORT output, eager output, whether they match, and whether it is right."""
    ort_out = runtime.translate(list(texts))
    eager_out = eager.translate(list(texts))
    return [{"input": t, "ort": o, "eager": e, "expected": x, "ort_equals_eager": o == e,
             "correct": None if x is None else o == x}
            for t, o, e, x in zip(texts, ort_out, eager_out, expected)]


def format_samples(rows: list[dict[str, Any]]) -> str:
    """The comparison as a text table."""
    width_in = max(len("input"), *(len(r["input"]) for r in rows))
    width_out = max(len("ONNX Runtime output"), *(len(r["ort"]) for r in rows))
    lines = [f"{'input':<{width_in}}  {'ONNX Runtime output':<{width_out}}  ORT==eager  correct"]
    for r in rows:
        correct = "-" if r["correct"] is None else ("yes" if r["correct"] else "NO")
        lines.append(f"{r['input']:<{width_in}}  {r['ort']:<{width_out}}  "
                     f"{'yes' if r['ort_equals_eager'] else 'NO':<10}  {correct}")
    return "\n".join(lines)
