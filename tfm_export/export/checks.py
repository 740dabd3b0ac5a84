"""What every written graph file goes through: onnx.checker, its I/O against its spec, its real opset,
and the model config stamped into its metadata (so a manifest edited to describe another model is
caught when the export is opened)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from ..config import TransformerConfig
from ..errors import ExportError, first_line
from ..graph_io import CONFIG_METADATA_KEY, GraphSpec

ELEM_TYPES = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
              "int64": onnx.TensorProto.INT64, "bool": onnx.TensorProto.BOOL}
# Operators ONNX Runtime registers in the default ONNX domain although ONNX has none of that name:
# --optimize writes them (onnxscript's RMS-norm fusion, T5), and ORT takes them only there.
ORT_DEFAULT_DOMAIN_OPS = ("SimplifiedLayerNormalization",)
CHECK_DOMAIN = "com.microsoft"  # where onnx.checker checks them (as the ORT contrib operators they are)


def check_graph(path: Path, spec: GraphSpec) -> None:
    """Full onnx.checker (strict shape inference), and the I/O names and element types the spec says."""
    try:
        _check_model(path)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"{path.name} failed onnx.checker: {first_line(exc)}") from exc
    graph = onnx.load(str(path), load_external_data=False).graph
    got = [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output)]
    want = [(t.name, ELEM_TYPES[t.dtype]) for t in (*spec.inputs, *spec.outputs)]
    if got != want:
        first = next((f"{g} != {w}" for g, w in zip(got, want) if g != w), f"{len(got)} != {len(want)} values")
        raise ExportError(f"{path.name} I/O (name, ONNX type) differs from its spec: {first}; this is a bug "
                          f"in tfm-export, please report it")


def external_files(path: Path) -> list[str]:
    """The external-data files the graph at `path` names (relative to its folder), sorted."""
    graph = onnx.load(str(path), load_external_data=False).graph
    files = {entry.value for tensor in graph.initializer for entry in tensor.external_data if entry.key == "location"}
    # The exporter's graphs name plain files beside them; the transforms replace and remove those files, so
    # a location elsewhere (a path) is refused rather than ever touched.
    outside = sorted(f for f in files if Path(f).name != f)
    if outside:
        raise ExportError(f"{path.name} names external data outside its folder ({outside[0]}); this is a bug "
                          f"in tfm-export, please report it")
    return sorted(files)


def _check_model(path: Path) -> None:
    """onnx.checker on the file; ORT_DEFAULT_DOMAIN_OPS are checked as contrib operators, through a
    copy beside the file (so that external data resolves), removed afterwards."""
    proto = onnx.load(str(path), load_external_data=False)
    nodes = [n for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in ORT_DEFAULT_DOMAIN_OPS]
    if not nodes:
        onnx.checker.check_model(str(path), full_check=True)
        return
    for node in nodes:
        node.domain = CHECK_DOMAIN
    if all(op.domain != CHECK_DOMAIN for op in proto.opset_import):
        proto.opset_import.add(domain=CHECK_DOMAIN, version=1)
    copy = path.with_name(f".{path.name}.check")
    try:
        onnx.save(proto, str(copy))
        onnx.checker.check_model(str(copy), full_check=True)
    finally:
        copy.unlink(missing_ok=True)


def finish_graph(path: Path, config: TransformerConfig) -> int:
    """Stamp the config into the graph's metadata; returns the default-domain opset the file really has."""
    proto = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in proto.metadata_props}
    props[CONFIG_METADATA_KEY] = json.dumps(config.to_dict(), sort_keys=True)
    del proto.metadata_props[:]
    for key, value in props.items():
        proto.metadata_props.add(key=key, value=value)
    onnx.save(proto, str(path))  # external data stays in its files: only the references are re-written
    return next(op.version for op in proto.opset_import if op.domain in ("", "ai.onnx"))

