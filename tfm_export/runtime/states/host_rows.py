"""In-flight rows on CPU over decoder_rows.onnx: the cache is written in place. Torch-free.

runtime.states.rows.RowBatch steps decoder_static.onnx, whose output is the whole cache with each row's
slot written: on CPU that copy into the second buffer set was a third of every step (ORT profile of
transformer-base, batch 16, 64 slots: the Where op 31 % of the step). decoder_rows.onnx has the
same inputs and outputs, with each layer's self-attention one GroupQueryAttention node; `HostRows`
binds each `present.*` output to its `past.*` input's memory (one cache set, OrtValues wrapping
numpy arrays), and the kernel writes slot cache_len[b] there in place: no copy, no swap, no host
write. A step runs only the rows up to the last bound one (`_stepped`): a server sized for many
rows pays for the rows in use, not for max_batch. CUDA (and exports without decoder_rows: float16,
int8) keep RowBatch.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import onnxruntime as ort

from ..checks import check_sessions
from ..device import create_session
from .rows import RowBatch, Rows, gather_rows
from .static import SRC_BUCKET, StaticCache

log = logging.getLogger(__name__)

GRAPH_NAME = "decoder_rows"
# Rows stepped: the bound rows' prefix of the batch, rounded up to this (fewer bindings to keep).
ROW_BUCKET = 4


def open_rows(cache: StaticCache, batch: int, src_len: int) -> Rows:
    """The in-flight rows of `cache`'s export: HostRows on CPU when it has decoder_rows.onnx, else RowBatch."""
    entry = cache.manifest.graphs.get(GRAPH_NAME)
    if entry and cache.device.ort_type == "cpu":
        if any(t.name.startswith("present.") for t in entry.spec.outputs):
            return HostRows(cache, batch, src_len)
        log.warning("%s is from an older tfm-export (its rows graph returns new.* keys/values); re-export "
                    "it for the fused in-place rows", cache.folder)
    log.info("in-flight rows over decoder_static.onnx on %s", cache.device.name)
    return RowBatch(cache, batch, src_len)


def side_encoder(cache: StaticCache) -> ort.InferenceSession:
    """An encoder session for a thread that encodes while the decoder steps (serve.joiner).

    On CPU a session of its own with half the decoder's threads: both run at once, and ORT's
    threads scale poorly at these sizes (transformer-base step, batch 16: 17.5 ms on one thread,
    14 ms on two). On CUDA the export's own encoder session (ORT sessions may run from any thread).
    """
    if cache.device.ort_type != "cpu":
        return cache.encoder
    threads = max(1, (cache.options.intra_op_threads or os.cpu_count() or 2) // 2)
    session = create_session(cache.folder / cache.manifest.graphs["encoder"].file, cache.device,
                             dataclasses.replace(cache.options, intra_op_threads=threads))
    check_sessions(cache.manifest, {"encoder": session})
    return session


class HostRows(Rows):
    """The in-flight rows over decoder_rows.onnx (a sibling of RowBatch); see the module docstring."""

    def __init__(self, cache: StaticCache, batch: int, src_len: int):
        entry = cache.manifest.graphs[GRAPH_NAME]
        self.session = create_session(cache.folder / entry.file, cache.device, cache.options)
        check_sessions(cache.manifest, {GRAPH_NAME: self.session})
        self.spec = spec = entry.spec
        super().__init__(cache, batch, src_len,
                         [t.name for t in spec.inputs if t.name == "src_mask" or t.name.startswith("cross.")])
        self._bindings: dict[int, ort.IOBinding] = {}  # rows stepped -> the binding of those rows' views
        self._host: dict[str, np.ndarray] = {}
        arrays = {t.name: self._zeros(t.name, 0) for t in (*spec.inputs, *spec.outputs)
                  if t.name not in self.encoded_names and not t.name.startswith("present.")}
        # present.* written into past.*'s memory: (batch, heads, slots, head_dim), one cache set
        arrays.update({t.name: arrays["past." + t.name[len("present."):]]
                       for t in spec.outputs if t.name.startswith("present.")})
        self._use(arrays)
        self._src_axis = {name: spec.tensor(name).shape.index("src_len") for name in self.encoded_names}
        self.src_lens = np.zeros(batch, dtype=np.int64)  # (batch,) source length of each bound row; 0: free
        self.width = 0  # the src_len the rows attend over now: src_len, or fewer (_fit)
        self._fit(min(src_len, SRC_BUCKET))

    def _zeros(self, name: str, width: int) -> np.ndarray:
        spec, dims = self.spec.tensor(name), {"batch": self.batch, "src_len": width}
        return np.zeros([dims.get(d, d) for d in spec.shape], dtype=spec.dtype)

    def _use(self, arrays: dict[str, np.ndarray]) -> None:
        """Use these host arrays from now on (the bindings wrap their memory: see `_binding`)."""
        self._host.update(arrays)  # keeps the memory alive while bound
        self._bindings.clear()

    def _binding(self, rows: int) -> ort.IOBinding:
        """The session bound to the first `rows` rows of every host array, in place: ORT reads and
        writes their memory (no copies). The batch axis leads every tensor, so a prefix is contiguous."""
        binding = self._bindings.get(rows)
        if binding is None:
            binding, inputs = self.session.io_binding(), self.spec.input_names()
            for name, array in self._host.items():
                view = array[:rows]
                value = ort.OrtValue.ortvalue_from_numpy(view)
                if value.data_ptr() != view.ctypes.data:  # the in-place cache writes rely on it
                    raise RuntimeError(f"ORT copied {name} instead of wrapping it")
                (binding.bind_ortvalue_input if name in inputs else binding.bind_ortvalue_output)(name, value)
            self._bindings[rows] = binding
        return binding

    def _stepped(self) -> int:
        """How many rows a step runs: up to the last bound one (the engine fills the lowest free rows
        first), rounded up to ROW_BUCKET. A server's light load then steps a few rows, not max_batch."""
        bound = np.flatnonzero(self.src_lens)
        last = int(bound[-1]) + 1 if bound.size else 1
        return min(self.batch, -(-last // ROW_BUCKET) * ROW_BUCKET)

    def _fit(self, width: int) -> None:
        """Attend over `width` source positions: the widest bound source rounded up to SRC_BUCKET.

        Every step's cross attention reads all src_len positions of every row (transformer-base,
        batch 16: a step of 11.7 ms at 64 positions, 10.6 at 32), so the rows span the longest
        source they hold rather than the server's longest allowed one. Refitting copies the bound
        rows' encoder outputs (a few ms), so it grows at once and shrinks only to half or less.
        """
        keep = min(width, self.width)
        arrays = {}
        for name in self.encoded_names:
            array, axis = self._zeros(name, width), self._src_axis[name]
            if keep:
                kept = (slice(None),) * axis + (slice(0, keep),)
                array[kept] = self._host[name][kept]
            arrays[name] = array
        arrays["src_mask"][self.src_lens == 0, 0] = True  # free rows attend to one (zero) position
        self._use(arrays)
        log.debug("in-flight rows attend over %d source positions (was %d)", width, self.width)
        self.width = width

    def _store(self, rows: list[int], encoded: list[np.ndarray]) -> None:
        length = encoded[self.encoded_names.index("src_mask")].shape[1]  # (rows, L)
        self.src_lens[rows] = length
        if length > self.width:
            self._fit(min(self.src_len, -(-length // SRC_BUCKET) * SRC_BUCKET))
        for name, value in zip(self.encoded_names, encoded):  # (rows, ..., L, ...)
            axis = self._src_axis[name]
            self._host[name][(rows, *[slice(None)] * (axis - 1), slice(0, value.shape[axis]))] = value
        self._host["src_mask"][rows, length:] = False

    def _free(self, row: int) -> None:
        """Nothing it holds is read again until a `write`."""
        self.src_lens[row] = 0

    def _run(self, tokens: np.ndarray) -> None:
        """Rows up to the last bound one (`_stepped`), each at its position; writes slot positions[b] of
        each row in place. Rows past it are free: their ids and logits are stale."""
        needed = max(SRC_BUCKET, -(-int(self.src_lens.max()) // SRC_BUCKET) * SRC_BUCKET)  # shrink: half or less
        if needed * 2 <= self.width:
            self._fit(needed)
        self._host["input_ids"][:, 0] = tokens
        self._host["cache_len"][:] = self.positions
        self.session.run_with_iobinding(self._binding(self._stepped()))

    def next_ids(self) -> np.ndarray:
        return self._host["next_ids"].copy()

    def logits(self) -> np.ndarray:
        return self._host["logits"].copy()  # (batch, tgt_vocab)

    def logits_value(self) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(self._host["logits"])  # wraps the host array (CPU)

    def _gather(self, rows: list[int], source: np.ndarray, filled: int) -> None:
        gather_rows([array for name, array in self._host.items() if name.startswith("past.")], rows, source, filled)
