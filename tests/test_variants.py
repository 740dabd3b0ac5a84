"""Export variants: --optimize, --quantize int8, --dtype float16 and the --cuda-graph static-cache decoder.

Each is rewritten or added after the float32 export, keeps the I/O contract its specs describe,
is validated, and is visible in the manifest.
"""

import json

import numpy as np
import onnx
import pytest

from tfm_export.manifest import Manifest, load_manifest
import torch

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.errors import DeviceError, ExportError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.graphs import DecoderGraph, EncoderGraph, StaticDecoderGraph
from tfm_export.model.presets import init_model
from tfm_export.runtime import Device, RuntimeOptions, open_export
from tfm_export.runtime.device import session_providers
from tfm_export.runtime.states.growing import GrowingCache
from tfm_export.runtime.states.static import StaticCache, cuda_graph_device

from conftest import has_cuda_gpu
from helpers import run_cli, run_cli_ok

SOURCES = [[5, 9, 13, 7], [40, 41], [3, 60, 12]]
ELEM = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.INT64: "int64",
        onnx.TensorProto.BOOL: "bool"}


def graph_io_dtypes(path):
    graph = onnx.load(str(path)).graph
    return {v.name: ELEM[v.type.tensor_type.elem_type] for v in (*graph.input, *graph.output)}


@pytest.fixture(scope="module")
def optimized(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("opt") / "out"
    manifest = export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(optimize=True)).to_dict()
    return out, manifest


@pytest.fixture(scope="module")
def float16_static(tiny_checkpoint, tmp_path_factory):
    """--dtype float16 --cuda-graph through the CLI (validated on CPU here: no GPU)."""
    out = tmp_path_factory.mktemp("f16") / "out"
    result = run_cli_ok(tiny_checkpoint, "-o", out, "--dtype", "float16", "--cuda-graph")
    return out, json.loads((out / "manifest.json").read_text()), result.output


@pytest.fixture(scope="module")
def static32(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("static") / "out"
    return out, export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(static_cache=True)).to_dict()


def test_optimized_export_is_fused_and_still_exact(optimized, tiny_export):
    out, manifest = optimized
    fused = manifest["variant"]["transforms"]["optimize"]["decoder"]
    assert manifest["variant"]["optimized"] and fused["skip_layer_normalization"] > 0
    ops = {n.op_type for n in onnx.load(str(out / "decoder.onnx")).graph.node}
    assert "SkipLayerNormalization" in ops and "LayerNormalization" not in ops
    # Attention fused: self attention with its past (mha1) and cross attention reading the
    # precomputed (batch, heads, src_len, head_dim) keys/values without per-step transposes.
    layers = manifest["config"]["n_decoder_layers"]
    assert fused["mha1"] == layers and fused["cross_kv_bnsh"] == layers
    assert {"MultiHeadAttention"} <= ops and not ops & {"Softmax", "Transpose"}
    encoder_ops = {n.op_type for n in onnx.load(str(out / "encoder.onnx")).graph.node}
    assert "MultiHeadAttention" in encoder_ops and "Softmax" not in encoder_ops
    assert manifest["validation"]["mode"] == "parity" and manifest["validation"]["greedy"]["equal"]
    reference = open_export(tiny_export, device="cpu").generate_ids(SOURCES, 12)
    assert open_export(out, device="cpu").generate_ids(SOURCES, 12) == reference
    plain = json.loads((tiny_export / "manifest.json").read_text())
    assert manifest["graphs"]["decoder"]["inputs"] == plain["graphs"]["decoder"]["inputs"]


def test_optimized_static_export_has_fused_in_flight_rows(tiny_checkpoint, tiny_export, tmp_path):
    """--optimize --cuda-graph keeps decoder_rows.onnx (the server's in-flight rows on CPU), fused like
    the others, and its rows decode like the plain export; int8 keeps decoder_static alone, and the
    runtime checks report (not fail) its rows, whose activation scales span the batch."""
    from tfm_export.runtime.states.host_rows import open_rows
    from tfm_export.runtime.verify import greedy_in_rows
    from tfm_export.runtime.verify import format_verification, verify_export

    out = tmp_path / "opt_rows"
    manifest = export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(static_cache=True, optimize=True))
    assert {"decoder_static", "decoder_rows"} <= set(manifest.graphs)
    assert manifest.variant.transforms["optimize"]["decoder_rows"]["skip_layer_normalization"] > 0
    model = open_export(out, "cpu", RuntimeOptions(cuda_graph=True))
    assert type(open_rows(model.cache, 2, 8)).__name__ == "HostRows"
    reference = open_export(tiny_export, device="cpu").generate_ids(SOURCES, 12)
    assert greedy_in_rows(model.cache, model.source_input(SOURCES), 12) == reference
    quantized = export_model(load_checkpoint(tiny_checkpoint), tmp_path / "q", ExportOptions(static_cache=True,
                                                                                              quantize="int8"))
    assert "decoder_static" in quantized.graphs and "decoder_rows" not in quantized.graphs
    assert "GroupQueryAttention" in {n.op_type for n in onnx.load(str(out / "decoder_rows.onnx")).graph.node}
    report = verify_export(tmp_path / "q")
    assert isinstance(report["static_cache_mismatched_rows"], list) and "decoder_static.onnx: " in format_verification(report)


def test_int8_export_reports_agreement(tiny_checkpoint, tiny_export, tmp_path):
    out = tmp_path / "q"
    result = run_cli_ok(tiny_checkpoint, "-o", out, "--quantize", "int8")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"]["quantize"] == "int8"
    assert manifest["variant"]["transforms"]["int8"]["decoder"]["quantized_matmuls"] > 0
    greedy = manifest["validation"]["greedy"]
    assert manifest["validation"]["mode"] == "agreement" and 0.0 <= greedy["token_agreement"] <= 1.0
    assert "tokens agree" in result.output
    assert "ok (not checked: quantised)" in result.output and " NO\n" not in result.output  # shown, not judged
    graph = onnx.load(str(out / "decoder.onnx")).graph
    ops = {n.op_type for n in graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}
    # The tied head too: torch.onnx writes it as MatMul(x, Transpose(embedding)), folded before quantising.
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    vocab = manifest["config"]["tgt_vocab_size"]
    assert [shapes[n.input[1]][1] for n in graph.node if n.op_type == "MatMulInteger"][-1] == vocab
    assert not [n for n in graph.node if n.op_type == "Transpose" and n.input[0] in shapes]
    assert (out / "decoder.onnx").stat().st_size < (tiny_export / "decoder.onnx").stat().st_size


def test_unsupported_variants_fail_before_writing(tiny_checkpoint, tmp_path):
    checkpoint = load_checkpoint(tiny_checkpoint)
    with pytest.raises(ExportError, match="cannot be combined"):
        export_model(checkpoint, tmp_path / "x", ExportOptions(dtype="float16", quantize="int8"))
    with pytest.raises(ExportError, match="--dtype bfloat16 is not supported"):
        export_model(checkpoint, tmp_path / "x", ExportOptions(dtype="bfloat16"))
    assert not (tmp_path / "x").exists()


def test_float16_graphs_follow_their_specs(float16_static):
    out, manifest, _ = float16_static
    variant = manifest["variant"]
    assert variant["dtype"] == "float16" and variant["io"]["float32"] == ["logits"]
    for name in ("encoder", "decoder", "decoder_static"):
        entry = manifest["graphs"][name]
        declared = {t["name"]: t["dtype"] for t in entry["inputs"] + entry["outputs"]}
        assert graph_io_dtypes(out / entry["file"]) == declared
        assert variant["transforms"]["float16"][name]["float16_initializers"] > 0
    declared = {t["name"]: t["dtype"] for t in manifest["graphs"]["decoder"]["outputs"]}
    assert declared["logits"] == "float32" and declared["present.0.self.key"] == "float16"


def test_float16_keeps_softmax_and_layer_norm_in_float32(float16_static):
    out, _, _ = float16_static
    graph = onnx.load(str(out / "decoder.onnx")).graph
    produced_by = {o: n for n in graph.node for o in n.output}
    guarded = [n for n in graph.node if n.op_type in ("Softmax", "LayerNormalization")]
    assert guarded
    for node in guarded:  # fed by a Cast to float32
        cast = produced_by[node.input[0]]
        assert cast.op_type == "Cast" and cast.attribute[0].i == onnx.TensorProto.FLOAT
    floors = []
    for init in graph.initializer:  # the -3.4e38 mask floor was clipped, not turned into -inf
        if init.data_type == onnx.TensorProto.FLOAT16:
            values = onnx.numpy_helper.to_array(init).astype(np.float32)
            assert np.isfinite(values).all() and np.abs(values).max(initial=0) <= 2**15
            floors += [v for v in values.ravel() if v <= -2**14]
    assert floors and max(floors) == -2**15
    # Adding a large negative score to the floor stays finite in float16 (at -65504 it would be -inf).
    assert np.isfinite(np.float16(-2**15) + np.float16(-1000))


def test_float16_validation_uses_a_float16_tolerance(float16_static):
    _, manifest, output = float16_static
    report = manifest["validation"]
    assert report["mode"] == "tolerance" and report["atol"] >= 1e-2 and report["rtol"] > 0
    assert all(row["ok"] for row in report["outputs"].values())
    assert report["device"] == ("cuda:0" if has_cuda_gpu() else "cpu")
    assert "tolerance" in output and "static-cache decoder (--cuda-graph):" in output
    # A random model has near-tie logits, where float16 rounding may flip a token: reported, not failed.
    assert report["greedy"]["token_agreement"] >= 0.9


def test_static_decoder_module_equals_the_growing_cache_decoder():
    model = init_model("tiny", seed=3).eval()
    cfg = model.config
    src = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    src[1, 4:] = cfg.src_pad_id
    mask, *cross = EncoderGraph(model)(src)
    past_len, shape = 5, (2, cfg.n_heads, 5, cfg.head_dim)
    past = [torch.randn(shape) for _ in range(2 * cfg.n_decoder_layers)]
    ids = torch.tensor([[7], [9]])
    with torch.no_grad():
        ref = DecoderGraph(model)(ids, mask, *past, *cross)
        noise = [torch.randn(2, cfg.n_heads, cfg.max_len - past_len, cfg.head_dim) * 100 for _ in past]
        caches = [torch.cat([p, n], dim=2) for p, n in zip(past, noise)]
        got = StaticDecoderGraph(model)(ids, mask, torch.tensor([past_len] * 2), *caches, *cross)
    torch.testing.assert_close(got[0], ref[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(got[1], ref[1])
    for r, g, n in zip(ref[2:], got[2:], noise):  # slot past_len written, later slots untouched
        torch.testing.assert_close(g[:, :, : past_len + 1], r, atol=1e-5, rtol=1e-5)
        assert torch.equal(g[:, :, past_len + 1:], n[:, :, 1:])


def rows_at_different_steps(model, cache_len):
    """Static-decoder inputs for a batch whose row b has filled `cache_len[b]` slots (noise beyond)."""
    cfg, batch = model.config, len(cache_len)
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(3, 60, (batch, 7), generator=gen)
    src[1, 4:] = cfg.src_pad_id
    with torch.no_grad():
        mask, *cross = EncoderGraph(model)(src)
    shape = (batch, cfg.n_heads, cfg.max_len, cfg.head_dim)  # (batch, heads, max_len, head_dim)
    caches = [torch.randn(shape, generator=gen) * 10 for _ in range(2 * cfg.n_decoder_layers)]
    ids = torch.randint(3, 60, (batch, 1), generator=gen)
    return (ids, mask, torch.tensor(cache_len), *caches, *cross)


def assert_each_row_is_the_growing_decoder_alone(model, inputs, got):
    """Row b of the static step equals the growing-cache decoder on row b with a past of cache_len[b]."""
    ids, mask, cache_len = inputs[:3]
    n = 2 * model.config.n_decoder_layers
    caches, cross = inputs[3:3 + n], inputs[3 + n:]
    got = [torch.as_tensor(np.asarray(g)) for g in got]
    for b, filled in enumerate(cache_len.tolist()):
        row = slice(b, b + 1)
        with torch.no_grad():
            ref = DecoderGraph(model)(ids[row], mask[row], *(c[row, :, :filled] for c in caches),
                                      *(c[row] for c in cross))
        torch.testing.assert_close(got[0][row], ref[0], atol=1e-4, rtol=1e-4)
        assert torch.equal(got[1][row], ref[1])
        for g, r, c in zip(got[2:], ref[2:], caches):  # slot `filled` written, later slots untouched
            torch.testing.assert_close(g[row, :, : filled + 1], r, atol=1e-4, rtol=1e-4)
            assert torch.equal(g[row, :, filled + 1:], c[row, :, filled + 1:])


PER_ROW_CACHE_LEN = [0, 5, 23]  # three rows, each at its own step


def test_static_decoder_rows_at_different_steps_eager():
    model = init_model("tiny", seed=3).eval()
    inputs = rows_at_different_steps(model, PER_ROW_CACHE_LEN)
    with torch.no_grad():
        got = StaticDecoderGraph(model)(*inputs)
    assert_each_row_is_the_growing_decoder_alone(model, inputs, got)


def test_static_decoder_rows_at_different_steps_onnx(static32, tiny_checkpoint):
    import onnxruntime as ort

    model = load_checkpoint(tiny_checkpoint).build_model().eval()
    inputs = rows_at_different_steps(model, PER_ROW_CACHE_LEN)
    session = ort.InferenceSession(str(static32[0] / "decoder_static.onnx"), providers=["CPUExecutionProvider"])
    assert [i.shape for i in session.get_inputs()[:3]] == [["batch", 1], ["batch", "src_len"], ["batch"]]
    got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})
    assert_each_row_is_the_growing_decoder_alone(model, inputs, got)


def test_static_cache_export_is_validated_and_decodes_the_same(static32, tiny_export):
    out, manifest = static32
    report = manifest["validation"]
    assert report["mode"] == "parity" and report["greedy"]["static_cache_mismatched_rows"] == []
    assert report["outputs"]["decoder_static:logits"]["ok"]
    entry = manifest["graphs"]["decoder_static"]
    assert [t["name"] for t in entry["inputs"][:3]] == ["input_ids", "src_mask", "cache_len"]
    assert entry["inputs"][3]["shape"] == ["batch", 4, 64, 8]  # max_len slots
    plain = json.loads((tiny_export / "manifest.json").read_text())
    assert manifest["graphs"]["decoder"]["inputs"] == plain["graphs"]["decoder"]["inputs"]
    dynamic = open_export(out, device="cpu")
    static = open_export(out, device="cpu", options=RuntimeOptions(cuda_graph=True))
    assert isinstance(static.cache, StaticCache) and isinstance(dynamic.cache, GrowingCache)
    for sources, steps, eos in ((SOURCES, 12, True), (SOURCES, 20, False), (SOURCES[:1], 64, False),
                                (SOURCES, 12, True)):  # the last call reuses the first call's buffers
        assert static.generate_ids(sources, steps, eos) == dynamic.generate_ids(sources, steps, eos)


def test_static_decoder_keeps_a_bounded_number_of_buffer_sets(static32):
    from tfm_export.runtime.states.static import MAX_SLOT_SETS

    out = static32[0]
    static = open_export(out, device="cpu", options=RuntimeOptions(cuda_graph=True))
    dynamic = open_export(out, device="cpu")
    for width in range(1, MAX_SLOT_SETS + 3):  # one more (batch, src_len) than is kept, then some
        sources = [[5 + i for i in range(width)]]
        assert static.generate_ids(sources, 8) == dynamic.generate_ids(sources, 8)
    assert len(static.cache._slots) == MAX_SLOT_SETS
    assert static.generate_ids([[5]], 8) == dynamic.generate_ids([[5]], 8)  # evicted, rebuilt


def test_cuda_graph_runtime_needs_a_static_export(tiny_export):
    with pytest.raises(DeviceError, match="re-export with --cuda-graph"):
        open_export(tiny_export, device="cpu", options=RuntimeOptions(cuda_graph=True))


def test_static_decoder_is_used_on_cuda_by_default(static32, tiny_export):
    from tfm_export.runtime.device import Device
    from tfm_export.runtime.exported import uses_static_decoder

    cuda = Device("cuda:0", (("CUDAExecutionProvider", {"device_id": 0}),), "cuda", 0)
    cpu = Device("cpu", ("CPUExecutionProvider",), "cpu", 0)
    static = Manifest.from_dict(static32[1])
    plain = load_manifest(tiny_export)
    auto, on, off = RuntimeOptions(), RuntimeOptions(cuda_graph=True), RuntimeOptions(cuda_graph=False)
    assert uses_static_decoder(auto, cuda, static) and not uses_static_decoder(auto, cpu, static)
    assert not uses_static_decoder(auto, cuda, plain) and not uses_static_decoder(off, cuda, static)
    assert uses_static_decoder(on, cpu, static)


def test_cuda_graph_provider_option():
    cuda = Device("cuda:1", (("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"), "cuda", 1)
    providers = cuda_graph_device(cuda).providers
    assert providers[0] == ("CUDAExecutionProvider", {"device_id": 1, "enable_cuda_graph": "1"})
    assert providers[1:] == ("CPUExecutionProvider",)
    cpu = Device("cpu", ("CPUExecutionProvider",), "cpu", 0)
    assert cuda_graph_device(cpu) == cpu


def test_float32_stays_float32_on_cuda_unless_tf32_is_asked():
    cuda = Device("cuda:0", (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"), "cuda", 0)
    assert session_providers(cuda, RuntimeOptions())[0] == ("CUDAExecutionProvider", {"device_id": 0, "use_tf32": "0"})
    assert session_providers(cuda, RuntimeOptions(tf32=True))[0][1]["use_tf32"] == "1"
    cpu = Device("cpu", ("CPUExecutionProvider",), "cpu", 0)
    assert session_providers(cpu, RuntimeOptions(tf32=True)) == ["CPUExecutionProvider"]


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda_gpu(), reason="needs a CUDA GPU and onnxruntime-gpu")
def test_cuda_graph_float16_decoding_matches_cpu(float16_static):
    out = float16_static[0]
    cpu = open_export(out, device="cpu").generate_ids(SOURCES, 16)
    graphs = open_export(out, device="cuda", options=RuntimeOptions(cuda_graph=True))
    assert graphs.generate_ids(SOURCES, 16) == cpu
    assert graphs.generate_ids(SOURCES, 16) == cpu  # replayed graphs


def test_thread_settings_reach_the_session():
    opts = RuntimeOptions(intra_op_threads=2, inter_op_threads=1, spin_wait=False).session_options()
    assert opts.intra_op_num_threads == 2 and opts.inter_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_generate_cli_with_cuda_graph_and_no_spin(static32):
    out = static32[0]
    args = ["generate", str(out), "--ids", "5 9 13 7", "--device", "cpu", "--max-new-tokens", "10"]
    plain = run_cli(*args)
    graphs = run_cli(*args, "--cuda-graph", "--no-spin")
    assert plain.exit_code == 0 and graphs.exit_code == 0, graphs.output
    assert graphs.output == plain.output


def test_a_capturing_model_runs_its_searches_and_greedy_calls_by_turns(static32):
    """CUDA graphs (capture on): beam searches take the static cache's lock, as greedy calls do."""
    from tfm_export.runtime.exported import ExportedModel

    model = open_export(static32[0], "cpu", RuntimeOptions(cuda_graph=True))
    assert model.growing.lock is not model.static_cache.lock  # CPU: nothing is captured, calls run side by side
    model.cache.capture = True  # as on CUDA
    sessions = {"encoder": model.encoder, "decoder": model.decoder}
    capturing = ExportedModel(model.folder, model.manifest, model.device, sessions, model.cache)
    assert capturing.growing.lock is capturing.static_cache.lock
