"""What a speculative step needs of the growing cache beyond a plain step, on the decoder's device. Torch-free.

A speculative step (runtime.decode.speculative) feeds a row its last id and k drafted ids in one decoder call
and reads the greedy id after every one of them: `PositionPicker` takes the argmax of the step's
earlier_logits (rows, k, tgt_vocab) and logits (rows, tgt_vocab) plus a ban bias (processors.bias_array: the
model's suppressed ids) where the logits are, so that only (rows, k + 1) ids cross. Then the cache keeps only what was accepted:
`PastTrim` cuts every past tensor (rows, heads, past_len, head_dim) to its first `length` positions.

Both are tiny ONNX graphs built with onnx.helper, as runtime.states.reorder's gather, run through IOBinding on
the decoder's device; on CPU the same work is numpy's on the OrtValues' own memory (no session run).
ONNX ArgMax keeps the first of equal values (select_last_index=0), as numpy's argmax and the graphs' next_ids.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..device import Device
from .reorder import IR_VERSION, ONNX_TYPES, helper_session, numpy_dtype

OPSET = 13  # Slice-13, ArgMax-13 and Unsqueeze-13


def pick_model(vocab: int) -> bytes:
    """earlier (rows, positions, vocab) and last (rows, vocab) float32, bias (vocab,) -> ids (rows, positions + 1)
    int64."""
    t = helper.make_tensor_value_info
    inputs = [t("earlier", TensorProto.FLOAT, ["rows", "positions", vocab]),
              t("last", TensorProto.FLOAT, ["rows", vocab]), t("bias", TensorProto.FLOAT, [vocab])]
    outputs = [t("ids", TensorProto.INT64, ["rows", "positions + 1"])]
    axis = helper.make_tensor("axis", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("Unsqueeze", ["last", "axis"], ["last_position"]),
             helper.make_node("Concat", ["earlier", "last_position"], ["logits"], axis=1),
             helper.make_node("Add", ["logits", "bias"], ["biased"]),
             helper.make_node("ArgMax", ["biased"], ["ids"], axis=-1, keepdims=0, select_last_index=0)]
    graph = helper.make_graph(nodes, "tfm_export_position_pick", inputs, outputs, initializer=[axis])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION).SerializeToString()


def trim_model(dtypes: list[str]) -> bytes:
    """in_0.. (rows, heads, len, head_dim) and `end` (1,) int64 -> out_i = in_i[:, :, :end]."""
    t = helper.make_tensor_value_info
    inputs, outputs, nodes = [t("end", TensorProto.INT64, [1])], [], []
    constants = [helper.make_tensor("start", TensorProto.INT64, [1], [0]),
                 helper.make_tensor("axis", TensorProto.INT64, [1], [2])]
    for i, dtype in enumerate(dtypes):
        inputs.append(t(f"in_{i}", ONNX_TYPES[dtype], None))
        outputs.append(t(f"out_{i}", ONNX_TYPES[dtype], None))
        nodes.append(helper.make_node("Slice", [f"in_{i}", "start", "end", "axis"], [f"out_{i}"]))
    graph = helper.make_graph(nodes, "tfm_export_past_trim", inputs, outputs, initializer=constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION).SerializeToString()


class PositionPicker:
    """The greedy id at every new position of a step, picked on `device`."""

    def __init__(self, device: Device, threads: int = 0):
        self.device, self.threads = device, threads
        self._sessions: dict[int, ort.InferenceSession] = {}

    def __call__(self, earlier: ort.OrtValue, last: ort.OrtValue, bias: np.ndarray) -> np.ndarray:
        """earlier_logits (rows, positions, vocab) and logits (rows, vocab) on the device, bias (vocab,) -> ids
        (rows, positions + 1)."""
        if self.device.ort_type == "cpu":
            return np.concatenate([np.argmax(earlier.numpy() + bias, axis=-1),
                                   np.argmax(last.numpy() + bias, axis=-1)[:, None]], axis=1)
        vocab = last.shape()[-1]
        if vocab not in self._sessions:
            self._sessions[vocab] = helper_session(pick_model(vocab), self.device, self.threads)
        binding = self._sessions[vocab].io_binding()
        binding.bind_ortvalue_input("earlier", earlier)
        binding.bind_ortvalue_input("last", last)
        bias = np.ascontiguousarray(bias, dtype=np.float32)
        binding.bind_ortvalue_input("bias", ort.OrtValue.ortvalue_from_numpy(bias, self.device.ort_type,
                                                                             self.device.index))
        binding.bind_output("ids", "cpu")  # the only tensor that crosses
        self._sessions[vocab].run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()


class PastTrim:
    """Cuts past tensors to their first positions on `device` (one session per list of dtypes)."""

    def __init__(self, device: Device, threads: int = 0):
        self.device, self.threads = device, threads
        self._sessions: dict[tuple[str, ...], ort.InferenceSession] = {}

    def __call__(self, values: list[ort.OrtValue], length: int) -> list[ort.OrtValue]:
        """values[i][:, :, :length] as new OrtValues on the device."""
        if self.device.ort_type == "cpu":
            return [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()[:, :, :length]))
                    for v in values]
        dtypes = tuple(numpy_dtype(v) for v in values)
        if dtypes not in self._sessions:
            self._sessions[dtypes] = helper_session(trim_model(list(dtypes)), self.device, self.threads)
        binding = self._sessions[dtypes].io_binding()
        # Slice reads its bounds on the host (ORT's CUDA kernel too): bound there, nothing is copied back
        binding.bind_ortvalue_input("end", ort.OrtValue.ortvalue_from_numpy(np.array([length], dtype=np.int64)))
        for i, value in enumerate(values):
            binding.bind_ortvalue_input(f"in_{i}", value)
            binding.bind_output(f"out_{i}", self.device.ort_type, self.device.index)
        self._sessions[dtypes].run_with_iobinding(binding)
        return binding.get_outputs()
