"""The two graphs of a user's own module (export.module_export): `encode` and `decode` wrapped as modules
with flat tensor inputs and outputs, and the tensor specs of their inputs and outputs, read from example
runs (two shapes tell which axes are dynamic)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..errors import ConfigError, ExportError, first_line
from ..graph_io import GraphSpec, TensorSpec
from ..runtime.states.nocache import GRAPH_NAME, MEMORY, SOURCE_MASK

Encode = Callable[[nn.Module, Tensor, Tensor], Any]  # (model, src_ids, src_mask) -> memory / outputs
Decode = Callable[[nn.Module, Tensor, Tensor, Tensor], Tensor]  # (model, tgt_ids, memory, src_mask) -> logits

SRC_IDS = TensorSpec("src_ids", "int64", ("batch", "src_len"))
SRC_MASK = TensorSpec(SOURCE_MASK, "bool", ("batch", "src_len"))
TGT_IDS = TensorSpec("tgt_ids", "int64", ("batch", "tgt_len"))
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.int64: "int64", torch.bool: "bool"}


class EncoderGraph(nn.Module):
    """(src_ids, src_mask) -> encode's outputs as a flat tuple."""

    def __init__(self, module: nn.Module, encode: Encode):
        super().__init__()
        self.module, self.encode = module, encode

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        out = self.encode(self.module, src_ids, src_mask)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class DecoderGraph(nn.Module):
    """(tgt_ids, memory, src_mask) -> the last position's logits (batch, vocab) float32."""

    def __init__(self, module: nn.Module, decode: Decode):
        super().__init__()
        self.module, self.decode = module, decode

    def forward(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        logits = self.decode(self.module, tgt_ids, memory, src_mask)
        return (logits[:, -1] if logits.dim() == 3 else logits).float()


class Graphs:
    """The wrappers, their specs (axes found by running the callables at two shapes) and example inputs."""

    def __init__(self, module: nn.Module, encode: Encode, decode: Decode | None, pad: int, src_vocab: int,
                 max_len: int, output_names: Sequence[str] | None):
        self.module, self.pad, self.src_vocab, self.max_len = module, pad, src_vocab, max_len
        self.encoder = EncoderGraph(module, encode)
        self.decoder = DecoderGraph(module, decode) if decode is not None else None
        # Never 0 or 1 on a dynamic axis (torch.export would specialise it), and all different.
        length = max(2, min(5, max_len))
        self.sizes = {"batch": 3, "src_len": length, "tgt_len": max(2, min(4, max_len - 1))}
        shapes = ((3, length), (2, length + 1 if length < max_len else length - 1))
        first, second = self._probe(*shapes[0]), self._probe(*shapes[1])
        if self.decoder is not None:
            if len(first) != 1:
                raise ExportError(f"encode returned {len(first)} tensors; a model that generates returns one "
                                  f"(the memory its decode reads)")
            names = [MEMORY]
        else:
            names = list(output_names or ["output"] + [f"output_{i}" for i in range(1, len(first))])
            if len(names) != len(first):
                raise ConfigError(f"encode returned {len(first)} outputs but {len(names)} output names were given")
        self.outputs = tuple(tensor_spec(n, a, b, *shapes, "encode") for n, a, b in zip(names, first, second))

    @torch.no_grad()
    def _probe(self, batch: int, src_len: int) -> tuple[Tensor, ...]:
        src, mask = self.example_source(batch, src_len, torch.Generator().manual_seed(src_len))
        try:
            return self.encoder(src, mask)
        except Exception as exc:
            raise ExportError(f"encode failed on a ({batch}, {src_len}) batch of ids: {type(exc).__name__}: "
                              f"{first_line(exc, 200)}") from exc

    def example_source(self, batch: int, src_len: int, gen: torch.Generator, vocab: int | None = None
                       ) -> tuple[Tensor, Tensor]:
        """Random ids (none the padding id), the last row padded from half its length."""
        vocab = vocab or self.src_vocab
        src = torch.randint(0, vocab - 1, (batch, src_len), generator=gen)
        src = src + (src >= self.pad).long()  # never the padding id
        if batch > 1 and src_len > 1:
            src[-1, (src_len + 1) // 2:] = self.pad
        return src, src != self.pad

    def to_export(self, config: TransformerConfig) -> list[tuple[GraphSpec, nn.Module, tuple[Tensor, ...]]]:
        gen = torch.Generator().manual_seed(0)
        src, mask = self.example_source(self.sizes["batch"], self.sizes["src_len"], gen, config.src_vocab_size)
        graphs = [(self.encoder_spec, self.encoder, (src, mask))]
        if self.decoder is not None:
            with torch.no_grad():
                memory = self.encoder(src, mask)[0]
            tgt = torch.randint(0, config.tgt_vocab_size, (self.sizes["batch"], self.sizes["tgt_len"]), generator=gen)
            graphs.append((self.decoder_spec(config), self.decoder, (tgt, memory, mask)))
        return graphs

    @property
    def encoder_spec(self) -> GraphSpec:
        return GraphSpec("encoder", "encoder.onnx", (SRC_IDS, SRC_MASK), self.outputs)

    def decoder_spec(self, config: TransformerConfig) -> GraphSpec:
        memory = self.outputs[0]
        return GraphSpec(GRAPH_NAME, f"{GRAPH_NAME}.onnx", (TGT_IDS, memory, SRC_MASK),
                         (TensorSpec("logits", "float32", ("batch", config.tgt_vocab_size)),))


def tensor_spec(name: str, a: Tensor, b: Tensor, shape_a: tuple[int, int], shape_b: tuple[int, int],
                 what: str) -> TensorSpec:
    """An output's spec from two runs at (batch, src_len) shape_a and shape_b: each axis batch, src_len or fixed."""
    if not isinstance(a, Tensor) or a.dtype not in DTYPES:
        raise ExportError(f"{what} output {name} is {getattr(a, 'dtype', type(a).__name__)}; outputs must be "
                          f"tensors of {', '.join(DTYPES.values())}")
    if a.dim() != b.dim():
        raise ExportError(f"{what} output {name} changes rank with the input's shape")
    axes: list[str | int] = []
    for x, y in zip(a.shape, b.shape):
        if x == y:
            axes.append(int(x))
        elif (x, y) == (shape_a[0], shape_b[0]) and "batch" not in axes:
            axes.append("batch")
        elif (x, y) == (shape_a[1], shape_b[1]) and "src_len" not in axes:
            axes.append("src_len")
        else:
            raise ExportError(f"{what} output {name} has an axis ({x} then {y}) that is neither the batch nor the "
                              f"source length")
    return TensorSpec(name, DTYPES[a.dtype], tuple(axes))

