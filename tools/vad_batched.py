"""Write models/silero-vad/silero_vad_16k_op15_batched.onnx: silero's op15 graph, rewritten to run many
512-sample windows in one call (issue #60).

The op15 file takes a batch of independent streams: each row of `input` (batch, 576) is one window of its
own stream, and the LSTM runs one step (sequence length 1) over the batch. A recording is one stream, so
Python and Node called it once per window, carrying the state: 18,750 calls for 10 minutes. The model's
front end (the STFT conv, the magnitude and the four encoder convs) keeps no state, and its LSTM is one ONNX
`LSTM` node, which runs a whole sequence itself. This graph is the same nodes with the windows on the
LSTM's sequence axis instead of its batch axis:

    input (windows, 576) -> the op15 front end, batch = windows (its Convs as one signal) -> (windows, 128)
                         -> LSTM over a sequence of `windows` steps, batch 1, from `state` -> (windows, 128)
                         -> the op15 head (ReLU, 1x1 conv, sigmoid), unchanged, batch = windows
    output (windows,) P(speech) of each window; stateN (2, 1, 128): the state after the last one

The LSTM's weights are the op15 file's, in the gate order its own Slice/Concat nodes put them in (PyTorch's
i, f, g, o -> ONNX's i, o, f, c); `sr` is gone (the op15 graph only multiplied it by zero). Each of the front
end's five Convs runs as one Conv over the windows laid end to end (_one_signal): ONNX Runtime runs a batched
Conv one image at a time, and that was 85 % of the batched graph's time (0.66 s -> 0.40 s for 600 s). The
windows' probabilities equal the per-window loop's to float32 rounding (within 1e-6; tests/test_vad.py), and
the file is what this script writes, byte for byte (tests/test_vad.py regenerates it). A build tool of the
repository:

    python -m tools.vad_batched           # rewrite the file
    python -m tools.vad_batched --check   # exit 1 if it differs from what this writes
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FOLDER = Path(__file__).resolve().parents[1] / "models" / "silero-vad"
SOURCE = FOLDER / "silero_vad_16k_op15.onnx"
TARGET = FOLDER / "silero_vad_16k_op15_batched.onnx"
HIDDEN = 128
PADDED = 64 + 512 + 64  # the STFT conv's input: context, window, the window's end reflected
FRONT_END_OUT = "/model/decoder/If_output_0"  # (batch, 128): the encoder's output, its length-1 axis squeezed
HEAD_IN = "/model/decoder/Cast_1_output_0"  # (batch, 128, 1): the LSTM's h, where the head starts
HEAD_OUT = "output"  # (batch, 1)
GATES = ((0, 1), (3, 4), (1, 3))  # quarters of PyTorch's i, f, g, o rows in ONNX's i, o, f, c order


def _ancestors(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """The nodes `outputs` are computed from, in the graph's order."""
    wanted, keep = set(outputs), []
    for node in reversed(nodes):
        if wanted & set(node.output):
            keep.append(node)
            wanted |= set(node.input) | _captured(node)
    return keep[::-1]


def _captured(node: onnx.NodeProto) -> set[str]:
    """The outer names a node's subgraphs (an If's branches) read."""
    names: set[str] = set()
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            names |= {name for inner in attribute.g.node for name in inner.input}
    return names


def _descendants(nodes: list[onnx.NodeProto], start: str) -> list[onnx.NodeProto]:
    """The nodes computed from `start`, in the graph's order."""
    reached, keep = {start}, []
    for node in nodes:
        if reached & (set(node.input) | _captured(node)):
            keep.append(node)
            reached |= set(node.output)
    return keep


def _lstm_weights(weights: dict[str, np.ndarray]) -> list[onnx.TensorProto]:
    """W, R, B of the ONNX LSTM, from PyTorch's LSTMCell weights as the op15 graph reorders them."""
    def order(rows: np.ndarray) -> np.ndarray:
        return np.concatenate([rows[a * HIDDEN:b * HIDDEN] for a, b in GATES])

    name = "model.decoder.rnn."
    w, r = order(weights[name + "weight_ih"]), order(weights[name + "weight_hh"])
    b = np.concatenate([order(weights[name + "bias_ih"]), order(weights[name + "bias_hh"])])
    return [numpy_helper.from_array(value[None], key) for key, value in (("lstm.W", w), ("lstm.R", r), ("lstm.B", b))]


def _recurrence() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The LSTM over the windows as a sequence, from `state`; its h as the head's input, its state out."""
    constants = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
                 (("lstm.axis1", [1]), ("lstm.head_shape", [-1, HIDDEN, 1]), ("lstm.split", [1, 1]))]
    nodes = [
        helper.make_node("Unsqueeze", [FRONT_END_OUT, "lstm.axis1"], ["lstm.X"]),  # (windows, 1, 128)
        helper.make_node("Split", ["state", "lstm.split"], ["lstm.h0", "lstm.c0"], axis=0),  # (1, 1, 128) each
        helper.make_node("LSTM", ["lstm.X", "lstm.W", "lstm.R", "lstm.B", "", "lstm.h0", "lstm.c0"],
                         ["lstm.Y", "lstm.Y_h", "lstm.Y_c"], hidden_size=HIDDEN),
        helper.make_node("Reshape", ["lstm.Y", "lstm.head_shape"], [HEAD_IN]),  # (windows, 1, 1, 128) -> head's
        helper.make_node("Concat", ["lstm.Y_h", "lstm.Y_c"], ["stateN"], axis=0),
    ]
    return nodes, constants


def _one_signal(conv: onnx.NodeProto, shape: tuple[int, ...], length: int, index: int
                ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int]:
    """A front-end Conv over (windows, C, length) as one Conv over the windows end to end, each zero-padded as
    the Conv pads it: (1, C, windows * (length + pads)). ONNX Runtime runs a batched Conv image by image (small
    GEMMs); this is one GEMM. A window's outputs are the long Conv's at its own positions (those that straddle
    two windows are dropped): the same sums. `shape`: the weight's. -> (nodes, constants, output length)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    (kernel,), (stride,), (before, after) = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
    span = length + before + after  # a window's samples in the long signal
    if span % stride or kernel < stride or attrs.get("group", 1) != 1:
        raise ValueError(f"{conv.name}: not a Conv that runs as one signal")
    block, outputs = span // stride, (span - kernel) // stride + 1  # positions per window; its own ones
    x, y, name = conv.input[0], conv.output[0], f"one_signal{index}."
    constants = [numpy_helper.from_array(np.array(v, np.int64), name + k) for k, v in (
        ("pads", [0, 0, before, 0, 0, after]), ("long_shape", [1, shape[1], -1]),
        ("block_shape", [shape[0], -1, block]), ("start", [0]), ("stop", [outputs]), ("axis", [2]))]
    nodes = [
        helper.make_node("Pad", [x, name + "pads"], [name + "padded"]),  # (windows, C, span)
        helper.make_node("Transpose", [name + "padded"], [name + "channels"], perm=[1, 0, 2]),
        helper.make_node("Reshape", [name + "channels", name + "long_shape"], [name + "long"]),
        helper.make_node("Conv", [name + "long"] + list(conv.input[1:]), [name + "out"], kernel_shape=[kernel],
                         strides=[stride], pads=[0, kernel - stride]),  # (1, C', windows * block)
        helper.make_node("Reshape", [name + "out", name + "block_shape"], [name + "blocked"]),
        helper.make_node("Slice", [name + "blocked", name + "start", name + "stop", name + "axis"], [name + "own"]),
        helper.make_node("Transpose", [name + "own"], [y], perm=[1, 0, 2]),  # (windows, C', outputs)
    ]
    return nodes, constants, outputs


def _convs_as_one_signal(front: list[onnx.NodeProto], weights: dict[str, np.ndarray]
                         ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The front end with each Conv replaced by _one_signal's."""
    nodes, constants, length = [], [], PADDED
    for node in front:
        if node.op_type != "Conv":
            nodes.append(node)
            continue
        replaced, made, length = _one_signal(node, weights[node.input[1]].shape, length, len(constants))
        nodes += replaced
        constants += made
    return nodes, constants


def batched_model(source: Path = SOURCE) -> onnx.ModelProto:
    """The op15 model with its windows on the LSTM's sequence axis (the module's docstring)."""
    model = onnx.load(str(source))
    graph = model.graph
    nodes = list(graph.node)
    front = _ancestors(nodes, {FRONT_END_OUT})
    head = [n for n in _ancestors(nodes, {HEAD_OUT}) if n in _descendants(nodes, HEAD_IN)]
    read = {name for n in head for name in set(n.input) | _captured(n)}
    head_constants = [n for n in nodes if n.op_type == "Constant" and n not in front and set(n.output) & read]
    recurrence, constants = _recurrence()
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    front, long_constants = _convs_as_one_signal(front, weights)
    constants += long_constants
    used = {name for n in front + head for name in set(n.input) | _captured(n)}
    initializers = [t for t in graph.initializer if t.name in used] + _lstm_weights(weights) + constants
    squeeze = helper.make_node("Squeeze", [HEAD_OUT + "_2d", "lstm.axis1"], [HEAD_OUT])
    for node in head:  # the head's last node writes (windows, 1); the graph's output is (windows,)
        node.output[:] = [HEAD_OUT + "_2d" if o == HEAD_OUT else o for o in node.output]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["windows", 576]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, HIDDEN])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["windows"]),
               helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, HIDDEN])]
    new = helper.make_graph(front + recurrence + head_constants + head + [squeeze], "silero_vad_batched",
                            inputs, outputs, initializers)
    out = helper.make_model(new, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                            producer_name="tfm-export tools/vad_batched.py", doc_string=__doc__.split("\n\n")[0])
    onnx.checker.check_model(out, full_check=True)
    return out


def main(argv: list[str]) -> int:
    data = batched_model().SerializeToString()
    if "--check" in argv:
        stale = not TARGET.is_file() or TARGET.read_bytes() != data
        if stale:
            print(f"{TARGET} differs from what tools/vad_batched.py writes; run python -m tools.vad_batched")
        return int(stale)
    TARGET.write_bytes(data)
    print(f"wrote {TARGET} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
