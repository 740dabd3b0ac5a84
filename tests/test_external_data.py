"""Graphs whose weights live in external data (every model over 2 GB): the float32 export and each variant
(--optimize, --quantize int8, --dtype float16, the static and rows decoders) keep the layout, write their
own data files, hash them in the manifest, validate, and decode like the same variant kept in one file.

A 2 GB model is too big for CI, so these tests force the layout on the tiny model (`external_data=True`,
`--external-data`); the threshold itself is one comparison in `needs_external_data`. The real sizes are
exported by `python -m benchmarks big-models` (BENCHMARKS.md, "Models over 2 GB").
"""

import numpy as np
import onnx
import pytest

from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.shared import EXTERNAL_DATA_BYTES, needs_external_data
from tfm_export.manifest import load_manifest, sha256_file
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.runtime import open_export

from helpers import run_cli, run_cli_ok

SOURCES = [[5, 9, 13, 7], [40, 41], [3, 60, 12]]
VARIANTS = {
    "float32": {},
    "optimize": {"optimize": True},
    "int8": {"quantize": "int8"},
    "float16": {"dtype": "float16"},
    "static": {"static_cache": True},
}


@pytest.fixture(scope="module")
def exports(tiny_checkpoint, tmp_path_factory):
    """Each variant twice: weights in external data, and in the graph file as usual."""
    checkpoint, root, made = load_checkpoint(tiny_checkpoint), tmp_path_factory.mktemp("external"), {}

    def make(name: str, external: bool):
        key = (name, external)
        if key not in made:
            out = root / f"{name}-{'ext' if external else 'one'}"
            export_model(checkpoint, out, ExportOptions(external_data=external, **VARIANTS[name]))
            made[key] = out
        return made[key]
    return make


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_keeps_external_data_hashed_and_validated(exports, name):
    out = exports(name, True)
    manifest = load_manifest(out)
    assert manifest.validation is not None  # validated against eager before it was renamed into place
    for entry in manifest.graphs.values():
        graph = onnx.load(str(out / entry.spec.file), load_external_data=False)
        stored = {e.value for t in graph.graph.initializer for e in t.external_data if e.key == "location"}
        assert stored == {entry.spec.file + ".data"}  # the variant's own data file, one per graph
        assert entry.external_data == {f: sha256_file(out / f) for f in stored}
    names = {p.name for p in out.iterdir()}
    assert not any(n.startswith(".") for n in names)  # no staging folder or check copy left behind
    listed = {f for e in manifest.graphs.values() for f in e.files()}
    assert {n for n in names if ".onnx" in n} == listed  # no stale data file of the float32 graphs


@pytest.mark.parametrize("name", ["float32", "int8", "float16"])
def test_external_variant_decodes_like_the_one_file_variant(exports, name):
    ext, one = open_export(exports(name, True)), open_export(exports(name, False))
    for beams in (1, 3):
        assert ext.generate_ids(SOURCES, num_beams=beams) == one.generate_ids(SOURCES, num_beams=beams)


def test_variant_data_is_smaller_than_float32(exports):
    size = {name: sum(p.stat().st_size for p in exports(name, True).glob("*.onnx.data"))
            for name in ("float32", "int8", "float16")}
    assert size["int8"] < 0.5 * size["float32"] and size["float16"] < 0.6 * size["float32"]


def test_validate_command_checks_the_external_files(exports, tiny_checkpoint, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(exports("int8", True), out)
    run_cli_ok("validate", out, "--model", tiny_checkpoint)
    data = out / "decoder.onnx.data"
    data.write_bytes(data.read_bytes()[:-8] + b"\0" * 8)  # damaged after export
    result = run_cli("validate", out, "--model", tiny_checkpoint)
    assert result.exit_code != 0 and "decoder.onnx.data" in result.output
    assert "Traceback" not in result.output


def test_cli_external_data_flag(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    run_cli_ok(tiny_checkpoint, "-o", out, "--external-data", "--quantize", "int8")
    assert (out / "encoder.onnx.data").is_file() and (out / "decoder.onnx.data").is_file()


def test_threshold_is_the_parameter_bytes(tiny_checkpoint):
    model = load_checkpoint(tiny_checkpoint).build_model()
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    assert size < EXTERNAL_DATA_BYTES and not needs_external_data(model) and needs_external_data(model, True)


def _head_graph(folder, tied: bool):
    """A tied head as torch.onnx leaves it for a big vocabulary: MatMul(x, Transpose(W)), W gathered too."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)  # (vocab, d_model)
    nodes = [helper.make_node("Transpose", ["W"], ["WT"], perm=[1, 0], name="node_t"),
             helper.make_node("MatMul", ["x", "WT"], ["logits"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 50])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])]
    if tied:
        nodes.append(helper.make_node("Gather", ["W", "ids"], ["embedded"]))
        inputs.append(helper.make_tensor_value_info("ids", TensorProto.INT64, [3]))
        outputs.append(helper.make_tensor_value_info("embedded", TensorProto.FLOAT, [3, 8]))
    graph = helper.make_graph(nodes, "head", inputs, outputs, [numpy_helper.from_array(weight, "W")])
    path = folder / "decoder.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), str(path),
              save_as_external_data=True, location="decoder.onnx.data", size_threshold=0)
    return path


@pytest.mark.parametrize("tied", [True, False])
def test_transposed_head_is_stored_transposed(tmp_path, tied):
    import onnxruntime as ort

    from tfm_export.export.checks import external_files
    from tfm_export.export.folding import fold_transposes, transposed_initializers

    path = _head_graph(tmp_path, tied)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    if tied:
        feeds["ids"] = np.array([0, 7, 49])
    before = ort.InferenceSession(str(path)).run(None, feeds)
    assert transposed_initializers(path) == ["node_t"]
    assert fold_transposes(path) == 1
    after = ort.InferenceSession(str(path)).run(None, feeds)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    graph = onnx.load(str(path), load_external_data=False).graph
    assert [n.op_type for n in graph.node if n.op_type == "Transpose"] == []
    assert sorted(t.name for t in graph.initializer) == (["W", "W.transposed"] if tied else ["W.transposed"])
    assert external_files(path) == ["decoder.onnx.data"] and sorted(p.name for p in tmp_path.iterdir()) == [
        "decoder.onnx", "decoder.onnx.data"]
    assert fold_transposes(path) == 0  # nothing left to fold


@pytest.mark.parametrize("name", ["float16", "int8"])
def test_external_variant_has_the_one_file_variants_weights(exports, name):
    """float16 and int8 convert an external graph's weights one tensor at a time: the same tensors."""
    from onnx import numpy_helper

    for graph in ("encoder.onnx", "decoder.onnx"):
        ext = onnx.load(str(exports(name, True) / graph))
        one = onnx.load(str(exports(name, False) / graph))
        a = {t.name: numpy_helper.to_array(t) for t in ext.graph.initializer}
        b = {t.name: numpy_helper.to_array(t) for t in one.graph.initializer}
        assert sorted(a) == sorted(b)
        for key, value in a.items():
            assert value.dtype == b[key].dtype and np.array_equal(value, b[key]), key


@pytest.mark.parametrize("shape", [(2 * 4096 + 17, 8), (3, 1 << 21), (1 << 20, 5)], ids=["tall", "wide", "rows"])
def test_int8_weights_quantised_in_chunks_equal_ort_quantize_data(shape, monkeypatch):
    """export.int8 quantises a weight in chunks of whole rows (tall, wide like the transposed head, rows left
    over): the same int8 values and scale as ORT's quantize_data."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data

    from tfm_export.export import int8

    monkeypatch.setattr(int8, "CHUNK_ELEMENTS", 1 << 16)  # several chunks, and a row wider than one chunk
    weight = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 3
    zero, scale, q = int8._quantized(weight)
    want_zero, want_scale, want = quantize_data(weight, TensorProto.INT8, symmetric=True)
    assert np.array_equal(q, want) and q.dtype == np.int8
    assert np.array_equal(scale, want_scale) and np.array_equal(zero, want_zero)
