"""The nn.Module wrappers that export traces: flat tensors in and out, in the specs' order."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model.kv_cache import CachePolicy, RowCache, SlotCache
from ..model.attention import KV, scaled_queries
from ..model.transformer import Transformer
from .specs import ALIGNMENT_NAME, EXAMPLE_SIZES, GraphSpec


def _pairs(flat: tuple[Tensor, ...]) -> list[KV]:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


class EncoderGraph(nn.Module):
    """the encoder input (token ids (batch, src_len), features (batch, n_mels, n_frames) or frames (batch, src_len,
    n_feats): specs.encoder_input)
    -> (src_mask, cross.0.key, cross.0.value, ...)."""

    n_named_args = 1  # inputs before the *caches varargs (none here)

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, source: Tensor) -> tuple[Tensor, ...]:
        memory, src_mask = self.model.encode(source)
        flat = [src_mask]
        for key, value in self.model.cross_kv(memory):
            flat += [key, value]
        return tuple(flat)


class DecoderGraph(nn.Module):
    """(input_ids, src_mask, past..., cross...) -> (logits, next_ids, present..., earlier_logits): the growing
    cache; earlier_logits (batch, tgt_len - 1, tgt_vocab) are the new positions' before the last
    (specs.EARLIER_LOGITS: none in a plain step, the drafted ids' in a speculative one)."""

    n_named_args = 2  # input_ids, src_mask; the caches come as *varargs
    positions = True  # the spec declares earlier_logits (the slot graphs' single-token steps do not)

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.n_layers = model.config.n_decoder_layers

    def forward(self, input_ids: Tensor, src_mask: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        return self.step(input_ids, src_mask, caches, None)

    def step(self, input_ids: Tensor, src_mask: Tensor, caches: tuple[Tensor, ...], cache: CachePolicy | None
             ) -> tuple[Tensor, ...]:
        """One decoder call under the `cache` policy (None: growing), flattened in the specs' order."""
        n = 2 * self.n_layers
        past, cross = _pairs(caches[:n]), _pairs(caches[n:])
        hidden, present = self.model.decode_hidden(input_ids, src_mask, cross, past, cache=cache)
        if self.positions:
            earlier, last = self.model.project_apart(hidden)
        else:  # (batch, d_model): the head's MatMul writes the graph's logits output itself
            earlier, last = None, self.model.project(self.model.decoder_norm(hidden[:, -1]))
        last = last.float()  # (batch, tgt_vocab)
        next_ids = self.model.pick(last)  # (batch,): banned ids never win
        flat = [last, next_ids]
        for key, value in present:
            flat += [key, value]
        return tuple(flat) if earlier is None else (*flat, earlier.float())


class StaticDecoderGraph(DecoderGraph):
    """(input_ids (batch, 1), src_mask, cache_len (batch,), cache..., cross...) -> (logits, next_ids, cache'...).

    The decoder step over a pre-allocated cache of max_len slots (specs.static_decoder_spec): no
    shape depends on how many tokens were decoded, so a CUDA graph of it can be replayed. Row b
    writes slot cache_len[b], so the rows of a batch may be at different steps.
    """

    n_named_args = 3  # input_ids, src_mask, cache_len; the caches come as *varargs
    positions = False

    def forward(self, input_ids: Tensor, src_mask: Tensor, cache_len: Tensor, *caches: Tensor
                ) -> tuple[Tensor, ...]:
        slots = caches[0].shape[-2]  # (batch, heads, slots, head_dim): fixed by the spec, max_len or fewer
        return self.step(input_ids, src_mask, caches, SlotCache.at(cache_len, slots))


class RowsDecoderGraph(DecoderGraph):
    """StaticDecoderGraph's step with one fused attention operator per layer (kv_cache.RowCache, ONNX
    Runtime's GroupQueryAttention): bound to the past cache's memory, present.* is written in place."""

    n_named_args = 3  # input_ids, src_mask, cache_len; the caches come as *varargs
    positions = False

    def forward(self, input_ids: Tensor, src_mask: Tensor, cache_len: Tensor, *caches: Tensor
                ) -> tuple[Tensor, ...]:
        return self.step(input_ids, src_mask, caches, RowCache.at(cache_len))


class AlignmentGraph(nn.Module):
    """(input_ids (batch, tgt_len), src_mask, cross...) -> the cross-attention weights of config.alignment_heads
    (batch, heads, tgt_len, src_len): the decoder over whole sequences (an empty past), each alignment layer's
    weights recomputed from its cross-attention's inputs by a forward hook (the model's code stays as it is; the
    layers after the last alignment layer and the head feed no output, and the exporter drops them)."""

    n_named_args = 2  # input_ids, src_mask; the cross keys/values come as *varargs

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, src_mask: Tensor, *cross: Tensor) -> tuple[Tensor]:
        weights: dict[int, Tensor] = {}
        layers = sorted({layer for layer, _ in self.model.config.alignment_heads})

        def keep(index: int):
            def hook(module: nn.Module, args: tuple[Tensor, ...], _out: Tensor) -> None:
                x, key, _value, allowed = args[:4]
                q = module.split_heads(scaled_queries(module.q_proj(x), module.scale))  # (b, heads, tgt_len, hd)
                scores = torch.matmul(q, key.transpose(-1, -2))  # (batch, heads, tgt_len, src_len)
                scores = scores + torch.where(allowed, 0.0, torch.finfo(scores.dtype).min)
                weights[index] = torch.softmax(scores.float(), dim=-1)
            return hook

        handles = [self.model.decoder_layers[i].cross_attn.register_forward_hook(keep(i)) for i in layers]
        try:
            empty = self.model.empty_cache(input_ids.shape[0], input_ids.device, cross[0].dtype)
            self.model.decode(input_ids, src_mask, _pairs(cross), empty, last_only=True)
        finally:
            for handle in handles:
                handle.remove()
        heads = [weights[layer][:, head] for layer, head in self.model.config.alignment_heads]
        return (torch.stack(heads, dim=1),)  # (batch, heads, tgt_len, src_len)


GRAPH_MODULES = {"encoder": EncoderGraph, "decoder": DecoderGraph, "decoder_static": StaticDecoderGraph,
                 "decoder_rows": RowsDecoderGraph, ALIGNMENT_NAME: AlignmentGraph}

_DTYPES = {"int64": torch.int64, "bool": torch.bool, "float32": torch.float32, "float16": torch.float16}


def example_inputs(spec: GraphSpec, vocab: dict[str, int], seed: int = 0) -> tuple[Tensor, ...]:
    """Random tensors in the spec's shapes with EXAMPLE_SIZES for the symbolic dims.

    `vocab` maps integer input names to their id range (the token-id source -> src vocab, ...).
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
