"""Quality of reduced precision on trained models, a module per concept: sets (the trained fixtures' held-out
sources), table (`quality-table`: export, decode and score every variant), bootstrap (each int4 row against
CTranslate2 int8), report (the table's Markdown and verdicts), ct2 (CTranslate2's conversions and decoders),
sensitivity (`int4-sensitivity`: which weights the 4 bits cost) and wide (`wide-fixture`: a fixture trained wide).

The names the tests and `documents` read are re-exported here."""

from benchmarks.quality.bootstrap import paired_bootstrap, paired_bootstrap_wer
from benchmarks.quality.ct2 import TextDecoder, WhisperDecoder, convert_folder, convert_native
from benchmarks.quality.report import markdown, significantly_below, verdicts
from benchmarks.quality.sets import Fixture, Group, trained_fixture
from benchmarks.quality.table import decode_all, decodings, measure, ort_decoder, score_rows

__all__ = ["Fixture", "Group", "TextDecoder", "WhisperDecoder", "convert_folder", "convert_native", "decode_all",
           "decodings", "markdown", "measure", "ort_decoder", "paired_bootstrap", "paired_bootstrap_wer",
           "score_rows", "significantly_below", "trained_fixture", "verdicts"]
