"""--optimize and --quantize int8: graphs rewritten, contract kept, validated, visible in the manifest."""

import json

import onnx
import pytest
from click.testing import CliRunner

from tfm_export.checkpoint import load_checkpoint
from tfm_export.cli import cli
from tfm_export.errors import ExportError
from tfm_export.export import ExportOptions, export_model
from tfm_export.runtime import open_export

SOURCES = [[5, 9, 13, 7], [40, 41], [3, 60, 12]]


@pytest.fixture(scope="module")
def optimized(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("opt") / "out"
    manifest = export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(optimize=True))
    return out, manifest


def test_optimized_export_is_fused_and_still_exact(optimized, tiny_export):
    out, manifest = optimized
    fused = manifest["variant"]["transforms"]["optimize"]["decoder"]
    assert manifest["variant"]["optimized"] and fused["skip_layer_normalization"] > 0
    ops = {n.op_type for n in onnx.load(str(out / "decoder.onnx")).graph.node}
    assert "SkipLayerNormalization" in ops and "LayerNormalization" not in ops
    assert manifest["validation"]["mode"] == "parity" and manifest["validation"]["greedy"]["equal"]
    reference = open_export(tiny_export, device="cpu").generate_ids(SOURCES, 12)
    assert open_export(out, device="cpu").generate_ids(SOURCES, 12) == reference
    plain = json.loads((tiny_export / "manifest.json").read_text())
    assert manifest["graphs"]["decoder"]["inputs"] == plain["graphs"]["decoder"]["inputs"]


def test_int8_export_reports_agreement(tiny_checkpoint, tmp_path):
    out = tmp_path / "q"
    result = CliRunner().invoke(cli, [str(tiny_checkpoint), "-o", str(out), "--quantize", "int8"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"]["quantize"] == "int8"
    assert manifest["variant"]["transforms"]["int8"]["decoder"]["quantized_matmuls"] > 0
    greedy = manifest["validation"]["greedy"]
    assert manifest["validation"]["mode"] == "agreement" and 0.0 <= greedy["token_agreement"] <= 1.0
    assert "tokens agree" in result.output
    ops = {n.op_type for n in onnx.load(str(out / "decoder.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}
    assert (out / "decoder.onnx").stat().st_size < (tiny_checkpoint.parent / "model_onnx" / "decoder.onnx").stat().st_size


def test_unsupported_variants_fail_before_writing(tiny_checkpoint, tmp_path):
    with pytest.raises(ExportError, match="--dtype float16 is not supported yet"):
        export_model(load_checkpoint(tiny_checkpoint), tmp_path / "f16", ExportOptions(dtype="float16"))
    assert not (tmp_path / "f16").exists()
