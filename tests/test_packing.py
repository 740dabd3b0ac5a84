"""Projections of one input packed into one MatMul (export.packing): the outputs stay bit for bit the same,
for float32 MatMuls and for int4's MatMulNBits (packed after quantisation)."""

import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tfm_export.export import exporter
from tfm_export.export.int4 import Int4Settings, quantize_int4
from tfm_export.export.packing import pack_projections
from tfm_export.export.specs import ALL_GRAPH_SPECS
from tfm_export.model.checkpoint import load_checkpoint

# Decoder rows per source, new tokens, past, source length: greedy, beams over a shared source, a prefix.
SHAPES = [{"batch": 1, "src_batch": 1, "tgt_len": 1, "past_len": 9, "src_len": 12},
          {"batch": 8, "src_batch": 2, "tgt_len": 1, "past_len": 3, "src_len": 5},
          {"batch": 3, "src_batch": 3, "tgt_len": 4, "past_len": 0, "src_len": 7}]


def feeds(session: ort.InferenceSession, dims: dict[str, int], vocab: int, slots: int, rng) -> dict:
    out = {}
    for value in session.get_inputs():
        shape = [dims[d] if isinstance(d, str) else d for d in value.shape]
        if value.name == "cache_len":
            out[value.name] = rng.integers(0, slots - 1, shape).astype(np.int64)
        elif "int64" in value.type:
            out[value.name] = rng.integers(0, vocab, shape).astype(np.int64)
        elif "bool" in value.type:
            out[value.name] = rng.random(shape) < 0.8
            out[value.name][..., 0] = True  # every row attends to something
        else:
            out[value.name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize("quantize", [None, "int4"])
@pytest.mark.parametrize("graph", ["encoder", "decoder", "decoder_rows"])
def test_packed_graph_computes_the_same_bits(tiny_checkpoint, tmp_path, graph, quantize):
    model = load_checkpoint(tiny_checkpoint).build_model()
    cfg = model.config
    spec = ALL_GRAPH_SPECS[graph](cfg) if graph != "decoder_rows" else ALL_GRAPH_SPECS[graph](cfg, slots=16)
    exporter.export_graph(model, spec, tmp_path, 18)  # by the module: conftest's cache of identical graphs serves it
    if quantize == "int4":  # blocks of 16: several blocks a column, so a packing that mixed blocks would show
        float_graph = tmp_path / f"float_{spec.file}"
        (tmp_path / spec.file).replace(float_graph)
        quantize_int4(float_graph, tmp_path / spec.file, False, Int4Settings(block_size=16))
    packed = tmp_path / f"packed_{spec.file}"
    shutil.copy(tmp_path / spec.file, packed)
    # one group per attention's query/key/value; the encoder also packs every decoder layer's cross keys/values
    layers = cfg.n_encoder_layers + 1 if graph == "encoder" else cfg.n_decoder_layers
    assert pack_projections(packed) == layers
    ops = [n.op_type for n in onnx.load(str(packed)).graph.node]
    before = [n.op_type for n in onnx.load(str(tmp_path / spec.file)).graph.node]
    matmul = "MatMulNBits" if quantize else "MatMul"
    assert ops.count("Split") == layers and ops.count(matmul) < before.count(matmul)
    assert before.count(matmul) - ops.count(matmul) == sum(  # every projection of a group in one node
        2 if graph != "encoder" or i < cfg.n_encoder_layers else 2 * cfg.n_decoder_layers - 1 for i in range(layers))
    rng = np.random.default_rng(0)
    for threads in (1, 2):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        plain, fused = (ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
                        for p in (tmp_path / spec.file, packed))
        for dims in SHAPES if graph != "decoder_rows" else [{**d, "tgt_len": 1, "src_batch": d["batch"]}
                                                             for d in SHAPES]:
            inputs = feeds(plain, dims, min(cfg.src_vocab_size, cfg.tgt_vocab_size), 16, rng)
            for name, a, b in zip([o.name for o in plain.get_outputs()], plain.run(None, inputs),
                                  fused.run(None, inputs)):
                assert np.array_equal(a, b), f"{graph} {name} {dims} threads {threads}"


def test_the_default_export_is_packed(tiny_export):
    ops = [n.op_type for n in onnx.load(str(tiny_export / "decoder.onnx")).graph.node]
    assert "Split" in ops
