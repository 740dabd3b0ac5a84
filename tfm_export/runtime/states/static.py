"""The static-cache decoder (decoder_static.onnx) as a runtime.decode.loop.DecoderCache, replayable as CUDA graphs.

Every buffer the decoder reads or writes is allocated once per (batch, src_len) and bound once:
the caches (two sets of max_len slots, swapped every step: step s reads set s % 2 and writes the
other), `input_ids`, `cache_len`, `logits` and `next_ids`. Only `input_ids` and `cache_len` are
refreshed in place (a few bytes) and only `next_ids` is read back, so on CUDA ORT can capture each
of the two bindings once as a CUDA graph (`enable_cuda_graph`, one `gpu_graph_id` per binding) and
replay it for every later step. On CPU the same steps run without capture. Torch-free.

A call's state is a runtime.states.rows.RowBatch over the buffers of its (batch, src_len), every row
bound at once: greedy decoding, sampling and beam search (its rows reordered on the device by a
gather into the other cache set) all replay the same two graphs. `cache_len` is per row (batch,), so
rows of one batch may be at different steps: the server's in-flight rows (runtime.inflight) bind one
request at a time into free rows of a RowBatch of their own.

Exported with `tfm-export MODEL --cuda-graph`; used when `RuntimeOptions(cuda_graph=True)`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ...manifest import Manifest
from .growing import device_value
from ..checks import check_sessions
from ..device import Device, RuntimeOptions, create_session
from .head import BeamHead
from .reorder import RowGather
from .rows import RowBatch
from ..sources import FRAME_PAD

log = logging.getLogger(__name__)

GRAPH_NAME = "decoder_static"
# Sources are padded up to a multiple of this when graphs are captured: one capture serves every
# source length in the bucket (padding is masked, so the tokens do not change).
SRC_BUCKET = 16
# Buffer sets kept, least recently used dropped first: each holds two max_len caches, so keeping one
# per (batch, src_len) ever seen would grow without bound in a long-running server.
MAX_SLOT_SETS = 4


def cuda_graph_device(device: Device) -> Device:
    """`device` with ORT's CUDA-graph capture switched on (CPU is returned unchanged)."""
    if device.ort_type != "cuda":
        return device
    cuda = ("CUDAExecutionProvider", {"device_id": device.index, "enable_cuda_graph": "1"})
    return Device(device.name, (cuda, *device.providers[1:]), device.ort_type, device.index)


@dataclass
class _Slots:
    """The bound buffers of one (batch, src_len): two bindings that swap the cache sets."""

    encoder_outputs: dict[str, ort.OrtValue]
    # The same tensors on the host: on CPU the OrtValues wrap these arrays (rows are written in place);
    # on CUDA they are copies, pushed with update_inplace after a row is written.
    encoder_host: dict[str, np.ndarray]
    input_ids: ort.OrtValue  # (batch, 1) int64
    cache_len: ort.OrtValue  # (batch,) int64: each row's filled slots
    next_ids: ort.OrtValue  # (batch,) int64
    logits: ort.OrtValue  # (batch, tgt_vocab): read only by rows that sample or run processors
    bindings: tuple[Any, Any]
    run_options: tuple[ort.RunOptions | None, ort.RunOptions | None]
    # The two cache sets: OrtValues (batch, heads, slots, head_dim), and on CPU the host arrays they wrap.
    caches: tuple[list[ort.OrtValue], list[ort.OrtValue]] = ((), ())  # type: ignore[assignment]
    caches_host: tuple[list[np.ndarray], list[np.ndarray]] | None = None


class StaticCache:
    """decoder_static.onnx as a runtime.decode.loop.DecoderCache; see the module docstring."""

    lock: threading.RLock

    def __init__(self, folder: Path, manifest: Manifest, device: Device, options: RuntimeOptions,
                 encoder: ort.InferenceSession):
        entry, config = manifest.graphs[GRAPH_NAME], manifest.config
        self.config, self.device, self.encoder = config, device, encoder
        self.folder, self.manifest, self.options = folder, manifest, options  # for runtime.states.host_rows' own session
        self.capture = device.ort_type == "cuda"  # CUDA graphs exist only there; CPU runs the same loop
        self.session = create_session(folder / entry.file, cuda_graph_device(device) if self.capture else device,
                                      options)
        check_sessions(manifest, {GRAPH_NAME: self.session})
        self._inputs, self._outputs, self.spec = entry.spec.input_names(), entry.spec.output_names(), entry.spec
        self.source_name = manifest.encoder_input.name
        self.slots = static_slots(manifest)  # tokens a row can take: max_len, or fewer (--static-slots)
        self._slots: OrderedDict[tuple[int, int], _Slots] = OrderedDict()
        self._next_graph_id = 0
        self.lock = threading.RLock()  # the bound buffers are shared: one generate call at a time (reentrant: a
        # capturing model's stream() holds it across its yields, and its consumer may call generate)
        if not self.capture:
            log.info("static-cache decoder on %s: no CUDA graphs there, decoding without capture", device.name)

    def start(self, src: np.ndarray, expand: int = 1) -> RowBatch:
        """Encode `src` (batch, src_len) into the bound buffers of its (bucketed) shape, `expand` rows per
        source (beams, samples: each source's encoder outputs repeated)."""
        src = self._bucket(src)
        width = self.config.src_len or src.shape[1]  # the encoder's output length: fixed for features
        rows = src.shape[0] * expand
        return RowBatch(self, rows, width, self._slots_for(rows, width)).start(src, expand)

    def device_value(self, array: np.ndarray) -> ort.OrtValue:
        return device_value(self.device, array)

    @cached_property
    def head(self) -> BeamHead:
        """The beam head of every call's rows and the server's (its sessions made once, on the decoder's threads)."""
        return BeamHead(self.device, self.options.intra_op_threads or 0)

    @cached_property
    def gather(self) -> RowGather:
        """The device reorder of every call's rows and the server's."""
        return RowGather(self.device, self.options.intra_op_threads or 0)

    def _bucket(self, src: np.ndarray) -> np.ndarray:
        """Token ids (or frames) padded to the SRC_BUCKET multiple when capturing (features have one fixed
        shape); frames are padded as runtime.sources pads them."""
        if not self.capture or self.config.src_len is not None:
            return src
        width = min(self.config.max_len, -(-src.shape[1] // SRC_BUCKET) * SRC_BUCKET)
        pad = [(0, 0)] * src.ndim
        pad[1] = (0, width - src.shape[1])  # (batch, src_len[, n_feats]): the length axis
        return np.pad(src, pad, constant_values=FRAME_PAD if src.dtype.kind == "f" else self.config.src_pad_id)

    def _zeros_host(self, name: str, batch: int, src_len: int = 0) -> np.ndarray:
        """Zeros in a spec's shape (zeros: never-written cache slots must be finite)."""
        dims = {"batch": batch, "src_len": src_len}
        spec = self.spec.tensor(name)
        return np.zeros([dims.get(d, d) for d in spec.shape], dtype=spec.dtype)

    def _zeros(self, name: str, batch: int, src_len: int) -> ort.OrtValue:
        return device_value(self.device, self._zeros_host(name, batch, src_len))

    def _slots_for(self, batch: int, src_len: int) -> _Slots:
        key = (batch, src_len)
        if key in self._slots:
            self._slots.move_to_end(key)
        else:
            if len(self._slots) == MAX_SLOT_SETS:
                self._slots.popitem(last=False)
            self._slots[key] = self.allocate(batch, src_len)
            log.info("static cache allocated for batch %d, src_len %d", batch, src_len)
        return self._slots[key]

    def allocate(self, batch: int, src_len: int) -> _Slots:
        """The bound buffers of (batch, src_len): direct calls keep a few (`_slots_for`), the server's rows
        own theirs."""
        past = [name for name in self._inputs if name.startswith("past.")]
        present = [name for name in self._outputs if name.startswith("present.")]
        host = {name: self._zeros_host(name, batch, src_len) for name in self._inputs if not name.startswith("past.")}
        shared = {name: device_value(self.device, array) for name, array in host.items()}
        outs = {name: self._zeros(name, batch, src_len) for name in ("logits", "next_ids")}
        caches_host = [[self._zeros_host(name, batch, src_len) for name in past] for _ in range(2)]
        caches = [[device_value(self.device, array) for array in arrays] for arrays in caches_host]
        wrapped = all(v.data_ptr() == a.ctypes.data for vs, arrays in zip(caches, caches_host)
                      for v, a in zip(vs, arrays))  # CPU: the OrtValues wrap the host arrays
        bindings = []
        for reads, writes in ((caches[0], caches[1]), (caches[1], caches[0])):
            binding = self.session.io_binding()
            for name, value in [*shared.items(), *zip(past, reads)]:
                binding.bind_ortvalue_input(name, value)
            for name, value in [*outs.items(), *zip(present, writes)]:
                binding.bind_ortvalue_output(name, value)
            bindings.append(binding)
        encoded = [k for k in shared if k == "src_mask" or k.startswith("cross.")]
        return _Slots({k: shared[k] for k in encoded}, {k: host[k] for k in encoded}, shared["input_ids"],
                      shared["cache_len"], outs["next_ids"], outs["logits"],
                      (bindings[0], bindings[1]), (self._run_options(), self._run_options()),
                      (caches[0], caches[1]), (caches_host[0], caches_host[1]) if wrapped else None)

    def _run_options(self) -> ort.RunOptions | None:
        """One CUDA graph per binding: ORT captures each gpu_graph_id on its first runs, then replays."""
        if not self.capture:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(self._next_graph_id))
        self._next_graph_id += 1
        return options


def static_slots(manifest: Manifest) -> int | None:
    """The static decoder's cache slots (its past's fixed length), None when the export has none."""
    entry = manifest.graphs.get(GRAPH_NAME)
    return int(entry.spec.tensor("past.0.self.key").shape[2]) if entry else None


def open_static(folder: Path, manifest: Manifest, device: Device, options: RuntimeOptions,
                encoder: ort.InferenceSession) -> StaticCache:
    """The static-cache decoder of an export folder (DeviceError when it was exported without one)."""
    from ...errors import DeviceError

    if GRAPH_NAME not in manifest.graphs:
        raise DeviceError(f"{folder} has no {GRAPH_NAME}.onnx for CUDA graphs; re-export with --cuda-graph "
                          f"or run without cuda_graph")
    return StaticCache(folder, manifest, device, options, encoder)
