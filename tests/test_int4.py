"""--quantize int4 (export.int4, #41): weight-only 4-bit MatMuls (ORT's MatMulNBits), the vocabulary head 8-bit or scanned.

The packing is ONNX Runtime's own (the bytes equal MatMulNBitsQuantizer's on a small graph); an int4 export of
a trained fixture with `--int4-head int8` validates (agreement mode), keeps its head int8, decodes the held-out
task close to float32, serves the same ids through the server's in-flight rows as direct `generate`, and decodes
the same ids in Node and in the browser page (onnxruntime-web's WASM); --max-quality-drop fails a damaged int4
variant; `--int4-encoder int8` makes the encoder int8. The scanned head (`auto`'s
choice for large heads, export.head_scan) has tests/test_head_scan.py, and goes through the server here.
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
from helpers import run_cli, run_cli_ok  # noqa: E402
from tfm_export.export.int4 import PAYS_FROM_WIDTH, Int4Settings, quantize_int4, width_advice  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")

# Node: the export's ids through runtimes/node (a JSON job on stdin: dir, sources, runs of Python option names).
GENERATE_IDS_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const lib = (name) => import(pathToFileURL(`${process.argv[2]}/${name}`).href);
const { openExport } = await lib('exported.mjs');
const { fromPythonNames } = await lib('options/generation.mjs');
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const runs = [];
for (const options of job.runs) runs.push(await model.generateIds(job.sources, fromPythonNames(options)));
await model.release();
process.stdout.write(JSON.stringify(runs));
"""
FAMILY = "marian"  # the trained fixture exported here (d_ff 96: the last block of a 96-row weight is padded)
SLOTS = 24


def small_graph(path: Path, shapes: dict[str, tuple[int, int]]) -> None:
    """x -> MatMul(w_i) for each (K, N): one output each, random float32 weights."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for name, (k, n) in shapes.items():
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32) * 0.1, f"w_{name}"))
        nodes.append(helper.make_node("MatMul", [f"x_{name}", f"w_{name}"], [name], name=f"mm_{name}"))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", n]))
    inputs = [helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, ["batch", k])
              for name, (k, _) in shapes.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), str(path))


def test_packed_weights_equal_ort_quantizer(tmp_path):
    """Every initializer and MatMulNBits attribute equals what ORT's MatMulNBitsQuantizer writes (the padded
    last block included), and the graph computes what it computes."""
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    shapes = {"y": (64, 48), "z": (96, 40)}  # 96 rows: 3 blocks of 32, 2 of 64 (one padded)
    small_graph(tmp_path / "f32.onnx", shapes)
    for block, level in ((32, 4), (64, 0)):
        ours = tmp_path / f"ours{block}.onnx"
        counts = quantize_int4(tmp_path / "f32.onnx", ours, False, Int4Settings(block, level))
        assert counts == {"int4_matmuls": 2, "int8_matmuls": 0, f"block_{block}": 2}
        theirs = MatMulNBitsQuantizer(onnx.load(str(tmp_path / "f32.onnx")), block_size=block,
                                      accuracy_level=level or None)
        theirs.process()
        got, want = onnx.load(str(ours)).graph, theirs.model.model.graph
        arrays = lambda g: {t.name: numpy_helper.to_array(t) for t in g.initializer}  # noqa: E731
        assert arrays(got).keys() == arrays(want).keys() and len(arrays(got)) == 6
        for name, array in arrays(want).items():
            assert arrays(got)[name].dtype == array.dtype and np.array_equal(arrays(got)[name], array), name
        nodes = lambda g: [(n.op_type, n.domain, sorted(n.input), {a.name: helper.get_attribute_value(a)  # noqa: E731
                                                                 for a in n.attribute}) for n in g.node]
        assert nodes(got) == nodes(want)
        feeds = {f"x_{n}": np.random.default_rng(1).standard_normal((3, k)).astype(np.float32)
                 for n, (k, _) in shapes.items()}
        run = lambda model: ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)  # noqa: E731
        for a, b in zip(run(str(ours)), run(theirs.model.model.SerializeToString())):
            np.testing.assert_array_equal(a, b)


def test_auto_blocks_follow_the_weights_width(tmp_path):
    """`--int4-block-size auto` (the default): blocks of 128 for weights of 1024 inputs or more, 32 below; the
    weights equal those of the explicit block size, and the counts say what was chosen."""
    small_graph(tmp_path / "f32.onnx", {"narrow": (512, 48), "wide": (1024, 40)})
    made = {}
    for block in ("auto", 32, 128):
        made[block] = tmp_path / f"{block}.onnx"
        counts = quantize_int4(tmp_path / "f32.onnx", made[block], False, Int4Settings(block_size=block))
        if block == "auto":
            assert counts == {"int4_matmuls": 2, "int8_matmuls": 0, "block_32": 1, "block_128": 1}
    arrays = {block: {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
              for block, path in made.items()}
    for name, array in arrays["auto"].items():
        assert np.array_equal(array, arrays[32 if name.startswith("w_narrow") else 128][name]), name
    blocks = {n.name: helper.get_attribute_value(next(a for a in n.attribute if a.name == "block_size"))
              for n in onnx.load(str(made["auto"])).graph.node}
    assert blocks == {"mm_narrow_Q4": 32, "mm_wide_Q4": 128}
    assert Int4Settings().block_size == "auto" and Int4Settings(block_size=64).block_for(4096) == 64


def test_k_quant_weights_equal_ort_k_quant(tmp_path):
    """--int4-method k_quant: the bytes ORT's MatMulNBitsQuantizer writes with its k_quant algorithm (an even
    block count per row, where its zero-point layout is the per-row one), and, with an odd block count (3
    blocks, the last padded), the product of the weights it chose, which are not rtn's."""
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import KQuantWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from onnxruntime.quantization.neural_compressor.weight_only import pad_tensor, quant_tensor_k_quant_cpu

    small_graph(tmp_path / "f32.onnx", {"y": (64, 48), "z": (128, 40)})
    quantize_int4(tmp_path / "f32.onnx", tmp_path / "ours.onnx", False, Int4Settings(32, 4, "k_quant"))
    theirs = MatMulNBitsQuantizer(onnx.load(str(tmp_path / "f32.onnx")), block_size=32, accuracy_level=4,
                                  algo_config=KQuantWeightOnlyQuantConfig())
    theirs.process()
    arrays = lambda g: sorted((t.name, numpy_helper.to_array(t)) for t in g.initializer)  # noqa: E731
    got, want = arrays(onnx.load(str(tmp_path / "ours.onnx")).graph), arrays(theirs.model.model.graph)
    assert len(got) == len(want) == 6  # named as the default writer names them; ORT's k_quant names differ
    for (_, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)

    rng = np.random.default_rng(2)
    w = (rng.standard_t(3, (96, 24)) * 0.05).astype(np.float32)  # heavy tails, as trained weights have
    x = rng.standard_normal((5, 96)).astype(np.float32)
    q, scale, zero = quant_tensor_k_quant_cpu(pad_tensor(w, 32, 3).T, 4, 32)
    reference = ((q - zero) * scale).reshape(24, 96).T.astype(np.float32)  # the weights k-quant chose
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 24])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=10), str(tmp_path / "odd.onnx"))
    outputs = {}
    for method in ("rtn", "k_quant"):
        quantize_int4(tmp_path / "odd.onnx", tmp_path / f"odd-{method}.onnx", False, Int4Settings(32, 0, method))
        session = ort.InferenceSession(str(tmp_path / f"odd-{method}.onnx"), providers=["CPUExecutionProvider"])
        outputs[method] = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(outputs["k_quant"], x @ reference, rtol=1e-5, atol=1e-5)
    assert not np.allclose(outputs["k_quant"], outputs["rtn"], rtol=1e-5, atol=1e-5)  # not rtn's choice again


def test_weights_in_external_data_are_packed_into_the_variants_own_file(tmp_path):
    """A model over 2 GB keeps its weights in GRAPH.onnx.data: int4 reads them from there and writes its own."""
    small_graph(tmp_path / "inline.onnx", {"y": (64, 48)})
    (tmp_path / "big").mkdir()
    model = onnx.load(str(tmp_path / "inline.onnx"))
    onnx.save(model, str(tmp_path / "big" / "g.onnx"), save_as_external_data=True, location="g.onnx.data",
              size_threshold=0)
    (tmp_path / "out").mkdir()
    quantize_int4(tmp_path / "inline.onnx", tmp_path / "inline4.onnx", False, Int4Settings())
    quantize_int4(tmp_path / "big" / "g.onnx", tmp_path / "out" / "g.onnx", True, Int4Settings())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["g.onnx", "g.onnx.data"]
    stored = onnx.load(str(tmp_path / "out" / "g.onnx"), load_external_data=False).graph.initializer
    external = {t.name for t in stored if t.data_location == TensorProto.EXTERNAL}
    assert "w_y_Q4" in external  # the packed weight (onnx_ir keeps tensors of a few bytes inline)
    got = onnx.load(str(tmp_path / "out" / "g.onnx"))
    want = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "inline4.onnx")).graph.initializer}
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in got.graph.initializer} == \
        {name: array.tobytes() for name, array in want.items()}


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory) -> Path:
    """40 held-out task lines of the fixture (source<TAB>reference): never trained on."""
    path = tmp_path_factory.mktemp("heldout") / "heldout.tsv"
    path.write_text("".join(f"{e.source}\t{e.target}\n" for e in hf_fixtures.task_examples(FAMILY, 40)))
    return path


@pytest.fixture(scope="module")
def int4_export(tmp_path_factory, eval_file) -> Path:
    """The trained fixture exported as a user does: int4 with an int8 head, validated, its quality measured on the
    held-out lines and held to a 2-point chrF drop."""
    out = tmp_path_factory.mktemp("int4") / "out"
    run_cli_ok(hf_fixtures.trained_folder(FAMILY), "-o", out, "--quantize", "int4", "--int4-head", "int8",
               "--eval-file", eval_file, "--max-quality-drop", "2")
    return out


@pytest.fixture(scope="module")
def int4_served(tmp_path_factory) -> Path:
    """int4 with the scanned head (`auto` gives a head this small int8: asked for) and the server's static and
    rows decoders (--static-slots): four graphs to export, so long."""
    out = tmp_path_factory.mktemp("int4-served") / "out"
    run_cli_ok(hf_fixtures.trained_folder(FAMILY), "-o", out, "--quantize", "int4", "--int4-head", "scan",
               "--static-slots", SLOTS)
    return out


def ops(path: Path) -> dict[str, list[onnx.NodeProto]]:
    """op type -> nodes of the graph and of its If branches (export.earlier_head puts the earlier positions'
    head in one); "WeightMatMul": the MatMuls whose B is an initializer (a weight)."""
    graph = onnx.load(str(path)).graph
    weights = {t.name for t in graph.initializer}
    nodes: dict[str, list[onnx.NodeProto]] = {}
    pending = list(graph.node)
    while pending:
        node = pending.pop(0)
        pending += [n for a in node.attribute if a.type == onnx.AttributeProto.GRAPH for n in a.g.node]
        kind = "WeightMatMul" if node.op_type == "MatMul" and node.input[1] in weights else node.op_type
        nodes.setdefault(kind, []).append(node)
    return nodes


def int4_projections(path: Path) -> int:
    """The 4-bit weights of the graph as the quantiser made them: a MatMulNBits packed by export.packing (its
    output, or its bias Add's, read by the group's Split) counts once per projection it holds."""
    graph = onnx.load(str(path)).graph
    reader = {name: node for node in graph.node for name in node.input}
    total = 0
    for node in graph.node:
        if node.op_type == "MatMulNBits":
            after = reader.get(node.output[0])
            after = reader.get(after.output[0]) if after is not None and after.op_type == "Add" else after
            total += len(after.output) if after is not None and after.name.endswith(".packed_split") else 1
    return total


def int8_weight_shapes(path: Path) -> list[tuple[int, ...]]:
    """The shapes of the int8 weights of the graph's MatMulIntegers, in graph order."""
    graph = onnx.load(str(path)).graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    return [shapes[n.input[1]] for n in graph.node if n.op_type == "MatMulInteger"]


def check_head_is_int8(folder: Path, graph: str, counts: dict[str, int]) -> None:
    """Every weight MatMul of `graph` is MatMulNBits (block 32) but the vocabulary head, int8 as int8 makes it
    (the tied head too: torch.onnx writes it as a MatMul of Transpose(embedding), which the quantisers fold). The
    head is two MatMuls, the last position's and the earlier ones' (earlier_logits), reading one int8 weight."""
    nodes = ops(folder / f"{graph}.onnx")
    assert "WeightMatMul" not in nodes and len(nodes["MatMulInteger"]) == 2, graph
    assert {n.input[1] for n in nodes["MatMulInteger"]} == {nodes["MatMulInteger"][0].input[1]}
    assert nodes["MatMulInteger"][0].input[1].endswith("_quantized")
    vocab = json.loads((folder / "manifest.json").read_text())["config"]["tgt_vocab_size"]
    assert int8_weight_shapes(folder / f"{graph}.onnx")[0][1] == vocab  # (d_model, vocab): the head, no other
    assert all(n.input[0] != "model.lm_head.weight" for n in nodes.get("Transpose", []))
    projections = int4_projections(folder / f"{graph}.onnx")
    assert counts == {"int4_matmuls": projections, "int8_matmuls": 2, "block_32": projections}  # all under 512 wide
    # each layer's self-attention query/key/value packed into one (export.packing): two nodes fewer per Split
    assert counts["int4_matmuls"] - len(nodes["MatMulNBits"]) == 2 * len(nodes["Split"]) > 0
    assert {helper.get_attribute_value(a) for n in nodes["MatMulNBits"] for a in n.attribute
            if a.name == "block_size"} == {32}


def check_head_is_scanned(folder: Path, graph: str, counts: dict[str, int]) -> None:
    """Every weight MatMul of `graph` is MatMulNBits, the head's scans in blocks of 128, with their candidates
    scored from the tied embedding: nothing int8, no float head left. The last position's scan is in the graph;
    where the graph also projects earlier positions (decoder, rows: not the one-position static step), their
    scan is under export.earlier_head's If, reading the same packed weight."""
    nodes = ops(folder / f"{graph}.onnx")
    top_level = [n.op_type for n in onnx.load(str(folder / f"{graph}.onnx")).graph.node]
    scans = [n for n in nodes["MatMulNBits"] if n.name.endswith("_scan")]
    assert "WeightMatMul" not in nodes and "MatMulInteger" not in nodes and top_level.count("TopK") == 1, graph
    assert len(nodes["TopK"]) == len(scans) == (2 if "If" in top_level else 1), graph
    assert len({n.input[1] for n in scans}) == 1  # one packed weight for both
    blocks = [helper.get_attribute_value(a) for n in nodes["MatMulNBits"] for a in n.attribute
              if a.name == "block_size"]
    assert sorted(blocks) == [32] * (len(blocks) - len(scans)) + [128] * len(scans)
    projections = int4_projections(folder / f"{graph}.onnx") - 1
    assert counts == {"int4_matmuls": projections, "int8_matmuls": 0, "block_32": projections, "scan_heads": 1,
                      "scan_tied_rows": 1}


def test_int4_export_validates_by_agreement_and_keeps_the_head_int8(int4_export):
    manifest = json.loads((int4_export / "manifest.json").read_text())
    variant, validation = manifest["variant"], manifest["validation"]
    assert variant["quantize"] == "int4"
    assert variant["int4"] == {"block_size": "auto", "accuracy_level": 4, "method": "rtn", "ffn_output": "int4",
                               "head": "int8", "encoder": "int4", "symmetric": False}
    assert validation["mode"] == "agreement" and validation["greedy"]["token_agreement"] >= 0.8
    quality = validation["quality"]
    assert quality["set"] == "heldout.tsv" and quality["drop"] <= 2 and quality["against_float32"]["chrf"] >= 95
    check_head_is_int8(int4_export, "decoder", variant["transforms"]["int4"]["decoder"])
    # No head in the encoder: every weight MatMul 4-bit, 6 per encoder layer (q, k, v, o, 2 ffn) and the cross
    # keys and values of each of the 2 decoder layers; packed (export.packing) into 4 a layer and one.
    encoder = ops(int4_export / "encoder.onnx")
    assert "WeightMatMul" not in encoder and "MatMulInteger" not in encoder and len(encoder["MatMulNBits"]) == 9
    assert int4_projections(int4_export / "encoder.onnx") == 16 and len(encoder["Split"]) == 3


def test_the_encoder_can_be_int8(tmp_path, caplog):
    """`--int4-encoder int8`: the encoder graph as --quantize int8 makes it (by default 4-bit, checked above), the
    decoder 4-bit; recorded in the manifest, validated. The fixture is 64 wide: the export advises int8."""
    out = tmp_path / "out"
    run_cli_ok(hf_fixtures.trained_folder(FAMILY), "-o", out, "--quantize", "int4", "--int4-encoder", "int8")
    advice = [r.getMessage() for r in caplog.records
              if r.levelname == "WARNING" and "int4 on a model" in r.getMessage()]
    assert advice == [width_advice(64)] and "--quantize int8 is the better choice" in advice[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"]["int4"]["encoder"] == "int8"
    encoder, decoder = ops(out / "encoder.onnx"), ops(out / "decoder.onnx")
    assert "MatMulNBits" not in encoder and "WeightMatMul" not in encoder and len(encoder["MatMulInteger"]) == 16
    assert manifest["variant"]["transforms"]["int4"]["encoder"] == {"quantized_matmuls": 16}
    assert "WeightMatMul" not in decoder and decoder["MatMulNBits"]
    assert manifest["validation"]["greedy"]["token_agreement"] >= 0.8


def test_the_t5_family_keeps_its_ffn_outputs_int8(tmp_path):
    """T5's FFN output projection reads outlier activations (transformers keeps its `wo` in float32): its family
    default keeps them int8 under int4, one per layer in both graphs, besides the (tied) head; the option
    gives them 4 bits, and the manifest records what was made. (The held-out chrF this buys: BENCHMARKS.md.)"""
    folder = hf_fixtures.trained_folder("t5")
    config = json.loads((folder / "config.json").read_text())
    d_ff, layers = config["d_ff"], (config["num_layers"], config["num_decoder_layers"])
    made = {}
    for option in ("auto", "int4"):
        out = tmp_path / option
        run_cli_ok(folder, "-o", out, "--quantize", "int4", "--int4-ffn-output", option, "--int4-head", "scan",
                   "--no-validate")
        made[option] = json.loads((out / "manifest.json").read_text())["variant"]
        made[option]["shapes"] = {g: int8_weight_shapes(out / f"{g}.onnx") for g in ("encoder", "decoder")}
    assert made["auto"]["int4"]["ffn_output"] == "int8" and made["int4"]["int4"]["ffn_output"] == "int4"
    d_model = config["d_model"]
    assert made["auto"]["shapes"] == {"encoder": [(d_ff, d_model)] * layers[0],
                                      "decoder": [(d_ff, d_model)] * layers[1]}  # the head is scanned
    assert made["int4"]["shapes"] == {"encoder": [], "decoder": []}
    counts = made["auto"]["transforms"]["int4"]
    assert counts["decoder"]["int8_matmuls"] == layers[1] and counts["encoder"]["int8_matmuls"] == layers[0]
    assert counts["decoder"]["scan_heads"] == counts["decoder"]["scan_tied_rows"] == 1  # T5 v1.0 ties its head


def test_other_families_keep_their_ffn_outputs_int4(int4_export):
    """Marian's FFN output reads no outliers: `auto` gives it 4 bits (the head alone is int8, checked above)."""
    assert json.loads((int4_export / "manifest.json").read_text())["variant"]["int4"]["ffn_output"] == "int4"


def test_int4_decodes_the_held_out_task_like_float32(int4_export):
    """Greedy ids of 24 held-out inputs: most tokens equal to eager float32's, and about as many exact
    translations."""
    from tfm_export.importers import load_model
    from tfm_export.model.eager import EagerModel

    examples = hf_fixtures.task_examples(FAMILY, 24)
    int4 = open_export(int4_export, "cpu")
    eager = EagerModel.from_checkpoint(load_model(hf_fixtures.trained_folder(FAMILY)))
    sources = [int4.tokenizer.encode(e.source) for e in examples]
    got, want = (model.generate_ids(sources, max_new_tokens=32, num_beams=1) for model in (int4, eager))
    pairs = list(zip(got, want))
    same = sum(a == b for x, y in pairs for a, b in zip(x, y)) / sum(max(len(x), len(y)) for x, y in pairs)
    assert same >= 0.95, same
    exact = [sum(int4.tokenizer.decode(ids).strip() == e.target for ids, e in zip(rows, examples))
             for rows in (got, want)]
    assert exact[0] >= exact[1] - 2, exact


def test_node_decodes_an_int4_export_like_python(int4_export, tmp_path):
    """onnxruntime-node runs MatMulNBits on CPU: Node's greedy and default (Marian: 4 beams) ids equal Python's
    (ids: Node has no Marian SentencePiece tokenizer)."""
    from test_runtimes_families import NODE, node_script

    python = open_export(int4_export, "cpu")
    sources = [python.tokenizer.encode(e.source) for e in hf_fixtures.task_examples(FAMILY, 8)]
    runs = [{"num_beams": 1}, {}]
    got = node_script(tmp_path, GENERATE_IDS_JS, {"dir": str(int4_export), "sources": sources, "runs": runs}, NODE)
    want = [python.generate_ids(sources, **options) for options in runs]
    assert got == want
    assert sum(map(len, want[0])) > 3 * len(sources)  # real outputs, not EOS at once


def test_the_browser_decodes_an_int4_export_like_python(int4_export, tmp_path):
    """onnxruntime-web's WASM build runs MatMulNBits and the int8 head (issue #41): the page, in headless Chromium,
    gives Python's ids and texts on the int4 export, greedy into one language and the default 4 beams into the
    other (browser.test.mjs's test of an export with language codes)."""
    from test_runtimes_families import browser_translates_like_python

    assert json.loads((int4_export / "manifest.json").read_text())["variant"]["quantize"] == "int4"
    browser_translates_like_python(int4_export, FAMILY, tmp_path)


@pytest.mark.long
def test_the_servers_in_flight_rows_decode_like_generate(int4_served):
    """`tfm-export serve`'s in-flight engine on CPU steps decoder_rows.onnx (MatMulNBits inside, the head scanned
    in every decoder): 12 held-out sources through 4 rows give the ids of direct `generate`."""
    from tfm_export.runtime import RuntimeOptions
    from tfm_export.serve.batcher import EngineConfig, Job
    from tfm_export.serve.engine import ServeSettings, open_engine

    manifest = json.loads((int4_served / "manifest.json").read_text())
    assert set(manifest["graphs"]) == {"encoder", "decoder", "decoder_static", "decoder_rows"}
    for graph in ("decoder", "decoder_static", "decoder_rows"):
        check_head_is_scanned(int4_served, graph, manifest["variant"]["transforms"]["int4"][graph])
    assert manifest["validation"]["greedy"]["static_cache_mismatched_rows"] == []
    serial = open_export(int4_served, "cpu", RuntimeOptions(cuda_graph=False))
    sources = [serial.tokenizer.encode(e.source) for e in hf_fixtures.task_examples(FAMILY, 12)]
    engine = open_engine(ServeSettings(str(int4_served), engine=EngineConfig(max_batch=4)))
    assert type(engine.rows).__name__ == "HostRows"
    engine.start()
    got: dict[int, list[int]] = {}
    engine.submit([Job(ids, SLOTS, lambda kind, v, i=i: kind == "token" and got.setdefault(i, []).append(v))
                   for i, ids in enumerate(sources)])
    engine.close(60)
    want = serial.generate_ids(sources, SLOTS, num_beams=1)
    assert [got.get(i, []) for i in range(len(sources))] == want
    assert sum(map(len, want)) > 3 * len(want)


def two_bit_like(real):
    """ORT's packing, then every 4-bit code rounded to one of 4 levels: a valid int4 graph that lost weights."""
    def pack(array, block_size, method="rtn", hessian=None):
        q, scales, zeros = real(array, block_size, method, hessian)
        return (q & 0xCC) | 0x22, scales, zeros
    return pack


@pytest.mark.long
def test_max_quality_drop_fails_a_damaged_int4_variant(tmp_path, eval_file, monkeypatch):
    from tfm_export.errors import ValidationError
    from tfm_export.export import int4
    from tfm_export.export.exporter import ExportOptions, export_model
    from tfm_export.importers import load_model

    monkeypatch.setattr(int4, "pack_weight", two_bit_like(int4.pack_weight))
    options = ExportOptions(quantize="int4", eval_file=str(eval_file), max_quality_drop=2.0)
    with pytest.raises(ValidationError, match="loses .* chrf points on heldout.tsv") as caught:
        export_model(load_model(hf_fixtures.trained_folder(FAMILY)), tmp_path / "bad", options)
    assert caught.value.report["quality"]["drop"] > 2.0
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("flags, message", [
    (["--quantize", "int4", "--dtype", "float16"], "--dtype float16 (CUDA) and --quantize int4 (CPU) cannot be combined"),
    (["--int4-block-size", "64"], "the --int4-* options apply to --quantize int4 only"),
    (["--quantize", "int8", "--int4-head", "scan"], "the --int4-* options apply to --quantize int4 only"),
    (["--quantize", "int4", "--int4-block-size", "48"], "'48' is not one of"),
    (["--quantize", "int4", "--int4-method", "awq"], "'awq' is not one of"),
    (["--quantize", "int4", "--int4-method", "gptq"], "--int4-method gptq needs --calibration-file"),
])
def test_impossible_int4_mixes_are_one_line(tmp_path, flags, message):
    result = run_cli(hf_fixtures.trained_folder(FAMILY), "-o", tmp_path / "x", *flags)
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (tmp_path / "x").exists()


def test_int4_advice_stops_where_int4_pays():
    """Under PAYS_FROM_WIDTH (1024) int4 was measured no faster than int8 and further from float32: the export
    advises int8 there, and says nothing from that width on (NLLB-600M's layout, where int4 pays)."""
    assert "512 wide" in width_advice(512) and width_advice(PAYS_FROM_WIDTH - 1)
    assert width_advice(PAYS_FROM_WIDTH) is None and width_advice(2048) is None


@pytest.mark.parametrize("given, block", [("64", 64), ("auto", "auto")])
def test_int4_options_parse_to_typed_settings(given, block):
    """The generated `--int4-*` options give Int4Settings typed values ("64" -> 64, "auto" stays), what the
    manifest records and `block_for` reads."""
    from tfm_export.cli.export_cmd import export_command, int4_settings

    ctx = export_command.make_context("export", [str(hf_fixtures.trained_folder(FAMILY)), "--quantize", "int4",
                                                 "--int4-block-size", given, "--int4-accuracy-level", "0"])
    settings = int4_settings(dict(ctx.params))
    assert settings == Int4Settings(block_size=block, accuracy_level=0)
    wide, narrow = (64, 64) if block == 64 else (128, 32)
    assert settings.block_for(4096) == wide and settings.block_for(64) == narrow
