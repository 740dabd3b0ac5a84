"""The words of a validation report (export.validation_report): the default decoding's line says what differs
(tokens or only the logits along the search) and whether the variant's mode fails on it."""

from __future__ import annotations

import pytest

from tfm_export.export.validation_report import format_report

REFERENCE = "eager beam search oracle (on the runtime's logits)"


def default(equal: bool, rows: list[int], logits_ok: bool = True) -> dict:
    return {"config": {"num_beams": 4}, "reference": REFERENCE, "sources": 16, "equal": equal,
            "mismatched_rows": rows, "logits": {"max_abs": 0.5 if not logits_ok else 1e-6, "ok": logits_ok}}


@pytest.mark.parametrize("mode, case, expected", [
    ("parity", default(True, []), f"equal to the {REFERENCE} on 16 sources; its logits within 1.00e-06 of eager's"),
    ("parity", default(False, [3, 5]), f"DIFFERS from the {REFERENCE} on rows [3, 5]; its logits within"),
    ("agreement", default(False, [3]), f"differs from the {REFERENCE} on rows [3] (agreement: reported, not failed)"),
    ("agreement", default(False, [], logits_ok=False),
     f"the same tokens as the {REFERENCE} on 16 sources; its logits up to 5.00e-01 from eager's, beyond the "
     "tolerance (agreement: reported, not failed)"),
    ("tolerance", default(False, [], logits_ok=False), "beyond the tolerance (tolerance: reported, not failed)"),
])
def test_the_default_decoding_line_says_what_differs(mode, case, expected):
    lines = format_report({"mode": mode, "outputs": {}, "default": case}).splitlines()
    line = next(ln for ln in lines if ln.startswith("default decoding (num_beams 4): "))
    assert expected in line
