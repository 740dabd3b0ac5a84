"""Beam search's per-row top-k on the device: only the candidates' ids and log-probabilities cross. Torch-free.

A tiny ONNX graph, built here with onnx.helper like runtime.states.reorder, runs on the decoder's device
through IOBinding: the step's logits (rows, tgt_vocab) stay an OrtValue, and per row it returns the
`width` best tokens of log_softmax(logits) + bias (bias: 0, or -inf for a banned id; see
processors.bias_key), best first, equal values in id order (ONNX TopK's rule, runtime.decode.beam.top_k's):

    ids, values = TopK(logits + bias, width)               # (rows, width) int64, float32 logits
    max = ReduceMax(x)                                     # (rows, 1)
    sum = ReduceSum(Exp(double(x) - max))                  # (rows, 1) float64

where x is the logits, or logits + bias when the search renormalises after its processors
(renormalize_logits: the banned ids leave the normalisation).

and the host finishes `(double(values) - max) - log(sum)`, processors.log_softmax's formula on the same
float32 inputs: log_softmax is the logits shifted by one constant per row, so the top-k of the
logits are the top-k of the log-probabilities, and the log-probabilities equal the host path's
float64 ones up to the order of the exp sum (about 1e-16; beam scores, Node and the committed fixture
agree within 1e-9). The normaliser is float64 for that reason: a float32 sum would move scores by
~1e-7 a step. What crosses per step: rows * width ids and values and two (rows,) floats.

Processors that need the whole row (repetition_penalty, no_repeat_ngram_size) keep the host path
(runtime.decode.strategies and runtime.decode.beam take the logits); min_new_tokens is the bias, forced_eos the bias plus
processors.process_top. Chosen over fusing the same nodes into decoder.onnx because every existing
export gets it and greedy steps stay untouched; the extra session run costs ~0.05 ms.

In-flight batching (runtime.inflight) runs the head over some rows of a larger batch: the graph then
gathers them first (`rows`, int64 indices), one run for every beam group that shares a bias.

Exact ties: ONNX TopK puts the lower index first; ORT's CPU kernel does (tests/test_beam_head.py).
ORT's CUDA kernel was not tested here (no GPU); on CUDA, transformers' torch.topk does not promise an
order among exact ties either.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..device import Device
from ..decode.processors import BiasKey, bias_array
from .reorder import IR_VERSION, ONNX_TYPES, helper_session, numpy_dtype

HEAD_OPSET = 18  # ReduceMax/ReduceSum take axes as an input from opset 18 (13 for ReduceSum)
MAX_BIASES = 64  # bias arrays kept by `pick` (a few per generation config; in-flight jobs bring theirs)
ROW_ALIGN = 16  # the exp sum runs over rows padded to a multiple of this many values (see head_model)


def head_model(logits_dtype: str, width: int, vocab: int, renormalize: bool = False, gathered: bool = False
               ) -> bytes:
    """The serialized graph: inputs logits (rows, vocab) and bias (vocab,) float32; outputs ids,
    values (rows, width) and max, sum (rows, 1) float64. `gathered`: logits (batch, vocab) and an input
    rows (rows,) int64, the rows of the batch to pick from.

    ORT's vectorised Exp rounds the last values of a tensor that do not fill a SIMD register by
    another (scalar) code path, so with an odd vocab a row's sum depended on its place in the batch:
    the rows are padded with -inf (exp 0) to a multiple of ROW_ALIGN, which leaves no such tail."""
    t = helper.make_tensor_value_info
    inputs = [t("logits", ONNX_TYPES[logits_dtype], ["batch" if gathered else "rows", vocab]),
              t("bias", TensorProto.FLOAT, [vocab])]
    outputs = [t("ids", TensorProto.INT64, ["rows", width]), t("values", TensorProto.FLOAT, ["rows", width]),
               t("max", TensorProto.DOUBLE, ["rows", 1]), t("sum", TensorProto.DOUBLE, ["rows", 1])]
    pad = -vocab % ROW_ALIGN
    constants = [helper.make_tensor("k", TensorProto.INT64, [1], [width]),
                 helper.make_tensor("axes", TensorProto.INT64, [1], [-1])]
    node = helper.make_node
    nodes = [node("Gather", ["logits", "rows"], ["picked"], axis=0)] if gathered else []
    if gathered:
        inputs.append(t("rows", TensorProto.INT64, ["rows"]))
    x32 = "picked" if gathered else "logits"  # (rows, vocab)
    if logits_dtype != "float32":  # (a float32 -> float32 Cast would copy every logit)
        nodes.append(node("Cast", [x32], ["x32"], to=TensorProto.FLOAT))
        x32 = "x32"
    nodes += [
        node("Add", [x32, "bias"], ["biased"]),
        node("TopK", ["biased", "k"], ["values", "ids"], axis=-1, largest=1, sorted=1),
    ]
    normalised = "biased" if renormalize else x32
    if pad:  # in float32, before the Cast: half the bytes of padding the float64 copy, the same values
        constants += [helper.make_tensor("pads", TensorProto.INT64, [4], [0, 0, 0, pad]),
                      helper.make_tensor("minus_inf", TensorProto.FLOAT, [], [-np.inf])]
        nodes.append(node("Pad", [normalised, "pads", "minus_inf"], ["padded32"], mode="constant"))
        normalised = "padded32"
    nodes += [
        node("Cast", [normalised], ["padded"], to=TensorProto.DOUBLE),
        node("ReduceMax", ["padded", "axes"], ["max"], keepdims=1),
        node("Sub", ["padded", "max"], ["shifted"]),
        node("Exp", ["shifted"], ["exp"]),
        node("ReduceSum", ["exp", "axes"], ["sum"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "tfm_export_beam_head", inputs, outputs, initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", HEAD_OPSET)], ir_version=IR_VERSION)
    return model.SerializeToString()


class BeamHead:
    """Runs the head on `device` (one session per logits dtype, width and vocab; see reorder.helper_session)."""

    def __init__(self, device: Device, threads: int = 0):
        self.device, self.threads = device, threads
        self._sessions: dict[tuple[str, int, int, bool, bool], ort.InferenceSession] = {}
        self._biases: dict[tuple[int, BiasKey], np.ndarray] = {}  # (vocab, bias key) -> its (vocab,) array

    def pick(self, logits: ort.OrtValue, key: BiasKey, width: int, renormalize: bool = False,
             rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`__call__` under the ban a processors.bias_key describes (its array made once and kept: a few
        keys per generation config; more than MAX_BIASES are dropped together)."""
        cached = (logits.shape()[-1], key)
        bias = self._biases.get(cached)  # one lookup: another thread's rows may clear the dict meanwhile
        if bias is None:
            if len(self._biases) >= MAX_BIASES:
                self._biases.clear()
            bias = self._biases[cached] = bias_array(cached[0], key)
        return self(logits, bias, width, renormalize, rows)

    def _session(self, key: tuple[str, int, int, bool, bool]) -> ort.InferenceSession:
        if key not in self._sessions:
            self._sessions[key] = helper_session(head_model(*key), self.device, self.threads)
        return self._sessions[key]

    def __call__(self, logits: ort.OrtValue, bias: np.ndarray, width: int, renormalize: bool = False,
                 rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """logits (rows, vocab) on the device, bias (vocab,) -> log-probabilities (rows, width) float64 and
        their ids (rows, width) int64 on the host, best first per row (normalised after the bias when
        `renormalize`). With `rows` (n,): logits is (batch, vocab) and only those rows are picked from."""
        key = (numpy_dtype(logits), width, logits.shape()[-1], renormalize, rows is not None)
        session = self._session(key)
        binding = session.io_binding()
        binding.bind_ortvalue_input("logits", logits)
        if rows is not None:
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            binding.bind_ortvalue_input("rows", ort.OrtValue.ortvalue_from_numpy(rows, self.device.ort_type,
                                                                                 self.device.index))
        bias = np.ascontiguousarray(bias, dtype=np.float32)
        binding.bind_ortvalue_input("bias", ort.OrtValue.ortvalue_from_numpy(bias, self.device.ort_type,
                                                                             self.device.index))
        for name in ("ids", "values", "max", "sum"):
            binding.bind_output(name, "cpu")  # the only tensors that cross to the host
        session.run_with_iobinding(binding)
        ids, values, top, total = (v.numpy() for v in binding.get_outputs())
        # The log on the host: ORT's vectorised Log rounds a row's value by its position in the batch.
        return (values.astype(np.float64) - top) - np.log(total), ids
