"""`--int4-head scan|scan2` (export.head_scan, #41): the vocabulary head as a 4-bit (2-bit) scan whose 256 best
candidates are scored exactly, from the float32 embedding when the head is tied to it, else from int8 rows.

On small graphs: the candidates' logits are float32's (tied) or within int8's error (untied), the argmax is
float32's, the greedy pick (next_ids) is taken among the candidates with ArgMax's rules (banned ids, ties to the
lower id), nothing of the float head is left, a vocabulary under 256 is scored whole, a head that only shares the
embedding's shape is not scored from it, and `auto` scans only heads from SCAN_MIN_WEIGHTS on. On the trained Marian fixture (a tied head): the export validates,
decodes the held-out task like float32, and Node and the browser give Python's ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("torch")

import hf_fixtures  # noqa: E402
from helpers import run_cli_ok  # noqa: E402
from tfm_export.export.head_scan import CANDIDATES, SCAN_BITS  # noqa: E402
from tfm_export.export.int4 import Int4Settings, quantize_int4  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")

K = 64
FAMILY = "marian"
SCAN = Int4Settings(head="scan")
VOCAB = 1000


def head_graph(path: Path, vocab: int, tied: bool, seed: int = 0, banned: list[int] | None = None,
               same_rows: tuple[int, int] | None = None) -> np.ndarray:
    """ids -> Gather(embedding) -> `hidden` output, and x -> MatMul(head) -> logits, the head the embedding
    transposed (tied, as the fold transform stores it) or a weight of its own of the same shape, and the greedy
    pick as model.Transformer.pick writes it: next_ids = ArgMax(logits), behind a Where of the `banned` ids when
    given. `same_rows` (a, b): token b's row is a's (an exact tie). Returns the head."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, K)).astype(np.float32)
    if same_rows:
        table[same_rows[1]] = table[same_rows[0]]
    head = np.ascontiguousarray(table.T) if tied else rng.standard_normal((K, vocab)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["embedding", "ids"], ["hidden"], axis=0),
             helper.make_node("MatMul", ["x", "head"], ["logits"], name="head_matmul")]
    initializers = [numpy_helper.from_array(table, "embedding"), numpy_helper.from_array(head, "head")]
    picked = "logits"
    if banned is not None:
        mask = np.zeros(vocab, dtype=bool)
        mask[banned] = True
        initializers += [numpy_helper.from_array(mask, "banned"),
                         numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "lowest")]
        nodes.append(helper.make_node("Where", ["banned", "lowest", "logits"], ["masked"]))
        picked = "masked"
    nodes.append(helper.make_node("ArgMax", [picked], ["next_ids"], axis=-1, keepdims=0))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", K])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", K]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", vocab]),
         helper.make_tensor_value_info("next_ids", TensorProto.INT64, ["batch", "sequence"])],
        initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), str(path))
    return head


def logits(path: Path, x: np.ndarray, output: str = "logits") -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([output], {"ids": np.zeros((1, 1), np.int64), "x": x})[0]


def hidden_states(head: np.ndarray, shape: tuple[int, int], seed: int) -> np.ndarray:
    """States (batch, sequence, K) that each lean towards one token, as a trained decoder's do (random ones
    give near-ties among thousands of tokens, which no model decodes from)."""
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, head.shape[1], shape)
    return (0.3 * head[:, targets].transpose(1, 2, 0) + rng.standard_normal((*shape, K))).astype(np.float32)


@pytest.mark.parametrize("tied, scan", [(True, "scan"), (False, "scan"), (True, "scan2")])
def test_the_candidates_are_scored_exactly_and_the_argmax_is_float32s(tmp_path, tied, scan):
    head = head_graph(tmp_path / "f32.onnx", VOCAB, tied)
    counts = quantize_int4(tmp_path / "f32.onnx", tmp_path / "scan.onnx", False, Int4Settings(head=scan))
    assert counts == {"int4_matmuls": 0, "int8_matmuls": 0, "scan_heads": 1, "scan_tied_rows": int(tied)}
    x = hidden_states(head, (4, 16), seed=1)
    got, want = logits(tmp_path / "scan.onnx", x), x @ head
    assert got.shape == want.shape == (4, 16, VOCAB)
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    tolerance = 1e-4 if tied else 0.3  # int8 rows: a scale per row; logits of about 30
    exact = np.abs(got - want) <= tolerance
    assert np.take_along_axis(exact, want.argmax(-1)[..., None], -1).all()  # the winner scored exactly
    assert exact.sum(-1).min() >= CANDIDATES and (~exact).sum() > exact.sum()  # the rest from the scan
    graph = onnx.load(str(tmp_path / "scan.onnx")).graph
    names = {t.name for t in graph.initializer}
    assert "head" not in names and ("head_rows_int8" in names) != tied  # no float head left; rows only untied
    assert [n.op_type for n in graph.node if n.op_type in ("MatMulNBits", "TopK", "ScatterElements")] == \
        ["MatMulNBits", "TopK", "ScatterElements"]
    scan_node = next(n for n in graph.node if n.op_type == "MatMulNBits")
    assert {a.name: helper.get_attribute_value(a) for a in scan_node.attribute}["bits"] == SCAN_BITS[scan]


@pytest.mark.parametrize("banned", [False, True])
def test_the_greedy_pick_is_taken_among_the_candidates(tmp_path, banned):
    """next_ids: no ArgMax over the vocabulary left, the ids float32's argmax gives (banned ids never win: the
    float32 winners of four states are banned, so their runner-up must be picked)."""
    head = head_graph(tmp_path / "f32.onnx", VOCAB, tied=True)
    x = hidden_states(head, (4, 16), seed=5)
    want = x @ head
    ban = sorted(set(want.argmax(-1)[0, :4].tolist())) if banned else None
    head_graph(tmp_path / "f32.onnx", VOCAB, tied=True, banned=ban)
    quantize_int4(tmp_path / "f32.onnx", tmp_path / "scan.onnx", False, SCAN)
    if banned:
        want[..., ban] = np.finfo(np.float32).min
    assert np.array_equal(logits(tmp_path / "scan.onnx", x, "next_ids"), want.argmax(-1))
    ops = [n.op_type for n in onnx.load(str(tmp_path / "scan.onnx")).graph.node]
    assert "ArgMax" not in ops and ops.count("Where") == 1 + banned and "ReduceMin" in ops


def test_an_exact_tie_among_the_candidates_goes_to_the_lower_id(tmp_path):
    """ArgMax's rule (select_last_index 0): two tokens with the same row tie exactly; the lower id is picked."""
    head = head_graph(tmp_path / "f32.onnx", VOCAB, tied=True, same_rows=(700, 300))
    quantize_int4(tmp_path / "f32.onnx", tmp_path / "scan.onnx", False, SCAN)
    x = (3 * head[:, 700] + np.random.default_rng(6).standard_normal((2, 3, K))).astype(np.float32)
    want = x @ head
    assert (want.argmax(-1) == 300).all() and np.array_equal(want[..., 300], want[..., 700])
    assert (logits(tmp_path / "scan.onnx", x, "next_ids") == 300).all()


def test_auto_scans_only_heads_of_at_least_the_threshold(tmp_path, monkeypatch):
    """`--int4-head auto` (the default): int8 below SCAN_MIN_WEIGHTS, the scan from it on."""
    from tfm_export.export import int4

    head_graph(tmp_path / "f32.onnx", VOCAB, tied=True)
    made = {}
    for threshold in (K * VOCAB + 1, K * VOCAB):
        monkeypatch.setattr(int4, "SCAN_MIN_WEIGHTS", threshold)
        made[threshold] = quantize_int4(tmp_path / "f32.onnx", tmp_path / "out.onnx", False, Int4Settings())
    assert Int4Settings().head == "auto"
    assert made[K * VOCAB + 1] == {"int4_matmuls": 0, "int8_matmuls": 1}
    assert made[K * VOCAB] == {"int4_matmuls": 0, "int8_matmuls": 0, "scan_heads": 1, "scan_tied_rows": 1}


def test_a_vocabulary_under_the_candidates_is_scored_whole(tmp_path):
    head = head_graph(tmp_path / "f32.onnx", CANDIDATES - 12, tied=True)
    quantize_int4(tmp_path / "f32.onnx", tmp_path / "scan.onnx", False, SCAN)
    x = np.random.default_rng(2).standard_normal((2, 3, K)).astype(np.float32)
    assert np.allclose(logits(tmp_path / "scan.onnx", x), x @ head, atol=1e-4)


def test_a_head_that_only_shares_the_embeddings_shape_gets_rows_of_its_own(tmp_path):
    """Same (vocab, K) shape as the embedding, other values: scoring from the embedding would be wrong."""
    head = head_graph(tmp_path / "f32.onnx", 500, tied=False, seed=3)
    counts = quantize_int4(tmp_path / "f32.onnx", tmp_path / "scan.onnx", False, SCAN)
    assert counts["scan_tied_rows"] == 0
    x = hidden_states(head, (1, 16), seed=4)
    assert np.array_equal(logits(tmp_path / "scan.onnx", x).argmax(-1), (x @ head).argmax(-1))


@pytest.fixture(scope="module")
def scan_export(tmp_path_factory) -> Path:
    """The trained fixture exported as a user does, validated, the head scanned (`auto` scans only large heads)."""
    out = tmp_path_factory.mktemp("scan") / "out"
    run_cli_ok(hf_fixtures.trained_folder(FAMILY), "-o", out, "--quantize", "int4", "--int4-head", "scan")
    return out


def test_a_scanned_export_validates_and_records_its_head(scan_export):
    manifest = json.loads((scan_export / "manifest.json").read_text())
    assert manifest["variant"]["int4"]["head"] == "scan"
    counts = manifest["variant"]["transforms"]["int4"]["decoder"]
    assert counts["scan_heads"] == 1 and counts["scan_tied_rows"] == 1 and counts["int8_matmuls"] == 0
    assert manifest["validation"]["greedy"]["token_agreement"] >= 0.8
    graph = onnx.load(str(scan_export / "decoder.onnx")).graph
    assert not any(n.op_type in ("MatMulInteger", "ArgMax") for n in graph.node)  # picked among the candidates
    assert not any(t.name.endswith(".transposed") for t in graph.initializer)  # the float head went


def test_a_scanned_export_decodes_the_held_out_task_like_float32(scan_export):
    from tfm_export.importers import load_model
    from tfm_export.model.eager import EagerModel

    examples = hf_fixtures.task_examples(FAMILY, 24)
    scan = open_export(scan_export, "cpu")
    eager = EagerModel.from_checkpoint(load_model(hf_fixtures.trained_folder(FAMILY)))
    sources = [scan.tokenizer.encode(e.source) for e in examples]
    got, want = (model.generate_ids(sources, max_new_tokens=32, num_beams=1) for model in (scan, eager))
    same = sum(a == b for x, y in zip(got, want) for a, b in zip(x, y)) / sum(max(len(x), len(y))
                                                                               for x, y in zip(got, want))
    assert same >= 0.95, same


def test_node_and_the_browser_decode_a_scanned_export_like_python(scan_export, tmp_path):
    """TopK, the Gather of candidate rows and ScatterElements in onnxruntime-node and -web: Python's ids."""
    from test_int4 import GENERATE_IDS_JS
    from test_runtimes_families import NODE, browser_translates_like_python, node_script

    python = open_export(scan_export, "cpu")
    sources = [python.tokenizer.encode(e.source) for e in hf_fixtures.task_examples(FAMILY, 8)]
    runs = [{"num_beams": 1}, {}]
    got = node_script(tmp_path, GENERATE_IDS_JS, {"dir": str(scan_export), "sources": sources, "runs": runs}, NODE)
    assert got == [python.generate_ids(sources, **options) for options in runs]
    (tmp_path / "browser").mkdir()
    browser_translates_like_python(scan_export, FAMILY, tmp_path / "browser")


@pytest.mark.parametrize("bits", sorted(set(SCAN_BITS.values())))
def test_the_scan_packed_in_chunks_is_ort_quantizers_whole_packing(bits):
    """Packed CHUNK_ROWS columns at a time (memory), the bytes are what ORT's quantiser makes of the whole head."""
    import onnx_ir as ir
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                  DefaultWeightOnlyQuantizer)

    from tfm_export.export.head_scan import CHUNK_ROWS, _pack_scan

    array = np.random.default_rng(5).standard_normal((200, 2 * CHUNK_ROWS + 5)).astype(np.float32)  # 2 blocks, 1 padded
    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=10)
    got = [value.const_value.numpy() for value in _pack_scan(model, ir.Value(name="w"), array, bits)]
    config = DefaultWeightOnlyQuantConfig(block_size=128, is_symmetric=False, bits=bits)
    want = DefaultWeightOnlyQuantizer(config).qbits_block_quant(array)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want))
