"""In-flight rows on CPU over decoder_rows.onnx: the cache is written in place on the host. Torch-free.

runtime.static.RowBatch steps decoder_static.onnx, whose output is the whole cache with each row's
slot written: on CPU that copy into the second buffer set was a third of every step (ORT profile of
transformer-base, batch 16, 64 slots: the Where op 31 % of the step). decoder_rows.onnx takes the
same inputs but returns only each layer's new keys/values (batch, heads, 1, head_dim); `HostRows`
writes them into slot cache_len[b] of one cache set that the session reads through OrtValues
wrapping the same memory (no copy, no swap). On CUDA that host write would move the cache to the
host, so there (and for exports without decoder_rows: float16, quantized) RowBatch stays.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort

from .checks import check_sessions
from .device import create_session
from .static import RowBatch, StaticCache

log = logging.getLogger(__name__)

GRAPH_NAME = "decoder_rows"


def open_rows(cache: StaticCache, batch: int, src_len: int) -> RowBatch:
    """The in-flight rows of `cache`'s export: HostRows on CPU when it has decoder_rows.onnx, else RowBatch."""
    if GRAPH_NAME in cache.manifest.graphs and cache.device.ort_type == "cpu":
        return HostRows(cache, batch, src_len)
    log.info("in-flight rows over decoder_static.onnx on %s", cache.device.name)
    return RowBatch(cache, batch, src_len)


class HostRows(RowBatch):
    """RowBatch's interface (bind, step, logits) over decoder_rows.onnx; see the module docstring."""

    def __init__(self, cache: StaticCache, batch: int, src_len: int):
        # Not RowBatch.__init__: that allocates decoder_static's two cache sets; here one set, read in place.
        entry = cache.manifest.graphs[GRAPH_NAME]
        self.session = create_session(cache.folder / entry.file, cache.device, cache.options)
        check_sessions(cache.manifest, {GRAPH_NAME: self.session})
        self.cache, self.batch, self.src_len, self.index = cache, batch, src_len, 0
        spec, dims = entry.spec, {"batch": batch, "src_len": src_len}
        host = {t.name: np.zeros([dims.get(d, d) for d in t.shape], dtype=t.dtype) for t in (*spec.inputs, *spec.outputs)}
        self._host = host
        self.past = [host[t.name] for t in spec.inputs if t.name.startswith("past.")]  # (batch, heads, slots, head_dim)
        self.new = [host[t.name] for t in spec.outputs if t.name.startswith("new.")]  # (batch, heads, 1, head_dim)
        self.binding = self.session.io_binding()
        values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in host.items()}
        for name, value in values.items():
            if value.data_ptr() != host[name].ctypes.data:  # the in-place writes below rely on it
                raise RuntimeError(f"ORT copied {name} instead of wrapping it")
            (self.binding.bind_ortvalue_input if name in spec.input_names() else self.binding.bind_ortvalue_output)(
                name, value)
        encoded = [t.name for t in spec.inputs if t.name == "src_mask" or t.name.startswith("cross.")]
        self.slots = SimpleNamespace(encoder_host={n: host[n] for n in encoded}, encoder_outputs={n: values[n] for n in encoded})
        host["src_mask"][:, 0] = True  # idle rows attend to one (zero) position
        self._src_axis = {name: spec.tensor(name).shape.index("src_len") for name in encoded}
        self._rows = np.arange(batch)

    def step(self, tokens: np.ndarray, cache_len: np.ndarray) -> np.ndarray:
        """One decoder step of every row: tokens (batch,) at positions cache_len (batch,); next_ids (batch,)."""
        self._host["input_ids"][:, 0] = tokens
        self._host["cache_len"][:] = cache_len
        self.session.run_with_iobinding(self.binding)
        for past, new in zip(self.past, self.new):  # each row's keys/values into its slot cache_len[b]
            past[self._rows, :, cache_len, :] = new[:, :, 0, :]
        self.index += 1
        return self._host["next_ids"].copy()

    def logits(self) -> np.ndarray:
        return self._host["logits"].copy()  # (batch, tgt_vocab)


def greedy_in_rows(cache: StaticCache, sources: list[list[int]], steps: int) -> list[list[int]]:
    """Greedy ids of `sources` decoded as in-flight rows (open_rows), trimmed at EOS: how an export's
    checks prove that the server's rows decode like decoder.onnx."""
    from .decoding import source_batch, trim

    cfg = cache.config
    src = source_batch(sources, cfg)  # (batch, src_len)
    rows = open_rows(cache, len(sources), src.shape[1])
    rows.bind(list(range(len(sources))), src)
    tokens = np.full(len(sources), cfg.bos_id, dtype=np.int64)  # (batch,)
    chosen = []
    for step in range(steps):
        tokens = rows.step(tokens, np.full(len(sources), step, dtype=np.int64))
        chosen.append(tokens)
    return [trim(row, cfg.eos_id) for row in np.stack(chosen, axis=1).tolist()]  # (batch, steps) -> rows
