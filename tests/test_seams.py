"""The seams between modules: one manifest reader, graphs checked against their manifest on open,
one device parser, one source check, library errors in the library's terms."""

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from helpers import run_cli
from tfm_export.cli.common import cli_option
from tfm_export.errors import DeviceError, ExportError, InputError, ManifestError, ValidationError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.validate import validate_export
from tfm_export.manifest import Manifest, load_manifest, write_manifest
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.model.eager import EagerModel, torch_device
from tfm_export.model.presets import init_checkpoint
from tfm_export.runtime import open_export
from tfm_export.runtime.device import device_kind

PACKAGE = Path(__file__).resolve().parents[1] / "tfm_export"


def test_only_manifest_py_reads_or_writes_manifest_json():
    users = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if "manifest.json" in p.read_text() and p.name != "manifest.py"]
    # Docstrings and help texts may name the file; none of these modules opens it.
    for rel in users:
        text = (PACKAGE / rel).read_text()
        assert "/ \"manifest.json\"" not in text and "MANIFEST_NAME" not in text, rel


def _edited(tiny_export: Path, folder: Path, change) -> Path:
    shutil.copytree(tiny_export, folder)
    data = json.loads((folder / "manifest.json").read_text())
    change(data)
    (folder / "manifest.json").write_text(json.dumps(data))  # schema-valid, hashes of the graphs intact
    return folder


@pytest.mark.parametrize("field, value", [("tgt_vocab_size", 65), ("max_len", 32), ("n_heads", 8),
                                          ("src_vocab_size", 100)])
def test_a_manifest_that_disagrees_with_its_graphs_is_refused(tiny_export, tmp_path, field, value):
    folder = _edited(tiny_export, tmp_path / "edited", lambda d: d["config"].update({field: value}))
    with pytest.raises(ManifestError, match="does not describe encoder.onnx|does not describe decoder.onnx"):
        open_export(folder, device="cpu")
    result = run_cli("generate", folder, "--ids", "5 6", "--device", "cpu")
    assert result.exit_code == 1 and "does not describe" in result.output and "Traceback" not in result.output


def test_edited_graph_io_in_the_manifest_is_refused(tiny_export, tmp_path):
    def change(data):
        data["graphs"]["decoder"]["outputs"][0]["shape"] = ["batch", 65]

    with pytest.raises(ManifestError, match="logits has shape"):
        open_export(_edited(tiny_export, tmp_path / "io", change), device="cpu")


def test_validate_refuses_another_models_checkpoint(tiny_export, tmp_path):
    other = tmp_path / "other.pt"
    init_checkpoint(other, "base", seed=1)
    with pytest.raises(ValidationError, match="the checkpoint does not match the export"):
        validate_export(tiny_export, load_checkpoint(other).build_model())
    result = run_cli("validate", tiny_export, "--model", other)
    assert result.exit_code == 1 and "does not match the export" in result.output


def test_typed_manifest_round_trip_and_atomic_rewrite(tiny_export, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(tiny_export, folder)
    manifest = load_manifest(folder)
    assert Manifest.from_dict(manifest.to_dict()) == manifest
    assert manifest.graphs["decoder"].opset == 18 and manifest.cache_dtype == "float32"
    write_manifest(folder, manifest.replace(samples=["x"]))
    assert load_manifest(folder).samples == ["x"]
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temp file left


def test_library_refuses_an_opset_it_cannot_write(tiny_checkpoint, tmp_path):
    with pytest.raises(ExportError, match=r"ExportOptions.opset 99 is not supported") as info:
        export_model(load_checkpoint(tiny_checkpoint), tmp_path / "x", ExportOptions(opset=99))
    assert info.value.render(cli_option).startswith("--opset 99 is not supported")
    assert not (tmp_path / "x").exists() and list(tmp_path.iterdir()) == []


def test_one_device_parser_for_eager_and_ort():
    assert device_kind("CUDA:2") == ("cuda", 2) and device_kind("cpu") == ("cpu", 0) and device_kind("auto") is None
    for bad in ("cpu:1", "cuda:x", "tpu", ""):
        with pytest.raises(DeviceError, match="unknown device"):
            device_kind(bad)
        with pytest.raises(DeviceError, match="unknown device"):
            torch_device(bad)
    assert str(torch_device("cpu")) == "cpu"


def test_eager_and_ort_share_the_source_check(tiny_checkpoint, tiny_export):
    eager = EagerModel.from_checkpoint(tiny_checkpoint)
    ort_model = open_export(tiny_export, device="cpu")
    for runner in (eager, ort_model):
        with pytest.raises(InputError, match="source id 64 is out of range"):
            runner.generate_ids([[5, 64]], max_new_tokens=2)
        with pytest.raises(InputError, match="exceeds the model's max_len"):
            runner.generate_ids([[5] * 65], max_new_tokens=2)
    assert eager.generate_ids([[5, 6, 7]], 6) == ort_model.generate_ids([[5, 6, 7]], 6)


def test_the_encoder_input_is_read_from_the_manifest(tiny_export, tmp_path):
    """Runners feed the encoder by the input the manifest declares, not by a name they assume: an export
    whose encoder input is renamed decodes the same; one that declares float features is refused in one line."""
    import dataclasses

    import onnx

    from tfm_export.graph_io import TensorSpec

    out = tmp_path / "renamed"
    shutil.copytree(tiny_export, out)
    graph = onnx.load(str(out / "encoder.onnx"))
    old = graph.graph.input[0].name
    for node in graph.graph.node:
        node.input[:] = ["source_tokens" if name == old else name for name in node.input]
    graph.graph.input[0].name = "source_tokens"
    onnx.save(graph, str(out / "encoder.onnx"))
    manifest = load_manifest(tiny_export)
    encoder = manifest.graphs["encoder"]
    spec = dataclasses.replace(encoder.spec, inputs=(TensorSpec("source_tokens", "int64", ("batch", "src_len")),))
    renamed = manifest.replace(graphs={**manifest.graphs, "encoder": dataclasses.replace(encoder, spec=spec)})
    sources = [[5, 6, 7], [8, 9]]
    want = open_export(tiny_export).generate_ids(sources, 8)
    assert open_export(out, verify=False, manifest=renamed).generate_ids(sources, 8) == want
    assert open_export(out, verify=False, manifest=renamed).generate_ids(sources, 8, num_beams=2) == \
        open_export(tiny_export).generate_ids(sources, 8, num_beams=2)
    spec = dataclasses.replace(spec, inputs=(TensorSpec("source_tokens", "float32", ("batch", "n_mels", "frames")),))
    features = manifest.replace(graphs={**manifest.graphs, "encoder": dataclasses.replace(encoder, spec=spec)})
    model = open_export(out, verify=False, manifest=renamed)
    model.manifest = features  # (opening checks the declaration against the graph: this one is a speech encoder's)
    refused = r"reads float features \(source_tokens: \(n_mels, frames\) a source\), not token ids"
    with pytest.raises(InputError, match=refused):
        model.generate_ids(sources, 8)


def _steps_a_state(path: Path) -> bool:
    """Whether `path` calls a state's step (`state.step(`, `rows.step(`, `self.state.step(`) other than in a
    wrapping state's own one-line `step` that forwards to the state it wraps."""
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if function.name == "step" and len(body) == 1:
            continue
        for call in ast.walk(function):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step"
                    and re.search(r"(state|rows)$", ast.unparse(call.func.value))):
                return True
    return False


def test_one_decode_loop_steps_a_decoder():
    """Loops that step a decoder: the direct calls' driver (runtime.decode.loop.decode: several strategies side by
    side run through it as runtime.decode.together), the in-flight scheduler (runtime.inflight.InflightRows.step)
    and a draft model's greedy drafts on the cache it keeps between proposals (runtime.decode.proposers: the
    model checks them, runtime.decode.speculative); no other module steps a state (a wrapping state's step
    that forwards to the one it wraps is not a loop)."""
    stepping = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _steps_a_state(p))
    assert stepping == ["runtime/decode/loop.py", "runtime/decode/proposers.py", "runtime/inflight.py"]
    private = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if re.search(r"\._(search_cache|batch|allocate|spec)\b", p.read_text())]
    assert private == []
