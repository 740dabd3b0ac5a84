"""Each graph of an export as data: its inputs and outputs (`TensorSpec`, `GraphSpec`: what export.specs
builds and every runner binds by) and its record in the manifest (`GraphEntry`: the file, its hashes, its
opset), with the names both sides of a graph agree on. Torch-free; runtime.checks compares them with the graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# decoder.onnx's output of the logits of the new positions before the last (batch, tgt_len - 1, tgt_vocab)
# (export.specs.decoder_spec): with `logits`, a speculative step's every position
EARLIER_LOGITS = "earlier_logits"
# Key of the config copy each graph carries in its ONNX metadata: opening an export compares it with
# the manifest's config, so a manifest edited to describe another model is refused.
CONFIG_METADATA_KEY = "tfm_export.config"


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output."""

    name: str  # ONNX value name
    dtype: str  # numpy-style dtype name: int64, bool, float32, float16
    shape: tuple[str | int, ...]  # symbolic dims are strings: batch, src_batch, src_len, tgt_len, ...

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TensorSpec":
        return cls(data["name"], data["dtype"], tuple(data["shape"]))


@dataclass(frozen=True)
class GraphSpec:
    """A graph to export: its file and its ordered inputs/outputs (export.specs builds them)."""

    name: str  # encoder | decoder | decoder_static
    file: str  # file name inside the export folder
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def tensor(self, name: str) -> TensorSpec:
        """The input or output called `name` (no name is both)."""
        for t in (*self.inputs, *self.outputs):
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class GraphEntry:
    """An exported graph as the manifest records it: its spec, opset and file hashes."""

    spec: GraphSpec
    sha256: str  # of the graph file, after its last transform
    opset: int  # the default-domain opset the graph file really has
    external_data: dict[str, str] = field(default_factory=dict)  # external-data file -> sha256

    @property
    def file(self) -> str:
        return self.spec.file

    def files(self) -> dict[str, str]:
        """Every file of this graph -> its sha256."""
        return {self.spec.file: self.sha256, **self.external_data}

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.spec.file, "sha256": self.sha256, "external_data": dict(self.external_data),
                "opset": self.opset, "inputs": [t.to_dict() for t in self.spec.inputs],
                "outputs": [t.to_dict() for t in self.spec.outputs]}

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> "GraphEntry":
        spec = GraphSpec(name, data["file"], tuple(TensorSpec.from_dict(t) for t in data["inputs"]),
                         tuple(TensorSpec.from_dict(t) for t in data["outputs"]))
        return cls(spec, data["sha256"], int(data["opset"]), dict(data.get("external_data", {})))
