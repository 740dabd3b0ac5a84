"""The bundled model (models/num2words-de): it loads, exports, validates and translates correctly."""

import json

import pytest

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.demo import read_heldout
from tfm_export.model.eager import EagerModel
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.runtime import RuntimeOptions, open_export

from conftest import BUNDLED

HELDOUT = read_heldout(BUNDLED / "heldout.tsv")
FIXED = HELDOUT[:20]


def accuracy(outputs, pairs):
    return sum(o == expected for o, (_, expected) in zip(outputs, pairs)) / len(pairs)


def test_checkpoint_carries_tokenizer_samples_and_card():
    ckpt = load_checkpoint(BUNDLED / "model.pt")
    assert ckpt.tokenizer["type"] == "chars" and ckpt.samples
    card = (BUNDLED / "README.md").read_text()
    metrics = json.loads((BUNDLED / "metrics.json").read_text())
    assert metrics["heldout_exact_match"] >= 0.95
    assert f"{metrics['heldout_exact_match']:.2%}" in card
    assert len(HELDOUT) >= 100


def test_eager_greedy_gives_the_expected_strings():
    eager = EagerModel.from_checkpoint(BUNDLED / "model.pt")
    assert eager.translate([s for s, _ in FIXED]) == [t for _, t in FIXED]


def test_export_validates_and_ort_gives_the_expected_strings(bundled_export):
    manifest = json.loads((bundled_export / "manifest.json").read_text())
    assert manifest["validation"]["greedy"]["equal"] and manifest["validation"]["greedy"]["from"] == "sample"
    assert "quality" not in manifest["validation"]  # float32 and its samples alone: nothing to score against
    runtime = open_export(bundled_export, device="cpu")
    assert runtime.translate([s for s, _ in FIXED]) == [t for _, t in FIXED]
    outputs = runtime.translate([s for s, _ in HELDOUT])
    assert accuracy(outputs, HELDOUT) >= 0.95


def test_short_numbers_are_spelled_correctly(bundled_export):
    """Every number below 1000 (a model trained on the uniform 0..99999 mix got "12" wrong)."""
    short = read_heldout(BUNDLED / "short.tsv")
    assert [s for s, _ in short] == [str(n) for n in range(1000)]
    runtime = open_export(bundled_export, device="cpu")
    outputs = [out for i in range(0, len(short), 250) for out in runtime.translate([s for s, _ in short[i:i + 250]])]
    wrong = [(s, o) for (s, expected), o in zip(short, outputs) if o != expected]
    assert len(wrong) <= 5, wrong[:10]
    assert all(o == expected for (_, expected), o in zip(short[:100], outputs[:100])), "0..99 must all be right"
    metrics = json.loads((BUNDLED / "metrics.json").read_text())
    assert metrics["exact_match_0_to_999"] == pytest.approx(1 - len(wrong) / 1000)


def test_unknown_characters_are_refused_clearly(bundled_export):
    from tfm_export.errors import InputError

    with pytest.raises(InputError, match="cannot encode 'x'"):
        open_export(bundled_export, device="cpu").translate(["12x4"])


@pytest.mark.long  # an int8 export of the bundled model; variants' parity is in test_variants
def test_int8_keeps_accuracy_within_one_point(bundled_export, tmp_path):
    out = tmp_path / "int8"
    manifest = export_model(load_checkpoint(BUNDLED / "model.pt"), out, ExportOptions(quantize="int8")).to_dict()
    assert manifest["validation"]["mode"] == "agreement"
    sources = [s for s, _ in HELDOUT]
    float32 = accuracy(open_export(bundled_export, device="cpu").translate(sources), HELDOUT)
    int8 = accuracy(open_export(out, device="cpu").translate(sources), HELDOUT)
    assert int8 >= float32 - 0.01, f"int8 {int8:.3f} vs float32 {float32:.3f}"


@pytest.mark.long  # a float16 export of the bundled model; variants' parity is in test_variants
def test_float16_keeps_accuracy_within_one_point(bundled_export, tmp_path):
    """--dtype float16 (with the --cuda-graph decoder) on the trained model: same held-out accuracy."""
    out = tmp_path / "f16"
    manifest = export_model(load_checkpoint(BUNDLED / "model.pt"), out,
                            ExportOptions(dtype="float16", static_cache=True)).to_dict()
    assert manifest["validation"]["mode"] == "tolerance"
    assert manifest["validation"]["greedy"]["equal"]  # trained logits are far from ties
    sources = [s for s, _ in HELDOUT]
    float32 = accuracy(open_export(bundled_export, device="cpu").translate(sources), HELDOUT)
    float16 = accuracy(open_export(out, device="cpu").translate(sources), HELDOUT)
    assert float16 >= float32 - 0.01, f"float16 {float16:.3f} vs float32 {float32:.3f}"
    static = open_export(out, device="cpu", options=RuntimeOptions(cuda_graph=True))
    assert static.translate(sources[:20]) == [t for _, t in HELDOUT[:20]]


def test_demo_points_at_a_readme_section_that_exists():
    """demo's last line sends the user to README's section of this name, to its 'deploy with' table."""
    from tfm_export.cli.demo_cmd import README_SECTION

    readme = (BUNDLED.parents[1] / "README.md").read_text()
    sections = {part.split("\n", 1)[0].strip(): part for part in readme.split("\n## ")[1:]}
    assert "| deploy with |" in sections[README_SECTION]
