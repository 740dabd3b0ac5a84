"""Row gathers on the device: beam search's cache reorder and the encoder outputs' expansion. Torch-free.

A tiny ONNX graph, built here with onnx.helper: for a list of tensors, `out_i = Gather(in_i, index,
axis=0)`. ORT runs it through IOBinding on the decoder's device, so the caches never leave it; only
the (rows,) int64 index crosses. Chosen over a `beam_idx` input of the decoder because it needs no
re-export (every existing export gets beam search) and leaves greedy steps untouched; it costs one
extra session run per beam step (on CPU about 0.04 ms for 4 beams of a 3-layer, 12-slot past: a few
percent of a beam step; the copy itself is what transformers' reorder_cache does too). Steps that
keep every row in place skip it. Its threads do not spin (`helper_session`). On CPU the same copy is
numpy's take on the OrtValues' memory (`host_gather`): no session run, a quarter of the time.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..device import Device

ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bool": TensorProto.BOOL,
              "int64": TensorProto.INT64}
OPSET, IR_VERSION = 13, 8  # Gather-13; IR 8 loads on every ONNX Runtime this package supports


def gather_model(dtypes: list[str]) -> bytes:
    """The serialized graph: inputs `index` (rows,) int64 and in_0.. (any shape), outputs out_i."""
    inputs = [helper.make_tensor_value_info("index", TensorProto.INT64, ["rows"])]
    outputs, nodes = [], []
    for i, dtype in enumerate(dtypes):
        inputs.append(helper.make_tensor_value_info(f"in_{i}", ONNX_TYPES[dtype], None))
        outputs.append(helper.make_tensor_value_info(f"out_{i}", ONNX_TYPES[dtype], None))
        nodes.append(helper.make_node("Gather", [f"in_{i}", "index"], [f"out_{i}"], axis=0))
    graph = helper.make_graph(nodes, "tfm_export_gather_rows", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    return model.SerializeToString()


def helper_session(model: bytes, device: Device, threads: int = 0) -> ort.InferenceSession:
    """A session for a small graph run between the decoder's steps (this gather, runtime.states.head), with
    `threads` intra-op threads (0: ORT's default; pass the decoder's).

    Its idle threads never spin: a spinning pool keeps its cores busy for a while after each run and,
    on a machine with few cores, steals them from the decoder's next step (on 2 cores a beam step at
    64 rows took 80 ms of decoder time with spinning helpers, 30 ms without; BENCHMARKS.md).
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=list(device.providers))


class RowGather:
    """Gathers rows of OrtValues on `device` (one session per list of dtypes; see `helper_session`)."""

    def __init__(self, device: Device, threads: int = 0):
        self.device, self.threads = device, threads
        self._sessions: dict[tuple[str, ...], ort.InferenceSession] = {}

    def _session(self, dtypes: tuple[str, ...]) -> ort.InferenceSession:
        if dtypes not in self._sessions:
            self._sessions[dtypes] = helper_session(gather_model(list(dtypes)), self.device, self.threads)
        return self._sessions[dtypes]

    def __call__(self, values: list[ort.OrtValue], index: np.ndarray, out: list[ort.OrtValue] | None = None
                 ) -> list[ort.OrtValue]:
        """values[i][index] for each i, as new OrtValues on the device, or written into `out` (OrtValues of
        the same shapes, none of them one of `values`)."""
        if self.device.ort_type == "cpu":
            return host_gather(values, index, out)
        dtypes = tuple(numpy_dtype(v) for v in values)
        session = self._session(dtypes)
        binding = session.io_binding()
        index = np.ascontiguousarray(index, dtype=np.int64)
        binding.bind_ortvalue_input("index", ort.OrtValue.ortvalue_from_numpy(index, self.device.ort_type,
                                                                              self.device.index))
        for i, value in enumerate(values):
            binding.bind_ortvalue_input(f"in_{i}", value)
            if out is None:
                binding.bind_output(f"out_{i}", self.device.ort_type, self.device.index)
            else:
                binding.bind_ortvalue_output(f"out_{i}", out[i])
        session.run_with_iobinding(binding)
        return binding.get_outputs()


def host_gather(values: list[ort.OrtValue], index: np.ndarray, out: list[ort.OrtValue] | None = None
                ) -> list[ort.OrtValue]:
    """RowGather on CPU: numpy's take on the OrtValues' own memory (OrtValue.numpy() wraps it there), the
    same copy the Gather graph makes without a session run: at batch 1, beam 4, a reorder of an opus-mt
    past (12 tensors) took 0.38 ms through the graph, most of it binding and running."""
    index = np.asarray(index, dtype=np.int64)
    if out is None:
        return [ort.OrtValue.ortvalue_from_numpy(np.take(v.numpy(), index, axis=0)) for v in values]
    for value, target in zip(values, out):
        target.update_inplace(np.take(value.numpy(), index, axis=0))
    return out


ORT_ELEMENT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bool)": "bool",
                     "tensor(int64)": "int64"}


def numpy_dtype(value: ort.OrtValue) -> str:
    """The numpy dtype name of an OrtValue's elements (it may live on a GPU: no .numpy())."""
    return ORT_ELEMENT_TYPES[value.data_type()]
