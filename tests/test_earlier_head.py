"""The earlier positions' head (export.earlier_head): decoder.onnx's earlier_logits, the new positions before the
last (speculative decoding's check).

The tiny model's int8 export: the head's MatMuls of those rows live only in an If's then branch (the main graph
keeps the last position's), a plain one-id step runs none of them (ONNX Runtime's profile of the step's kernels),
a step of several ids runs them, and the branch reads the head's weight where the main graph keeps it (one copy,
in the saved file and in ONNX Runtime's optimised graph). Its float32 export: the head's MatMul and Add over zero
rows, no If (cheaper than one, BENCHMARKS.md "Decode core"), reading the one weight. Both: eager's per-position
logits. The int4 scan's branch: tests/test_head_scan.py (Node and the browser decode a scanned export).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.graphs import EncoderGraph
from tfm_export.graph_io import EARLIER_LOGITS
from tfm_export.model.checkpoint import load_checkpoint

# The head's weight MatMuls, as each variant writes them (int8: ORT's quantize_dynamic graph, export.int8)
HEAD_OPS = ("MatMul", "MatMulInteger", "DynamicQuantizeLinear")


@pytest.fixture(scope="module")
def int8_variant(tiny_checkpoint, tmp_path_factory):
    """("int8", export folder, the eager model): its head under the If."""
    checkpoint = load_checkpoint(tiny_checkpoint)
    out = tmp_path_factory.mktemp("earlier-int8") / "out"
    export_model(checkpoint, out, ExportOptions(quantize="int8", validate=False))
    return "int8", out, checkpoint.build_model().eval()


@pytest.fixture(scope="module")
def float32_variant(tiny_checkpoint, tiny_export):
    """("float32", export folder, the eager model): its head unguarded."""
    return "float32", tiny_export, load_checkpoint(tiny_checkpoint).build_model().eval()


@pytest.fixture(params=["float32", "int8"])
def variant(request):
    return request.getfixturevalue(f"{request.param}_variant")


def the_if(graph: onnx.GraphProto) -> onnx.NodeProto:
    (node,) = [n for n in graph.node if n.op_type == "If"]
    assert list(node.output) == [EARLIER_LOGITS]
    return node


def branches(node: onnx.NodeProto) -> dict[str, onnx.GraphProto]:
    return {a.name: a.g for a in node.attribute}


def test_the_earlier_head_lives_only_in_the_ifs_then_branch(int8_variant):
    _, out, model = int8_variant
    graph = onnx.load(str(out / "decoder.onnx")).graph
    parts = branches(the_if(graph))
    then, otherwise = parts["then_branch"], parts["else_branch"]
    assert [n.op_type for n in otherwise.node] == ["Reshape"]  # an empty result: no weight read
    assert any(n.op_type in ("MatMul", "MatMulInteger") for n in then.node)
    (inside,) = [n for n in then.node if n.op_type in ("MatMul", "MatMulInteger")]
    weight = inside.input[1]  # the head's (int8: its int8 copy), an initializer of the main graph
    assert [t.name for t in graph.initializer].count(weight) == 1
    assert not then.initializer and not otherwise.initializer  # one copy of the head, the main graph's
    top = [n for n in graph.node if weight in n.input]  # the last position's head reads the same weight
    assert [n.op_type for n in top] == [inside.op_type]
    assert list(next(t for t in graph.initializer if t.name == weight).dims) == \
        [model.config.d_model, model.config.tgt_vocab_size]


def run_profiled(out, feeds: dict[str, np.ndarray], prefix, optimized=None) -> tuple[list, set[str]]:
    """The decoder's outputs on `feeds` and the names of the nodes whose kernels ran (ORT's profile, written to
    `prefix`_<time>.json)."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(prefix)
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(out / "decoder.onnx"), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)  # the first run plans and allocates; its kernels are profiled too
    outputs = session.run(None, feeds)
    events = json.loads(open(session.end_profiling()).read())
    ran = {e["name"].removesuffix("_kernel_time") for e in events if e.get("cat") == "Node"}
    return outputs, ran


def decoder_feeds(model, batch: int, past_len: int, tgt_len: int, seed: int = 0):
    """(the decoder's inputs in order, eager's logits of every new position (batch, tgt_len, vocab))."""
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, cfg.src_vocab_size, (batch, 7), generator=gen)
    with torch.no_grad():
        cross = EncoderGraph(model)(src)
        ids = torch.randint(3, cfg.tgt_vocab_size, (batch, tgt_len), generator=gen)
        past = [torch.randn(batch, cfg.n_heads, past_len, cfg.head_dim, generator=gen)
                for _ in range(2 * cfg.n_decoder_layers)]
        pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
        cross_pairs = [(cross[1 + i], cross[2 + i]) for i in range(0, len(cross) - 1, 2)]
        eager, _ = model.decode(ids, cross[0], cross_pairs, pairs)
    return (ids, cross[0], *past, *cross[1:]), eager.numpy()


def feeds_for(out, args) -> dict[str, np.ndarray]:
    names = [i.name for i in onnx.load(str(out / "decoder.onnx"), load_external_data=False).graph.input]
    return {name: a.numpy() for name, a in zip(names, args)}


def test_a_plain_step_runs_nothing_of_the_earlier_head(int8_variant, tmp_path):
    """One id a row: earlier_logits (batch, 0, vocab) from the else branch; no kernel of the then branch runs.
    Three ids a row: the then branch runs (the profile sees its nodes: the check can fail)."""
    _, out, model = int8_variant
    then = branches(the_if(onnx.load(str(out / "decoder.onnx")).graph))["then_branch"]
    head_nodes = {n.name for n in then.node if n.op_type in HEAD_OPS}
    assert head_nodes
    args, eager = decoder_feeds(model, batch=3, past_len=5, tgt_len=1)
    outputs, ran = run_profiled(out, feeds_for(out, args), tmp_path / "plain")
    assert outputs[-1].shape == (3, 0, model.config.tgt_vocab_size) and outputs[-1].dtype == np.float32
    assert "earlier_head_unless_empty" in ran and not ran & head_nodes  # the If ran, none of its head
    args, _ = decoder_feeds(model, batch=3, past_len=5, tgt_len=3)
    outputs, ran = run_profiled(out, feeds_for(out, args), tmp_path / "three")
    assert outputs[-1].shape == (3, 2, model.config.tgt_vocab_size)
    assert ran & head_nodes


def test_earlier_logits_are_eagers_per_position_logits(variant):
    """Several ids a row (a speculative step's drafts): earlier_logits and logits are eager's logits of every
    position, float32 within validation's atol, int8 within its quantisation error."""
    name, out, model = variant
    args, eager = decoder_feeds(model, batch=3, past_len=4, tgt_len=5, seed=1)
    session = ort.InferenceSession(str(out / "decoder.onnx"), providers=["CPUExecutionProvider"])
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds_for(out, args))))
    earlier, last = outputs[EARLIER_LOGITS], outputs["logits"]
    assert earlier.shape == (3, 4, model.config.tgt_vocab_size)
    atol = 1e-4 if name == "float32" else 0.05 * np.abs(eager).max()
    np.testing.assert_allclose(earlier, eager[:, :-1], atol=atol, rtol=0)
    np.testing.assert_allclose(last, eager[:, -1], atol=atol, rtol=0)
    if name == "int8":  # the earlier rows' error is the last row's kind: their own activation scale, one weight
        assert np.abs(earlier - eager[:, :-1]).max() <= 3 * np.abs(last - eager[:, -1]).max() + 1e-3


def test_onnx_runtimes_optimised_graph_keeps_one_copy_of_the_head(int8_variant, tmp_path):
    """ORT's graph optimisations (fusions inside the branch: int8's DynamicQuantizeMatMul) keep reading the
    main graph's weight: the branch holds no initializer of its own, and the plain step still runs no head."""
    _, out, model = int8_variant
    optimized = tmp_path / "optimized.onnx"
    args, _ = decoder_feeds(model, batch=1, past_len=2, tgt_len=1)
    run_profiled(out, feeds_for(out, args), tmp_path / "profile", optimized=optimized)
    graph = onnx.load(str(optimized)).graph
    parts = branches(the_if(graph))
    assert not parts["then_branch"].initializer and not parts["else_branch"].initializer
    assert [n.op_type for n in parts["else_branch"].node] == ["Reshape"]


def test_a_float32_head_runs_over_zero_rows_without_an_if(float32_variant, tmp_path):
    """The float32 head's MatMul and Add stay in the main graph (export.earlier_head.ZERO_ROW_KERNELS), reading
    the last position's weight; a plain step gives earlier_logits (batch, 0, vocab) from them, a step of three ids
    (batch, 2, vocab)."""
    _, out, model = float32_variant
    graph = onnx.load(str(out / "decoder.onnx")).graph
    assert not [n for n in graph.node if n.op_type == "If"]
    producer = {name: n for n in graph.node for name in n.output}
    head = [producer[EARLIER_LOGITS]]
    while head[-1].op_type != "MatMul":
        head.append(producer[head[-1].input[0]])
    assert [n.op_type for n in head] == ["Add", "MatMul"]
    weight = head[-1].input[1]  # one initializer, read by both heads' MatMuls
    assert [n.op_type for n in graph.node if weight in n.input] == ["MatMul", "MatMul"]
    assert [t.name for t in graph.initializer].count(weight) == 1
    for tgt_len in (1, 3):
        args, _ = decoder_feeds(model, batch=3, past_len=5, tgt_len=tgt_len)
        outputs, _ = run_profiled(out, feeds_for(out, args), tmp_path / f"ids{tgt_len}")
        assert outputs[-1].shape == (3, tgt_len - 1, model.config.tgt_vocab_size)
        assert outputs[-1].dtype == np.float32
