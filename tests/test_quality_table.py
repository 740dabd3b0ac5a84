"""`python -m benchmarks quality-table`'s core (benchmarks/quality.py) (#41) on one trained fixture and a few held-out numbers: the table's
numbers are consistent. float32 against itself is chrF 100 and 100 % identical; its exact matches of the
references are those counted here; a variant with damaged weights scores lower against both, and the summary
says it misses the target; the paired bootstrap finds the damaged variant below float32 and an equal one not;
CTranslate2's float32 conversion decodes greedily exactly as the export does (the table's CTranslate2 rows read
the export's ids)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

pytest.importorskip("sacrebleu")
pytest.importorskip("transformers")

from benchmarks import quality as quality_table  # noqa: E402 (after the skips: it needs transformers)
from benchmarks.quality import markdown, significantly_below, verdicts  # noqa: E402
from tfm_export.export.quality import identical  # noqa: E402

FAMILY = "marian"  # two target languages (>>en<< / >>de<< in the source)
NUMBERS = 6  # held-out numbers: 12 sources


def damaged(folder: Path, out: Path) -> Path:
    """A copy of the export whose decoder matrices carry noise as large as the weights: it still decodes."""
    shutil.copytree(folder, out)
    model = onnx.load(str(out / "decoder.onnx"))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) == 2:
            w = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((w + rng.normal(0, w.std(), w.shape)).astype(np.float32), init.name))
    onnx.save(model, str(out / "decoder.onnx"))
    return out


@pytest.fixture(scope="module")
def table(trained_export, tmp_path_factory):
    """The rows of float32, the damaged copy and CTranslate2 float32, greedy, and the fixture."""
    quality_ct2 = quality_table  # CTranslate2's rows: tfm_export/bench/ct2_decode.py

    pytest.importorskip("ctranslate2")
    work = tmp_path_factory.mktemp("quality")
    fixture = quality_table.trained_fixture(FAMILY, NUMBERS)
    float32, runner = quality_table.ort_decoder(trained_export(FAMILY), fixture)
    bad, _ = quality_table.ort_decoder(damaged(trained_export(FAMILY), work / "damaged"), fixture, verify=False)
    ct2_dir = quality_ct2.convert_folder(fixture.model, work / "ct2")
    decoders = {"float32": float32, "int4": bad, "ct2 float32": quality_ct2.TextDecoder(ct2_dir, "float32", runner)}
    greedy = {"greedy": quality_table.decodings(fixture, runner)["greedy"]}
    outputs = quality_table.decode_all(fixture, decoders, greedy)
    return quality_table.score_rows(fixture, outputs), outputs["greedy"], fixture


def test_float32_against_itself_and_the_references(table):
    rows, outputs, fixture = table
    row = next(r for r in rows if r["variant"] == "float32")
    assert row["size"] == 2 * NUMBERS and [g.lang for g in fixture.groups] == ["en", "de"]
    assert row["float32"] == {"chrf": 100.0, "bleu": 100.0, "identical": 100.0}
    references = [r for g in fixture.groups for r in g.references]
    exact = sum(o == r for o, r in zip(outputs["float32"], references))
    assert row["references"]["identical"] == round(100 * exact / len(references), 2)
    assert exact >= NUMBERS  # the fixture spells most held-out numbers right (tests/fixtures/README.md: ~70 %)
    assert 0 < row["references"]["chrf"] <= 100 and (row["references"]["chrf"] == 100) == (exact == len(references))


def test_a_damaged_variant_scores_lower_and_misses_the_target(table):
    rows, outputs, _ = table
    float32, bad = (next(r for r in rows if r["variant"] == v) for v in ("float32", "int4"))
    assert bad["float32"]["identical"] < 100 and bad["float32"]["chrf"] < 100
    assert bad["float32"]["identical"] == identical(outputs["int4"], outputs["float32"])
    assert bad["references"]["chrf"] < float32["references"]["chrf"] - 1
    variants = {r["variant"]: r for r in rows}
    assert verdicts(variants) == (False, None)  # more than 1 chrF lost; no CTranslate2 int8 row to compare
    text = markdown(rows)
    assert text.startswith("int4 within 1 point of float32: 0 of 1 cases") and "| **no** |" in text


def test_ctranslate2_float32_decodes_as_the_export(table):
    rows, outputs, _ = table
    assert outputs["ct2 float32"] == outputs["float32"]
    assert next(r for r in rows if r["variant"] == "ct2 float32")["float32"]["identical"] == 100.0


def test_the_paired_bootstrap_tells_a_real_shortfall_from_none(table):
    """Against float32's outputs as the baseline: the damaged variant's chrF is lower with p under 0.05, float32
    against itself differs by nothing (sacrebleu gives no difference its smallest p, as real: not below); the
    report reads the verdict from the row."""
    rows, outputs, fixture = table
    references = [r for g in fixture.groups for r in g.references]
    worse = quality_table.paired_bootstrap(outputs["float32"], outputs["int4"], references)
    same = quality_table.paired_bootstrap(outputs["float32"], outputs["float32"], references)
    bad = next(r for r in rows if r["variant"] == "int4")
    assert worse["chrf_delta"] == round(bad["references"]["chrf"] - rows[0]["references"]["chrf"], 2) < -1
    assert worse["p"] < 0.05 and same["chrf_delta"] == 0.0
    assert significantly_below({**bad, "versus_ct2_int8": worse}) is True
    assert significantly_below({**bad, "versus_ct2_int8": same}) is False
    assert significantly_below(bad) is None  # no CTranslate2 int8 row in this table: nothing tested


def test_the_wer_bootstrap_tells_a_real_shortfall_from_none():
    """Speech rows: WER resampled by utterance. A variant that drops a word in half the utterances is worse with a
    small p; one word of 60 utterances is within chance; the same outputs differ by nothing (not worse)."""
    references = [f"{n} one two three" for n in range(60)]
    clipped = [r.rsplit(" ", 1)[0] for r in references]
    worse = quality_table.paired_bootstrap_wer(references, clipped[:30] + references[30:], references)
    one = quality_table.paired_bootstrap_wer(references, clipped[:1] + references[1:], references)
    same = quality_table.paired_bootstrap_wer(references, references, references)
    assert worse["wer_delta"] == 12.5 and worse["p"] < 0.05
    assert one["wer_delta"] == round(100 / 240, 2) and one["p"] > 0.05
    assert same["wer_delta"] == 0.0
    row = {"kind": "speech"}
    assert [significantly_below({**row, "versus_ct2_int8": t}) for t in (worse, one, same)] == [True, False, False]
