"""The quality report of a reduced-precision export (export.quality, #41), on the trained bundled model
(models/num2words-de) and its held-out set: chrF and BLEU against float32's outputs and against the
references go into the manifest, `tfm-export validate` prints them, and `--max-quality-drop` fails an
export that lost quality (an int8 variant corrupted on purpose here) without writing anything.
(Speech's WER report: tests/test_whisper_trained.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

pytest.importorskip("torch")
pytest.importorskip("sacrebleu")

from helpers import run_cli  # noqa: E402
from tfm_export.cli import cli  # noqa: E402
from tfm_export.errors import InputError, ValidationError  # noqa: E402
from tfm_export.export import variants  # noqa: E402
from tfm_export.export.exporter import ExportOptions, export_model  # noqa: E402
from tfm_export.export.quality import identical, quality_drop, read_eval_file  # noqa: E402
from tfm_export.importers import load_model  # noqa: E402

BUNDLED = Path(__file__).resolve().parents[1] / "models" / "num2words-de"
HELDOUT_LINES = 40  # enough to score, quick to decode twice


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "heldout.tsv"
    path.write_text("\n".join((BUNDLED / "heldout.tsv").read_text().splitlines()[:HELDOUT_LINES]) + "\n")
    return path


def test_int8_report_is_in_the_manifest_and_printed(tmp_path, eval_file):
    out = tmp_path / "int8"
    result = CliRunner().invoke(cli, [str(BUNDLED / "model.pt"), "-o", str(out), "--quantize", "int8",
                                      "--eval-file", str(eval_file), "--max-quality-drop", "2"])
    assert result.exit_code == 0, result.output
    quality = json.loads((out / "manifest.json").read_text())["validation"]["quality"]
    assert quality["kind"] == "text" and quality["set"] == "heldout.tsv" and quality["size"] == HELDOUT_LINES
    assert quality["against_float32"]["chrf"] >= 98.0
    refs = quality["against_references"]
    assert refs["float32"]["chrf"] >= 98.0 and refs["export"]["chrf"] >= refs["float32"]["chrf"] - 2
    assert quality["drop"] == round(refs["float32"]["chrf"] - refs["export"]["chrf"], 2)
    assert "quality on heldout.tsv (40 text sources)" in result.output
    assert not [p for p in tmp_path.iterdir() if "float32" in p.name]  # the float32 copy is gone
    shown = CliRunner().invoke(cli, ["validate", str(out)])
    assert shown.exit_code == 0 and "float32 against the references: chrf" in shown.output


def test_float32_is_scored_against_the_references_only(tmp_path, eval_file):
    out = tmp_path / "float32"
    result = CliRunner().invoke(cli, [str(BUNDLED / "model.pt"), "-o", str(out), "--eval-file", str(eval_file)])
    assert result.exit_code == 0, result.output
    quality = json.loads((out / "manifest.json").read_text())["validation"]["quality"]
    assert "against_float32" not in quality and quality["drop"] is None  # it is float32
    assert quality["against_references"]["export"]["chrf"] >= 98.0
    assert "export against the references: chrf" in result.output


def corrupting(real):
    """int8 quantisation, then the decoder's int8 weights shuffled: valid graphs that translate badly."""
    def transform(src, path, spec, external):
        counts = real(src, path, spec, external)
        if spec.name == "decoder":
            model = onnx.load(str(path))
            rng = np.random.default_rng(0)
            for init in model.graph.initializer:
                if init.data_type == onnx.TensorProto.INT8 and len(init.dims) == 2:
                    values = numpy_helper.to_array(init)
                    init.CopyFrom(numpy_helper.from_array(rng.permutation(values.ravel()).reshape(values.shape),
                                                          init.name))
            onnx.save(model, str(path))
        return counts
    return transform


def test_max_quality_drop_fails_a_corrupted_variant(tmp_path, eval_file, monkeypatch):
    monkeypatch.setitem(variants.TRANSFORMS, "int8", corrupting(variants.TRANSFORMS["int8"]))
    out = tmp_path / "bad"
    options = ExportOptions(quantize="int8", eval_file=str(eval_file), max_quality_drop=2.0)
    with pytest.raises(ValidationError, match="loses .* chrf points on heldout.tsv") as caught:
        export_model(load_model(BUNDLED / "model.pt"), out, options)
    assert caught.value.report["quality"]["drop"] > 2.0
    assert list(tmp_path.iterdir()) == []  # nothing written: no OUT, no partial folder, no float32 copy


def test_bad_quality_options_are_one_line(tmp_path, eval_file):
    model = str(BUNDLED / "model.pt")
    cases = [
        (["--max-quality-drop", "1"], "--max-quality-drop compares a reduced-precision export"),
        (["--quantize", "int8", "--max-quality-drop", "1", "--no-validate"], "drop --no-validate"),
        (["--max-quality-drop", "-1"], "-1"),
    ]
    bad = tmp_path / "three.tsv"
    bad.write_text("1\teins\n2\tzwei\textra\n")
    cases.append((["--quantize", "int8", "--eval-file", str(bad)], "three.tsv, line 2"))
    # an --eval-file that would be ignored is refused: unvalidated, or sources only for a float32 export
    cases.append((["--eval-file", str(eval_file), "--no-validate"], "--eval-file is scored by the validation"))
    sources = tmp_path / "sources.txt"
    sources.write_text("1\n2\n")
    cases.append((["--eval-file", str(sources)], "--eval-file sources.txt has sources only: a float32 export"))
    for flags, message in cases:
        result = run_cli(model, "-o", str(tmp_path / "out"), *flags)
        assert result.exit_code != 0 and message in result.output, (flags, result.output)
        assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out").exists()


def test_eval_file_forms(tmp_path):
    plain = tmp_path / "plain.tsv"
    plain.write_text("a\n\nb\n")
    assert read_eval_file(plain).sources == ("a", "b") and read_eval_file(plain).references is None
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("a\tA\nb\n")
    with pytest.raises(InputError, match="mixed.tsv, line 2"):
        read_eval_file(mixed)
    (tmp_path / "empty.tsv").write_text("\n")
    with pytest.raises(InputError, match="empty"):
        read_eval_file(tmp_path / "empty.tsv")


def test_drop_is_read_against_references_first():
    text = {"against_float32": {"chrf": 97.0}, "against_references": {"export": {"chrf": 80.0},
                                                                        "float32": {"chrf": 81.5}}}
    assert quality_drop(text, "chrf", True) == 1.5
    assert quality_drop({"against_float32": {"chrf": 97.0}}, "chrf", True) == 3.0
    speech = {"against_references": {"export": {"wer": 12.0}, "float32": {"wer": 10.0}}}
    assert quality_drop(speech, "wer", False) == 2.0 and quality_drop({}, "wer", False) is None


def test_identical_is_the_share_of_equal_outputs():
    assert identical(["a b", "c", "d", "e"], ["a b", "x", "d", "e "]) == 50.0  # text for text, spaces count
    assert identical([], []) == 100.0
    with pytest.raises(ValueError, match="2 outputs against 1"):
        identical(["a", "b"], ["a"])
