"""The nn.Module wrappers that export traces: flat tensors in and out, in the specs' order."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model.transformer import KV, Transformer
from .specs import EXAMPLE_SIZES, GraphSpec


def _pairs(flat: tuple[Tensor, ...]) -> list[KV]:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


class EncoderGraph(nn.Module):
    """src_ids -> (src_mask, cross.0.key, cross.0.value, ...)."""

    n_named_args = 1  # inputs before the *caches varargs (none here)

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        memory, src_mask = self.model.encode(src_ids)
        flat = [src_mask]
        for key, value in self.model.cross_kv(memory):
            flat += [key, value]
        return tuple(flat)


class DecoderGraph(nn.Module):
    """(input_ids, src_mask, past..., cross...) -> (logits, next_ids, present...)."""

    n_named_args = 2  # input_ids, src_mask; the caches come as *varargs

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.n_layers = model.config.n_decoder_layers

    def forward(self, input_ids: Tensor, src_mask: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        n = 2 * self.n_layers
        past, cross = _pairs(caches[:n]), _pairs(caches[n:])
        logits, present = self.model.decode(input_ids, src_mask, cross, past, last_only=True)
        last = logits[:, -1].float()  # (batch, tgt_vocab): only the last position is ever needed
        next_ids = last.argmax(-1)  # (batch,)
        flat = [last, next_ids]
        for key, value in present:
            flat += [key, value]
        return tuple(flat)


class StaticDecoderGraph(nn.Module):
    """(input_ids (batch, 1), src_mask, cache_len (1,), cache..., cross...) -> (logits, next_ids, cache'...).

    The decoder step over a pre-allocated cache of max_len slots (specs.static_decoder_spec): no
    shape depends on how many tokens were decoded, so a CUDA graph of it can be replayed.
    """

    n_named_args = 3  # input_ids, src_mask, cache_len; the caches come as *varargs

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.n_layers = model.config.n_decoder_layers

    def forward(self, input_ids: Tensor, src_mask: Tensor, cache_len: Tensor, *caches: Tensor
                ) -> tuple[Tensor, ...]:
        model, n = self.model, 2 * self.n_layers
        slots = torch.arange(model.config.max_len, device=input_ids.device)  # (max_len,)
        write = (slots == cache_len)[None, None, :, None]  # (1, 1, max_len, 1): this step's slot
        visible = (slots <= cache_len)[None, None, None, :]  # (1, 1, 1, max_len): filled slots and this one
        src_allowed = src_mask[:, None, None, :]  # (batch, 1, 1, src_len)
        x = model.tgt_embed(input_ids, offset=cache_len)  # (batch, 1, d_model)
        flat: list[Tensor] = []
        for layer, past, cross in zip(model.decoder_layers, _pairs(caches[:n]), _pairs(caches[n:])):
            x = _static_layer(layer, x, past, cross, write, visible, src_allowed, flat)
        last = model.project(model.decoder_norm(x))[:, -1].float()  # (batch, tgt_vocab)
        return (last, last.argmax(-1), *flat)


def _static_layer(layer: nn.Module, x: Tensor, past: KV, cross: KV, write: Tensor, visible: Tensor,
                  src_allowed: Tensor, present: list[Tensor]) -> Tensor:
    """DecoderLayer.forward with the cache written in place of concatenated (same weights, same wiring)."""

    def attend_self(h: Tensor) -> Tensor:
        k, v = layer.self_attn.project_kv(h)  # (batch, heads, 1, head_dim)
        # A select rather than a scatter: elementwise, so it exports and runs the same everywhere.
        k, v = torch.where(write, k, past[0]), torch.where(write, v, past[1])  # (batch, heads, max_len, hd)
        present.extend((k, v))
        return layer.self_attn(h, k, v, visible)

    x = layer.residual(x, layer.norm1, attend_self)
    x = layer.residual(x, layer.norm2, lambda h: layer.cross_attn(h, cross[0], cross[1], src_allowed))
    return layer.residual(x, layer.norm3, layer.ffn)


GRAPH_MODULES = {"encoder": EncoderGraph, "decoder": DecoderGraph, "decoder_static": StaticDecoderGraph}

_DTYPES = {"int64": torch.int64, "bool": torch.bool, "float32": torch.float32, "float16": torch.float16}


def example_inputs(spec: GraphSpec, vocab: dict[str, int], seed: int = 0) -> tuple[Tensor, ...]:
    """Random tensors in the spec's shapes with EXAMPLE_SIZES for the symbolic dims.

    `vocab` maps integer input names to their id range (src_ids -> src vocab, ...).
    """
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for t in spec.inputs:
        shape = [EXAMPLE_SIZES[d] if isinstance(d, str) else d for d in t.shape]
        dtype = _DTYPES[t.dtype]
        if dtype == torch.int64:
            tensors.append(torch.randint(0, vocab[t.name], shape, generator=gen))
        elif dtype == torch.bool:
            tensors.append(torch.ones(shape, dtype=torch.bool))
        else:
            tensors.append(torch.randn(shape, generator=gen).to(dtype))
    return tuple(tensors)


def dynamic_shapes(spec: GraphSpec, n_named_args: int) -> tuple[object, ...]:
    """torch.export dynamic_shapes for the spec's inputs: one named Dim per symbolic axis.

    torch.export matches the forward signature, so inputs past `n_named_args` are grouped
    into one tuple (the *varargs).
    """
    dims: dict[str, object] = {}

    def dim(name: str) -> object:
        if name not in dims:
            dims[name] = torch.export.Dim(name, min=0 if name == "past_len" else 1)
        return dims[name]

    flat = [{i: dim(d) for i, d in enumerate(t.shape) if isinstance(d, str)} for t in spec.inputs]
    rest = flat[n_named_args:]
    return (*flat[:n_named_args], tuple(rest)) if rest else tuple(flat)
