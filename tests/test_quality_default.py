"""Quality by default (#63): a reduced-precision export without --eval-file decodes the folder's own text (its
samples, built-in sentences the tokenizer encodes, or text made of what it encodes; speech: espeak-ng speaking
them) with the variant and with its float32 graphs, and stores chrF (WER for speech) of one against the other in
the typed manifest (Manifest.quality); `export` and `validate` print it on one line.
(The --eval-file reports: tests/test_quality.py, tests/test_int4.py, tests/test_whisper_trained.py.)"""

from __future__ import annotations

import json
import math
import shutil
import string
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sacrebleu")

import hf_fixtures  # noqa: E402
from helpers import run_cli_ok  # noqa: E402
from tfm_export.errors import ManifestError  # noqa: E402
from tfm_export.export.quality_sources import MAX_NEW_TOKENS, default_text_set, tokenizer_text  # noqa: E402
from tfm_export.manifest import Manifest, VariantQuality, load_manifest, write_manifest  # noqa: E402
from tfm_export.text.tokenizer import CharTokenizer  # noqa: E402

INT8_CHRF = 90.0  # int8 of the trained Marian fixture keeps its float32 outputs (measured: 100)


@pytest.fixture(scope="module")
def marian_variants(tmp_path_factory):
    """quantize -> (folder, CLI output): the trained Marian fixture exported as int8 and int4 with the default
    flags and no --eval-file (the float32 graphs are exported once: conftest's reuse of identical graphs)."""
    made = {}
    for quantize in ("int8", "int4"):
        out = tmp_path_factory.mktemp(f"marian-{quantize}") / "out"
        result = run_cli_ok(hf_fixtures.trained_folder("marian"), "-o", out, "--quantize", quantize)
        made[quantize] = (out, result.output)
    return made


def test_int8_stores_chrf_against_float32_without_eval_file(marian_variants):
    out, output = marian_variants["int8"]
    data = json.loads((out / "manifest.json").read_text())
    quality = data["quality"]
    assert quality["metric"] == "chrf" and quality["score"] > INT8_CHRF and quality["size"] >= 4
    # the Marian fixture carries no samples and knows too few capitals for the built-in sentences as they are
    assert quality["sources"] == "tokenizer text"
    assert data["validation"]["quality"]["against_float32"]["chrf"] == quality["score"]
    line = [l for l in output.splitlines() if l.startswith("quality: int8 against float32")]
    assert line == [f"quality: int8 against float32 on {quality['size']} sources (tokenizer text): chrF "
                    f"{quality['score']:.2f}, {quality['identical']:.0f} % of outputs identical"]
    assert "quality on" not in output  # no references: the one line alone, not the --eval-file block
    assert not [p for p in out.parent.iterdir() if "float32" in p.name]  # the float32 copy is gone


def test_int4_score_is_a_number(marian_variants):
    out, output = marian_variants["int4"]
    quality = load_manifest(out).quality
    assert isinstance(quality, VariantQuality) and quality.metric == "chrf"
    assert math.isfinite(quality.score) and 0.0 <= quality.score <= 100.0
    assert 0.0 <= quality.identical <= 100.0
    assert "quality: int4 against float32 on" in output


@pytest.mark.slow
def test_validate_prints_it_again_and_keeps_it(marian_variants, tmp_path):
    out = tmp_path / "int8"
    shutil.copytree(marian_variants["int8"][0], out)
    before = load_manifest(out)
    result = run_cli_ok("validate", out, "--model", hf_fixtures.trained_folder("marian"))
    assert "quality: int8 against float32 on" in result.output and "validation passed" in result.output
    after = load_manifest(out)  # the eager comparison rewrote the validation: the quality measured at export stays
    assert after.quality == before.quality and after.validation["quality"] == before.validation["quality"]


def test_the_typed_field_round_trips(marian_variants, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(marian_variants["int8"][0], folder)
    manifest = load_manifest(folder)
    changed = manifest.replace(quality=VariantQuality("chrf", 87.5, 50.0, "samples", 2))
    assert Manifest.from_dict(json.loads(json.dumps(changed.to_dict()))) == changed
    write_manifest(folder, changed)
    assert load_manifest(folder).quality == VariantQuality("chrf", 87.5, 50.0, "samples", 2)
    write_manifest(folder, manifest.replace(quality=None))  # float32 and older exports: no field at all
    assert "quality" not in json.loads((folder / "manifest.json").read_text())
    assert load_manifest(folder).quality is None
    data = json.loads((folder / "manifest.json").read_text())
    data["quality"] = {"metric": "bleu", "score": 1.0, "identical": 0.0, "sources": "x", "size": 1}
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="schema at quality"):
        load_manifest(folder)


def test_default_text_sources(marian_variants):
    manifest = load_manifest(marian_variants["int8"][0])
    words = CharTokenizer.build([string.ascii_letters + string.digits + " .,:"], ["x"])  # the English sentences
    chosen = default_text_set(manifest, words)
    assert chosen.origin == "built-in sentences, en" and chosen.max_new_tokens == MAX_NEW_TOKENS
    assert "The train leaves at seven." in chosen.sources
    digits = CharTokenizer.build(["0123456789 "], ["x"])  # a digits-in model: digit strings
    made = default_text_set(manifest, digits)
    assert made.origin == "tokenizer text" and made.sources
    assert all(set(text) <= set("0123456789 ") and digits.encode(text) for text in made.sources)
    assert tokenizer_text(CharTokenizer.build(["\u4e00"], ["x"]), 512, ["hello"]) == []  # nothing it can make
    sampled = manifest.replace(samples=["a b", "c"])
    assert default_text_set(sampled, words).sources == ("a b", "c")
    assert default_text_set(sampled, None) is None


@pytest.mark.slow
def test_a_speech_variant_stores_wer(tmp_path):
    """A random Whisper folder exported int8 with the default flags: espeak-ng speaks the built-in sentences,
    both sides transcribe them, the WER of one against the other is stored."""
    pytest.importorskip("transformers")
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (make espeak-ng)")
    from whisper_fixtures import Layout, speech_folder

    folder = speech_folder(tmp_path / "model", Layout(2, 2, 80, True, 200))
    out = tmp_path / "int8"
    result = run_cli_ok(folder, "-o", out, "--quantize", "int8")
    quality = load_manifest(out).quality
    assert quality.metric == "wer" and math.isfinite(quality.score) and quality.score >= 0.0
    assert quality.sources == "built-in sentences, en, spoken by espeak-ng" and quality.size == 3
    assert "quality: int8 against float32 on 3 sources" in result.output and "WER" in result.output


@pytest.mark.slow
def test_a_default_set_that_cannot_be_scored_never_fails_the_export(tiny_checkpoint, tmp_path, monkeypatch):
    """The tiny model with a digits-in tokenizer: int8 is scored on digit strings; when the scoring itself fails
    (a tokenizer that refuses, say), the export still succeeds without the field, unless --max-quality-drop asked
    for the score."""
    import dataclasses

    from tfm_export.errors import InputError
    from tfm_export.export import exporter
    from tfm_export.export.exporter import ExportOptions, export_model
    from tfm_export.model.checkpoint import load_checkpoint

    tokenizer = CharTokenizer.build(["0123456789 "], ["abcdefghijklmnopqrstuvwxyz -"])
    checkpoint = dataclasses.replace(load_checkpoint(tiny_checkpoint), tokenizer=tokenizer.to_dict())
    scored = export_model(checkpoint, tmp_path / "int8", ExportOptions(quantize="int8"))
    assert scored.quality.sources == "tokenizer text" and math.isfinite(scored.quality.score)

    def refuse(*args, **kwargs):
        raise InputError("cannot encode this")

    monkeypatch.setattr(exporter, "measure_quality", refuse)
    unscored = export_model(checkpoint, tmp_path / "unscored", ExportOptions(quantize="int8"))
    assert unscored.quality is None and "quality" not in unscored.validation
    with pytest.raises(InputError, match="cannot encode this"):
        export_model(checkpoint, tmp_path / "asked", ExportOptions(quantize="int8", max_quality_drop=5.0))
    assert not (tmp_path / "asked").exists()
