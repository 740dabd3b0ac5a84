"""Export: graphs, manifest, parity at new shapes, atomic output folders, and bad-input errors."""

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tfm_export.model.checkpoint import Checkpoint
from tfm_export.errors import ManifestError, OutputError, ValidationError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.graphs import DecoderGraph, EncoderGraph
from tfm_export.manifest import load_manifest
from tfm_export.model.presets import init_model

VARIANTS = {
    "post_ln_sinusoidal": {"norm_first": False, "positions": "sinusoidal"},
    "pre_ln_learned": {"norm_first": True, "final_norm": True, "positions": "learned"},
}


def checkpoint_for(**changes) -> Checkpoint:
    from tfm_export.config import PRESETS

    model = init_model(PRESETS["tiny"].replace(**changes), seed=11)
    return Checkpoint(model.config, model.state_dict(), path="model.pt")


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def exported(request, tmp_path_factory):
    ckpt = checkpoint_for(**VARIANTS[request.param])
    out = tmp_path_factory.mktemp(request.param) / "out"
    manifest = export_model(ckpt, out)
    return ckpt, out, manifest


def test_folder_contents_and_manifest(exported):
    ckpt, out, typed = exported
    assert sorted(p.name for p in out.iterdir()) == ["decoder.onnx", "encoder.onnx", "manifest.json"]
    assert load_manifest(out) == typed  # the typed manifest round-trips through manifest.json
    manifest = typed.to_dict()
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["special_ids"] == {"src_pad": 0, "tgt_pad": 0, "bos": 1, "eos": 2}
    assert manifest["created_by"]["torch"] == torch.__version__
    dec = manifest["graphs"]["decoder"]
    assert [t["name"] for t in dec["outputs"][:3]] == ["logits", "next_ids", "present.0.self.key"]
    assert dec["inputs"][2]["shape"] == ["batch", 4, "past_len", 8]
    report = manifest["validation"]
    assert report["greedy"]["equal"] and all(row["ok"] for row in report["outputs"].values())
    assert leftovers(out) == []


def leftovers(out):
    return [p.name for p in out.parent.iterdir() if p.name.startswith(".")]


def test_graphs_have_dynamic_axes_and_one_decoder(exported):
    _, out, _ = exported
    dec = onnx.load(str(out / "decoder.onnx"))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in dec.graph.input}
    assert dims["input_ids"] == ["batch", "tgt_len"] and dims["src_mask"] == ["src_batch", "src_len"]
    assert dims["past.1.self.value"] == ["batch", 4, "past_len", 8]
    assert dims["cross.1.value"] == ["src_batch", 4, "src_len", 8]  # once per source, not per beam
    # one decoder for every step, past or none; its float32 earlier head runs over zero rows, no If
    # (export.earlier_head.ZERO_ROW_KERNELS: cheaper than one)
    assert not [n for n in dec.graph.node if n.op_type in ("If", "Loop")]


def test_attention_scales_the_queries_not_the_scores(exported, tmp_path):
    """ORT fuses a scale on q @ k^T into its MatMul (FusedMatMul alpha), which runs a decoder step's
    q @ k^T about 4x slower than alpha 1: every optimized graph's FusedMatMul must be unscaled."""
    _, out, _ = exported
    for graph in ("encoder", "decoder"):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp_path / f"{graph}.onnx")
        ort.InferenceSession(str(out / f"{graph}.onnx"), options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(str(tmp_path / f"{graph}.onnx")).graph.node
        alphas = [a.f for n in nodes if n.op_type == "FusedMatMul" for a in n.attribute if a.name == "alpha"]
        assert alphas == [1.0] * len(alphas), f"{graph}: FusedMatMul alpha {alphas}"
    assert alphas, "the decoder's q @ k^T is no FusedMatMul: the test checks nothing"


@torch.no_grad()
def test_new_shapes_after_export_match_eager(exported):
    ckpt, out, _ = exported
    model = ckpt.build_model()
    enc = ort.InferenceSession(str(out / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(out / "decoder.onnx"), providers=["CPUExecutionProvider"])
    src = torch.randint(3, 64, (3, 11))
    src[2, 4:] = 0
    enc_ref = EncoderGraph(model)(src)
    enc_out = enc.run(None, {"src_ids": src.numpy()})
    for got, ref in zip(enc_out, enc_ref):
        np.testing.assert_allclose(got, ref.numpy(), atol=1e-5)
    # A 6-token forced prefix after a 9-token past: shapes never seen at export time.
    past = [torch.randn(3, 4, 9, 8) for _ in range(4)]
    ids = torch.randint(0, 64, (3, 6))
    args = (ids, enc_ref[0], *past, *enc_ref[1:])
    ref = DecoderGraph(model)(*args)
    got = dec.run(None, {i.name: a.numpy() for i, a in zip(dec.get_inputs(), args)})
    np.testing.assert_allclose(got[0], ref[0].numpy(), atol=1e-5)
    np.testing.assert_array_equal(got[1], ref[1].numpy())
    assert got[2].shape == (3, 4, 15, 8)
    # Two decoder rows per source (beams): the same as each row with its own copy of the encoder outputs.
    past = [torch.randn(6, 4, 9, 8) for _ in range(4)]
    ids = torch.randint(0, 64, (6, 2))
    feeds = (ids, enc_ref[0], *past, *enc_ref[1:])  # src_mask and cross.* of the 3 sources
    grouped = dec.run(None, {i.name: a.numpy() for i, a in zip(dec.get_inputs(), feeds)})
    copied = [t.repeat_interleave(2, dim=0) for t in enc_ref]  # (6, ...): row r is source r // 2
    ref = DecoderGraph(model)(ids, copied[0], *past, *copied[1:])
    for g, r in zip(grouped, ref):
        np.testing.assert_allclose(g, r.numpy(), atol=1e-5)


def test_existing_output_is_refused_then_replaced_with_force(tmp_path, tiny_export):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)  # a previous export
    ckpt = checkpoint_for()
    with pytest.raises(OutputError, match="already exists; pass --force"):
        export_model(ckpt, out)
    export_model(ckpt, out, ExportOptions(force=True, validate=False))
    assert load_manifest(out).config == ckpt.config
    assert leftovers(out) == []


def test_a_folder_with_other_files_is_never_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(OutputError, match=r"not a tfm-export export \(keep.txt\)"):
            export_model(checkpoint_for(), out, ExportOptions(force=force))
    assert (out / "keep.txt").read_text() == "mine" and leftovers(out) == []


def test_failed_validation_leaves_nothing_behind(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValidationError) as info:
        export_model(checkpoint_for(), out, ExportOptions(atol=1e-15))
    assert "validation failed" in str(info.value) and "max abs diff" in str(info.value)
    assert info.value.report["outputs"]["logits"]["ok"] is False
    assert not out.exists() and leftovers(out) == []


def test_failed_validation_keeps_the_previous_folder(tmp_path, tiny_export):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    before = (out / "manifest.json").read_text()
    with pytest.raises(ValidationError):
        export_model(checkpoint_for(), out, ExportOptions(atol=1e-15, force=True))
    assert (out / "manifest.json").read_text() == before and leftovers(out) == []


@pytest.fixture()
def copy_of(exported, tmp_path):
    _, out, _ = exported
    target = tmp_path / "copy"
    shutil.copytree(out, target)
    return target


def test_truncated_graph_is_detected(copy_of):
    path = copy_of / "decoder.onnx"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ManifestError, match="does not match the sha256"):
        load_manifest(copy_of)


def test_decoder_from_another_export_is_detected(copy_of, tmp_path):
    other = export_model(checkpoint_for(d_ff=96), tmp_path / "other", ExportOptions(validate=False)).to_dict()
    assert other["graphs"]["decoder"]["sha256"]
    shutil.copy(tmp_path / "other" / "decoder.onnx", copy_of / "decoder.onnx")
    with pytest.raises(ManifestError, match="from another export"):
        load_manifest(copy_of)


def test_manifest_schema_and_missing_files(copy_of):
    data = json.loads((copy_of / "manifest.json").read_text())
    del data["graphs"]["encoder"]["sha256"]
    (copy_of / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="graphs/encoder: 'sha256' is a required property"):
        load_manifest(copy_of)
    (copy_of / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(copy_of)
    (copy_of / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="no manifest.json"):
        load_manifest(copy_of)
