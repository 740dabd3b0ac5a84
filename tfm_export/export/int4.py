"""`--quantize int4`: weight-only 4-bit MatMuls (ONNX Runtime's com.microsoft.MatMulNBits), graph node by node.

For each MatMul whose B is a float32 matrix initializer, B (K x N) is quantised in blocks of `block_size`
along K (a scale and a 4-bit zero point per block and column) and the node becomes

    MatMulNBits(A, B_Q4 uint8 (N, K/block, block/2), B_scales (N, K/block), B_zero_points) -> Y

which is what `onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer` writes (QOperator
format, asymmetric, its defaults): the packing is its own `DefaultWeightOnlyQuantizer.qbits_block_quant`
(ORT's C++ `quantize_matmul_4bits`), called per weight, so the bytes are identical (tests/test_int4.py).
Why not call the quantizer: like quantize_dynamic (export.int8) it holds the whole model as protobuf; this
reads one weight at a time from the memory-mapped file and holds only the packed tensors it makes.

The output projection to the vocabulary is not made 4-bit unless `head` is int4: a 4-bit head is known to make
decoders repeat themselves. A large head (`head` auto, from SCAN_MIN_WEIGHTS on) becomes a 4-bit scan whose best
candidates are scored exactly (export.head_scan: the chosen token is scored from the float32 embedding of a tied
head, else from int8 rows; the scan reads half an int8 head's bytes); a smaller one, or `head` int8, becomes what
`--quantize int8` makes of it (DynamicQuantizeLinear + MatMulInteger). The feed-forward output projections are int8 where `ffn_output` is
(the T5 family's default: transformers keeps T5's `wo` in float32, its input carries outlier activations);
the graph tells them by the module scope torch.onnx records on each node (model.layers.FeedForward's `fc2`).
With `encoder` int8 the encoder graph is made by export.int8 instead (export.variants.quantize_graph_int4): it runs
once per input over all its tokens, where MatMulNBits is compute-bound and int8 faster and closer to float32, at
the cost of int8's batch-wide activation scale.
Embedding Gathers stay float32, as under int8.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..graph_io import EARLIER_LOGITS
from .gptq import pack_gptq
from .head_scan import SCAN_BITS, scan_head
from .int8 import Quantized, float_matrix, initializer, quantize_matmul_int8, unmap

log = logging.getLogger(__name__)

SYMMETRIC = False  # MatMulNBitsQuantizer's default: a zero point per block fits skewed blocks better
BITS = 4
# `--int4-head auto`: the smallest head scanned. The scan saves reading half of an int8 head's bytes and pays a
# TopK over the vocabulary, a Gather and a ScatterElements. The head alone at batch 1, cold (BENCHMARKS.md, CPU
# int4): 0.83-0.96x the int8 head's time at 8M weights (opus-mt's 512 x 15.6k; level in a whole step), 0.64-0.75x
# at 16M, 0.45-0.79x at 33M, under 0.6x from 65M on; a whole step of opus-mt-en-de's layout (29.7M) 0.81-0.83x.
# At batch 16 the scan is 2-5x the int8 head's time at every size (int4 is for batch-1 latency).
SCAN_MIN_WEIGHTS = 16_000_000
# `--int4-block-size auto`: (fewest inputs, block size), first match. Blocks of 128 save MLAS's per-block work
# (NLLB-600M's layout at batch 1: 0.55-0.57x int8's time, 0.63-0.65x at 32). Where a block is an eighth of a column
# or less they cost no measurable agreement with float32 (a trained model 1024 wide: `python -m benchmarks wide-fixture`,
# docs/exporting.md, "4-bit weights"); at 512 inputs the trained models disagree (a 512-wide Marian level,
# whisper-digits' FFN output one utterance of 120 worse, num2words-de's one better); on the 64-wide fixtures, where
# 128 is a whole column, they agreed less in 11 of 16 cases. So weights under 1024 inputs keep blocks of 32.
AUTO_BLOCKS = ((1024, 128), (0, 32))
# Under this width int4 was measured no faster than int8 and further from float32 than int8 (docs/exporting.md,
# "int8 or int4?"): the export says so (width_advice).
PAYS_FROM_WIDTH = 1024
# graph outputs whose nearest weight MatMul is the vocabulary head: the decoder projects the last position and the
# earlier ones apart over one weight (model.Transformer.project_apart), and both MatMuls are made the same
HEAD_OUTPUTS = ("logits", EARLIER_LOGITS)
# The module path torch.onnx's dynamo exporter records on every node it writes (a list's repr: the scopes from
# the graph module down to the op), and the suffix of model.layers.FeedForward's output projection in it.
SCOPES_KEY = "pkg.torch.onnx.name_scopes"
FFN_OUTPUT = ".ffn.fc2"


def setting(default: Any, help: str, choices: tuple[Any, ...] | None = None) -> Any:
    """A field of Int4Settings with what the CLI derives its `--int4-*` option from (cli/export_cmd.py)."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class Int4Settings:
    """The one declaration of int4's options: ExportOptions.int4 holds them, the CLI's `--int4-<field>`
    options are generated from these fields (help, choices, default), the manifest's variant records them.

    The defaults, measured on the trained fixtures (tests/fixtures/trained marian, bart, t5, pegasus: greedy
    tokens of 100 held-out inputs against the float32 export; docs/exporting.md has the table): block 32 agreed
    on more tokens than 64 or 128 on their narrow weights (marian 99.3 vs 98.0 %, t5 93.9 vs 92.6, pegasus 97.7
    vs 96.6, bart equal at 98.8), 128 as well as 32 on a trained model 1024 wide (AUTO_BLOCKS), and
    accuracy_level 4 (int8 activations, MLAS's fast path) as well as 0 (float32 compute: within 0.6 points either
    way)."""

    block_size: int | str = setting("auto", "Weights per 4-bit block (one scale and zero point each) along the "
                                            "input dimension; smaller blocks keep more accuracy, larger ones are "
                                            "smaller and faster (MLAS does a block's work per block). auto: 128 for "
                                            "weights of 1024 inputs or more (NLLB-600M's layout: 0.55-0.57x int8's "
                                            "time against 0.63-0.65x at 32; as close to float32 as 32 on a trained "
                                            "model 1024 wide), 32 for narrower ones (where 32 agreed best).",
                                    choices=("auto", 16, 32, 64, 128, 256))
    accuracy_level: int = setting(4, "MatMulNBits' compute type for activations: 0 unset (float32), 1 float32, "
                                     "2 float16, 3 bfloat16, 4 int8 (fastest on x86 and ARM; may flip near-tie "
                                     "argmaxes on outlier activations, onnxruntime#29849).",
                                  choices=(0, 1, 2, 3, 4))
    method: str = setting("rtn", "How the 4-bit weights are rounded: rtn (each block's minimum and maximum, "
                                 "round to nearest), k_quant (llama.cpp's k-quant search, as ONNX Runtime's "
                                 "quantizer ships it) or gptq (each rounding error spread over the weights still "
                                 "to round, weighted by what --calibration-file's sources make the layer read; "
                                 "the most accurate). The same kernel and size for all three.",
                          choices=("rtn", "k_quant", "gptq"))
    ffn_output: str = setting("auto", "Precision of the feed-forward output projections: int4, int8 (about a sixth "
                                      "more decoder bytes; what the T5 family needs, whose FFN output reads outlier "
                                      "activations), or auto: the model family's default (int8 for T5 and mT5, "
                                      "int4 otherwise).", choices=("auto", "int4", "int8"))
    head: str = setting("auto", "The output projection to the vocabulary: scan (a 4-bit scan of the vocabulary "
                                "whose 256 best candidates are scored exactly, from the float32 embedding when "
                                "the head is tied to it: an int8 head's quality in about half its time on large "
                                "vocabularies), scan2 (a 2-bit scan: faster, may miss one or two uncertain tokens "
                                "in a hundred), int8 (as --quantize int8 makes it), int4 (known to cause "
                                "repetition), or auto: scan for heads of 16M weights or more (512 x 32k), int8 "
                                "for smaller ones (whose scan saves little).",
                        choices=("auto", "scan", "scan2", "int8", "int4"))
    encoder: str = setting("int4", "Precision of the encoder graph's weights (the cross-attention keys and values "
                                   "too): int4, or int8 as --quantize int8 makes them: the encoder runs once per "
                                   "input over all its tokens, where 4-bit MatMuls are compute-bound (NLLB-600M's "
                                   "layout: int8 in 0.63x int4's time at batch 1, 0.37x at 16; more outputs "
                                   "identical to float32's on the trained fixtures), but int8 quantises each "
                                   "batch's activations with one scale, so a source's encoding depends on its "
                                   "batch (as under --quantize int8), and it is larger.", choices=("int4", "int8"))

    def resolved(self, ffn_outliers: bool) -> "Int4Settings":
        """These settings with `ffn_output` auto made concrete: int8 where the family's FFN output reads outlier
        activations (importers.families.Family.ffn_output_outliers), int4 otherwise."""
        if self.ffn_output != "auto":
            return self
        return dataclasses.replace(self, ffn_output="int8" if ffn_outliers else "int4")

    def block_for(self, k: int) -> int:
        """The block size of a weight with `k` inputs (rows): `block_size`, or auto's choice (AUTO_BLOCKS)."""
        if self.block_size != "auto":
            return int(self.block_size)
        return next(block for min_k, block in AUTO_BLOCKS if k >= min_k)

    def to_dict(self) -> dict[str, Any]:
        """What the manifest's variant records (`variant.int4`)."""
        return {**dataclasses.asdict(self), "symmetric": SYMMETRIC}


def width_advice(d_model: int) -> str | None:
    """What to tell a user who asks for int4 on a model `d_model` wide, or None where int4 pays."""
    if d_model >= PAYS_FROM_WIDTH:
        return None
    return (f"int4 on a model {d_model} wide: under {PAYS_FROM_WIDTH} wide it was measured no faster than int8 (the "
            "opus-mt layout, 512 wide: 0.96x int8's step at batch 1, 1.20x at batch 16) and mostly further from float32; "
            "--quantize int8 is the better choice unless the smaller file is the point (docs/exporting.md, "
            "\"int8 or int4?\")")


def quantize_int4(src: Path, dst: Path, external: bool, settings: Int4Settings,
                  hessians: dict[str, Any] | None = None) -> dict[str, int]:
    """Write the int4 graph of `src` to `dst` (weights in `<dst name>.data` when `external`); counts of the
    MatMuls made 4-bit (and of those rounded by GPTQ) and of those (the head) made int8. `hessians`: GPTQ's,
    by module scope (export.calibration), with method gptq; a weight without one is rounded to nearest."""
    import onnx_ir as ir

    model = ir.load(str(src))  # external weights stay memory-mapped until read
    heads = {} if settings.head == "int4" else _head_matmuls(model.graph)
    packed: dict[Any, tuple[Any, ...]] = {}  # a weight read by several MatMuls is packed once
    int8_made = Quantized()  # an input or weight read by several int8 MatMuls is quantised once
    scans: dict[Any, Any] = {}  # the head's scan tables, made once for its two MatMuls
    counts = {"int4_matmuls": 0, "int8_matmuls": 0, **({"gptq_matmuls": 0} if settings.method == "gptq" else {})}
    for node in list(model.graph):
        weight = float_matrix(node)
        if weight is None:
            continue
        head = next((output for output, head in heads.items() if node is head), None)
        is_head = head is not None
        kind = head_kind(settings.head, weight.const_value.shape) if is_head else None
        if kind in SCAN_BITS:
            tied = scan_head(model, node, weight, settings.accuracy_level, SCAN_BITS[kind], scans)
            counts.update(scan_heads=1, scan_tied_rows=int(tied))  # one head, whichever positions it projects
            continue
        if is_head or (settings.ffn_output == "int8" and _is_ffn_output(node)):
            quantize_matmul_int8(model, node, weight, int8_made)
            counts["int8_matmuls"] += 1
            continue
        hessian = (hessians or {}).get(_module_of(node)) if settings.method == "gptq" else None
        block = settings.block_for(weight.const_value.shape[0])
        if weight not in packed:
            packed[weight] = _pack(model, weight, block, settings.method, hessian)
        counts[f"block_{block}"] = counts.get(f"block_{block}", 0) + 1  # what `auto` chose
        if hessian is not None:
            counts["gptq_matmuls"] += 1
        _replace(model, node, weight, packed[weight], settings)
        counts["int4_matmuls"] += 1
    for weight in packed:
        if not weight.uses():  # a tied embedding's Gather keeps its float table
            model.graph.initializers.pop(weight.name)
    if counts["int4_matmuls"]:
        model.opset_imports["com.microsoft"] = 1
    ir.save(model, str(dst), external_data=dst.name + ".data" if external else None)
    return counts


def head_kind(head: str, shape: tuple[int, ...]) -> str:
    """What `--int4-head` makes of a head of `shape` (K, N): `auto` is scan from SCAN_MIN_WEIGHTS on, else int8."""
    if head != "auto":
        return head
    return "scan" if int(np.prod(shape)) >= SCAN_MIN_WEIGHTS else "int8"


def pack_weight(array: Any, block_size: int, method: str = "rtn", hessian: Any = None) -> tuple[Any, Any, Any]:
    """(B_Q4 uint8 (N, blocks, block/2), scales float32 (N, blocks), zero points uint8 (N, ceil(blocks/2)))
    of a float32 (K, N) weight, in ORT's MatMulNBits layout. gptq needs the weight's `hessian` (else: rtn)."""
    if method == "gptq":
        return pack_gptq(array, block_size, hessian) if hessian is not None else _pack_rtn(array, block_size)
    return PACKERS[method](array, block_size)


def _pack_rtn(array: Any, block_size: int) -> tuple[Any, Any, Any]:
    """ORT's own packing (DefaultWeightOnlyQuantizer, its C++ quantize_matmul_4bits): min/max per block."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                  DefaultWeightOnlyQuantizer)

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=SYMMETRIC, bits=BITS)
    return DefaultWeightOnlyQuantizer(config).qbits_block_quant(array)


def _pack_k_quant(array: Any, block_size: int) -> tuple[Any, Any, Any]:
    """The scales and zero points of ORT's k-quant (MatMulNBitsQuantizer's `k_quant` algorithm: its
    quant_tensor_k_quant_cpu), packed as _pack_rtn packs: two 4-bit values a byte, low nibble first, and the
    zero points of a row padded with 8 to whole bytes (ORT's own k_quant writer packs them across rows,
    which is only the same layout when the block count is even)."""
    from onnxruntime.quantization.neural_compressor.weight_only import pad_tensor, quant_tensor_k_quant_cpu

    k, n = array.shape
    blocks = -(-k // block_size)
    q, scales, zeros = quant_tensor_k_quant_cpu(pad_tensor(array, block_size, blocks).T, BITS, block_size)
    q = q.astype(np.uint8)  # (N * blocks, block), row-major: a row's blocks are consecutive
    packed = (q[:, 0::2] | q[:, 1::2] << 4).reshape(n, blocks, block_size // 2)
    zeros = np.pad(zeros.reshape(n, blocks), ((0, 0), (0, blocks % 2)), constant_values=8)
    return packed, scales.astype(np.float32).reshape(n, blocks), (zeros[:, 0::2] | zeros[:, 1::2] << 4)


PACKERS = {"rtn": _pack_rtn, "k_quant": _pack_k_quant}


def _pack(model: Any, weight: Any, block_size: int, method: str, hessian: Any = None) -> tuple[Any, ...]:
    """The packed initializers of `weight` (named as MatMulNBitsQuantizer names them), the float one unmapped."""
    q, scales, zeros = pack_weight(weight.const_value.numpy(), block_size, method, hessian)
    unmap(weight.const_value)  # the float weight
    base = weight.name
    values = [initializer(model, f"{base}_Q{BITS}", q), initializer(model, f"{base}_scales", scales)]
    if not SYMMETRIC:
        values.append(initializer(model, f"{base}_zero_points", zeros))
    return tuple(values)


def _replace(model: Any, node: Any, weight: Any, packed: tuple[Any, ...], settings: Int4Settings) -> None:
    """MatMul(A, B) -> MatMulNBits(A, *packed) with MatMulNBitsQuantizer's attributes (accuracy_level left
    out when 0, as it does: the attribute is optional and some execution providers reject it)."""
    import onnx_ir as ir

    k, n = weight.const_value.shape
    attributes = {"K": int(k), "N": int(n), "bits": BITS, "block_size": settings.block_for(int(k))}
    if settings.accuracy_level:
        attributes["accuracy_level"] = settings.accuracy_level
    out = node.outputs[0]
    new = ir.node("MatMulNBits", [node.inputs[0], *packed], attributes=attributes, domain="com.microsoft",
                  name=f"{node.name}_Q{BITS}" if node.name else f"{out.name}_Q{BITS}")
    ir.convenience.replace_nodes_and_values(model.graph, node, [node], [new], [out], [new.outputs[0]])


def _module_of(node: Any) -> str | None:
    """The module torch.onnx recorded `node` as made by ("model.decoder_layers.0.ffn.fc2"), or None: its scopes
    run from the graph module down to the module, then the op's own name."""
    scopes = node.metadata_props.get(SCOPES_KEY)
    try:
        names = ast.literal_eval(scopes) if scopes else []
    except (ValueError, SyntaxError):
        return None
    return names[-2] if isinstance(names, list) and len(names) >= 2 and isinstance(names[-2], str) else None


def _is_ffn_output(node: Any) -> bool:
    """Whether `node` was made by a feed-forward output projection (FFN_OUTPUT)."""
    module = _module_of(node)
    return module is not None and module.endswith(FFN_OUTPUT)


def _head_matmuls(graph: Any) -> dict[str, Any]:
    """output name -> the weight MatMul nearest to it, for each HEAD_OUTPUTS output the graph has (none in an
    encoder)."""
    heads = {value.name: _nearest_matmul(value) for value in graph.outputs if value.name in HEAD_OUTPUTS}
    return {name: head for name, head in heads.items() if head is not None}


def _nearest_matmul(output: Any) -> Any:
    """The weight MatMul nearest to `output` (walking producers back), or None."""
    frontier, seen = [output], set()
    while frontier:
        value = frontier.pop(0)
        node = value.producer() if value is not None else None
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if float_matrix(node) is not None:
            return node
        frontier.extend(node.inputs)
    return None
