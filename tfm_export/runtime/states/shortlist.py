"""A vocabulary shortlist on the growing cache: the output head scores only a batch's likely tokens. Torch-free.

CTranslate2's `use_vmap` (runtime.decode.vmap picks the tokens). The head is part of decoder.onnx (its last
MatMul), so `shortlist_decoder` rewrites a copy of that graph when a model first decodes with a shortlist, no
re-export: a new input `shortlist` (S,) int64 gathers the head's rows (and the final logits bias) before the
MatMul, so each step multiplies by (d_model, S) instead of (d_model, vocab):

    rows   = Gather(lm_head.weight, shortlist)     (S, d_model)   the same Transpose and MatMul after it
    logits = ...                                    (rows, S)
    next_ids = Gather(shortlist, ArgMax(...))       (rows,)        vocabulary ids again

Every (vocab,)-shaped constant between the logits and next_ids (the model's banned ids) is gathered too. The
states hand strategies vocabulary ids and (rows, vocab) logits with -inf outside the shortlist (processors and
log_softmax then normalise over the shortlist, as CTranslate2 does); beam search's device head (runtime.states.
head) picks among the S logits under the bias gathered to the shortlist. A head that is not a float MatMul
(an int8 or int4 export) cannot be gathered: `shortlist_decoder` returns None and `MaskedCache` masks the full
logits on the host instead (the same tokens, no speed-up).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..decode.processors import BiasKey, bias_array
from ..device import open_sessions
from .growing import GrowingCache, GrowingState, device_value

log = logging.getLogger(__name__)

INPUT = "shortlist"
PASSING = ("Gather", "Squeeze", "Reshape", "Identity", "Slice")  # ops between the head and `logits` (its rows)


def _head(graph: onnx.GraphProto) -> tuple[onnx.NodeProto, str, int, str | None] | None:
    """The head MatMul, the initializer of its rows, the axis holding the vocabulary, and the bias initializer
    (None: no bias); None when the logits are not a float MatMul of an initializer (a quantized head)."""
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    node, bias = producer.get("logits"), None
    while node is not None and node.op_type in PASSING:  # the last position picked from every position's logits
        node = producer.get(node.input[0])
    if node is not None and node.op_type == "Add":
        bias = next((i for i in node.input if i in inits), None)
        node = producer.get(next((i for i in node.input if i not in inits), ""))
    if node is None or node.op_type != "MatMul":
        return None
    weight = node.input[1]
    if weight in inits and len(inits[weight].dims) == 2:
        return node, weight, 1, bias
    transpose = producer.get(weight)
    if (transpose is not None and transpose.op_type == "Transpose" and transpose.input[0] in inits
            and list(helper.get_attribute_value(transpose.attribute[0])) == [1, 0]):
        return transpose, transpose.input[0], 0, bias
    return None


def shortlist_decoder(model: onnx.ModelProto, vocab: int) -> onnx.ModelProto | None:
    """`model` (decoder.onnx, changed in place) with the `shortlist` input (see the module docstring), or None
    when its head cannot be gathered."""
    graph = model.graph
    found = _head(graph)
    if found is None or "next_ids" not in {o.name for o in graph.output}:
        return None
    node, weight, axis, bias = found
    gathered = [helper.make_node("Gather", [weight, INPUT], [f"{weight}_shortlist"], axis=axis)]
    node.input[0 if node.op_type == "Transpose" else 1] = f"{weight}_shortlist"
    inits = {i.name: i for i in graph.initializer}
    patched = _between_logits_and_ids(graph) + [n for n in graph.node if bias in n.input and bias]
    targets = {i for n in patched for i in n.input  # the bias and the bans: (vocab,) constants on the way
               if i in inits and inits[i].dims and inits[i].dims[-1] == vocab}
    for name in sorted(targets):
        gathered.append(helper.make_node("Gather", [name, INPUT], [f"{name}_shortlist"], axis=-1))
        for n in patched:
            n.input[:] = [f"{name}_shortlist" if i == name else i for i in n.input]
    argmax = next(n for n in graph.node if "next_ids" in n.output)
    argmax.output[:] = ["next_ids_in_shortlist" if o == "next_ids" else o for o in argmax.output]
    gathered.append(helper.make_node("Gather", [INPUT, "next_ids_in_shortlist"], ["next_ids"], axis=0))
    for new in gathered:
        new.name = f"shortlist_{new.output[0]}"
    graph.node.extend(gathered)
    graph.input.append(helper.make_tensor_value_info(INPUT, onnx.TensorProto.INT64, ["shortlist"]))
    _sort_nodes(graph)
    del graph.value_info[:]  # shapes with the vocabulary: ORT infers the new ones
    for out in graph.output:
        if out.name == "logits":
            out.type.tensor_type.shape.dim[-1].dim_param = "shortlist"
    return model


def _between_logits_and_ids(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes on the way from the logits to next_ids (the ArgMax and what it reads of the logits)."""
    producer = {o: n for n in graph.node for o in n.output}
    out, todo = [], ["next_ids"]
    while todo:
        node = producer.get(todo.pop())
        if node is None or node in out or "logits" in node.output:
            continue
        out.append(node)
        todo += list(node.input)
    return out


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """Topological order again (the new Gathers were appended after their consumers)."""
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in known for i in n.input)]
        if not ready:
            raise ValueError("the shortlist rewrite left a cycle in the decoder graph")
        for n in ready:
            ordered.append(n)
            known.update(n.output)
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)


def open_shortlist_decoder(path: Path, vocab: int, device: str, options: Any) -> Any | None:
    """An ONNX Runtime session of `path`'s decoder rewritten with the shortlist input (written to a temporary
    folder, opened with the model's device and options), or None when its head cannot be gathered."""
    rewritten = shortlist_decoder(onnx.load(str(path)), vocab)
    if rewritten is None:
        log.warning("%s has no float head to gather (a quantized export): the shortlist masks the logits instead "
                    "(the same tokens, no speed-up)", path)
        return None
    folder = Path(tempfile.mkdtemp(prefix="tfm-shortlist-"))
    onnx.save(rewritten, str(folder / "decoder.onnx"), save_as_external_data=True, location="decoder.onnx.data")
    try:
        return open_sessions({"decoder": folder / "decoder.onnx"}, device, options)[1]["decoder"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # ORT has read the graph and its weights


class ShortlistCache(GrowingCache):
    """The growing cache of `base` on the rewritten decoder, its head restricted to `ids` (S,) sorted."""

    def __init__(self, base: GrowingCache, decoder: Any, ids: np.ndarray):
        self.__dict__.update(base.__dict__)  # the encoder, device, names, helper sessions
        self.decoder, self.ids, self.positions = decoder, np.ascontiguousarray(ids, dtype=np.int64), False
        self.vocab = base.config.tgt_vocab_size
        self._biases: dict[BiasKey, np.ndarray] = {}

    def start(self, src: np.ndarray, expand: int = 1) -> "ShortlistState":
        encoded = self._encode(src)
        if expand > 1 and not self.per_source:
            index = np.repeat(np.arange(src.shape[0]), expand)
            encoded = dict(zip(encoded, self.gather(list(encoded.values()), index)))
        return ShortlistState(self, encoded, src.shape[0] * expand)

    def bias(self, key: BiasKey) -> np.ndarray:
        """The (S,) bias of a processors.bias_key: the vocabulary's, at the shortlist's ids."""
        if key not in self._biases:
            self._biases[key] = bias_array(self.vocab, key)[self.ids]
        return self._biases[key]


class ShortlistState(GrowingState):
    """GrowingState whose logits are the shortlist's (see the module docstring)."""

    def __init__(self, cache: ShortlistCache, encoded: dict[str, Any], rows: int):
        super().__init__(cache, encoded, rows)
        self.binding.bind_ortvalue_input(INPUT, device_value(cache.device, cache.ids))

    def logits(self) -> np.ndarray:
        """(rows, vocab) float32: the shortlist's logits in place, -inf elsewhere."""
        small = self.outputs["logits"].numpy()
        full = np.full((small.shape[0], self.cache.vocab), -np.inf, dtype=np.float32)
        full[:, self.cache.ids] = small
        return full

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        logp, picked = self.cache.head(self.outputs["logits"], self.cache.bias(bias), width, renormalize)
        return logp, self.cache.ids[picked]


class MaskedCache:
    """A shortlist as a mask, for a head `shortlist_decoder` cannot gather: any cache's states with the logits
    outside `ids` (and the model's `banned` ids) set to -inf on the host; the head still scores every token."""

    def __init__(self, base: Any, ids: np.ndarray, vocab: int, banned: tuple[int, ...] = ()):
        self.base, self.lock = base, base.lock
        allowed = np.zeros(vocab, dtype=bool)
        allowed[ids] = True
        allowed[list(banned)] = False
        self.mask = np.where(allowed, 0.0, -np.inf).astype(np.float32)  # (vocab,)

    def start(self, src: Any, expand: int = 1) -> "MaskedState":
        return MaskedState(self.base.start(src, expand), self.mask)


class MaskedState:
    device_top = False  # beam search takes the masked logits

    def __init__(self, state: Any, mask: np.ndarray):
        self.state, self.mask = state, mask

    def step(self, tokens: np.ndarray) -> None:
        self.state.step(tokens)

    def reorder(self, beam_idx: np.ndarray) -> None:
        self.state.reorder(beam_idx)

    def logits(self) -> np.ndarray:
        return self.state.logits() + self.mask

    def next_ids(self) -> np.ndarray:
        return self.logits().argmax(axis=1)

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("a masked shortlist's beam search takes the logits (device_top is False)")
