"""In-flight rows over decoder_static.onnx: `RowBatch`, the rows requests join and leave one at a time.

A RowBatch owns one bound buffer set of a runtime.static.StaticCache (its two cache sets, per-row
`cache_len`) and steps every row together; runtime.rows.HostRows gives the same interface over
decoder_rows.onnx on CPU. Beam groups pick on the device (runtime.head over some rows) and reorder
their rows between steps (`reorder`). On CUDA each binding is a CUDA graph, captured by the thread
that steps (`capture`). Torch-free.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from .head import BeamHead
from .processors import BiasKey, bias_array
from .reorder import RowGather
from .static import StaticCache

# Runs of each binding before its graph is captured and replayed (ORT runs a graph id uncaptured first).
CAPTURE_RUNS = 3
MAX_BIASES = 64  # in-flight beam heads: bias arrays kept by processors.bias_key (a few per generation config)


class RowBatch:
    """`batch` rows of one bound buffer set (src_len fixed) that requests join and leave one at a time.

    The caller (serve.batcher's decode thread, the only user of these buffers) binds a request into a
    free row with `bind`, then steps every row together with per-row `cache_len`: a row that just
    joined is at 0 while its neighbours are deep into their targets. Slots a new row has not written
    yet still hold the previous request's values; the graph masks every slot past `cache_len[row]`.
    """

    def __init__(self, cache: StaticCache, batch: int, src_len: int):
        self.cache, self.batch, self.src_len = cache, batch, src_len
        self._head, self._biases = row_head(cache), {}
        self._gather = RowGather(cache.device, cache.options.intra_op_threads or 0)  # device reorders
        self.slots = cache._allocate(batch, src_len)  # owned here, outside the call-level LRU
        self.slots.encoder_host["src_mask"][:, 0] = True  # idle rows attend to one (zero) position
        self._push(list(self.slots.encoder_host))
        self.index = 0  # steps run: step s reads cache set s % 2 and writes the other
        # The src_len axis of each encoder output (src_mask: 1, cross.*: 2), where a bound source is written.
        self._src_axis = {name: cache._spec.tensor(name).shape.index("src_len") for name in self.slots.encoder_host}

    def capture(self) -> None:
        """CUDA: capture both bindings' graphs now, every row idle; call it on the thread that will step
        (ORT keeps a thread's graphs in that thread's context), before other threads use the GPU.

        A capture forbids CUDA work from any other thread of the process (cudaErrorStreamCaptureUnsupported):
        captured on the first steps of a running server, it failed when the joiner encoded a source at
        that moment (seen on an H100). The idle steps write slot 0 of every row, which a joining row
        overwrites in its own first step before it reads it. On CPU nothing is captured."""
        if not self.cache.capture:
            return
        tokens, cache_len = np.zeros(self.batch, np.int64), np.zeros(self.batch, np.int64)
        for _ in range(2 * CAPTURE_RUNS):
            self.step(tokens, cache_len)

    def bind(self, rows: list[int], src: np.ndarray) -> None:
        """Encode `src` (len(rows), L <= src_len) at its own length L and write it into `rows`."""
        self.write(rows, self.encode(src))

    def encode(self, src: np.ndarray, encoder: ort.InferenceSession | None = None) -> list[np.ndarray]:
        """The encoder outputs of `src` (rows, L) on the host, in `write`'s order. Touches no row, so
        another thread may call it while this one steps (`encoder`: a session of its own for that)."""
        return (encoder or self.cache.encoder).run(list(self.slots.encoder_host), {"src_ids": src})

    def write(self, rows: list[int], encoded: list[np.ndarray]) -> None:
        """Write `encode`'s outputs into `rows`, between two steps.

        Positions past the source's length L get src_mask False: cross attention gives them weight
        exactly 0 whatever they hold, so the tokens equal those of a source padded to src_len, and
        the encoder did no work for the padding (on a max_len 256 model that was most of the cost of
        joining).
        """
        names = list(self.slots.encoder_host)
        for name, value in zip(names, encoded):  # (rows, ..., L, ...)
            axis = self._src_axis[name]
            written = (rows, *[slice(None)] * (axis - 1), slice(0, value.shape[axis]))
            self.slots.encoder_host[name][written] = value
        self.slots.encoder_host["src_mask"][rows, encoded[names.index("src_mask")].shape[1]:] = False
        self._push(names)

    def release(self, row: int) -> None:
        """`row` left: nothing to do, what it holds is masked or overwritten by the next `write`."""

    def _push(self, names: list[str]) -> None:
        """Make host writes visible to the decoder: nothing to do where the OrtValue wraps the array."""
        for name in names:
            value, array = self.slots.encoder_outputs[name], self.slots.encoder_host[name]
            if value.data_ptr() != array.ctypes.data:
                value.update_inplace(array)

    def step(self, tokens: np.ndarray, cache_len: np.ndarray) -> np.ndarray:
        """One decoder step of every row: tokens (batch,) at positions cache_len (batch,); next_ids (batch,)."""
        slots, parity = self.slots, self.index % 2
        slots.input_ids.update_inplace(tokens.reshape(self.batch, 1))
        slots.cache_len.update_inplace(cache_len)
        self.cache.session.run_with_iobinding(slots.bindings[parity], slots.run_options[parity])
        self.index += 1
        return slots.next_ids.numpy()

    def logits(self) -> np.ndarray:
        """The last step's logits (batch, tgt_vocab), copied to the host."""
        return self.slots.logits.numpy()

    def logits_value(self) -> ort.OrtValue:
        """The last step's logits (batch, tgt_vocab) where the decoder wrote them (no copy)."""
        return self.slots.logits

    def top(self, rows: np.ndarray, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        """Beam search's candidates of some rows (n,) of the last step: each row's `width` best
        log-probabilities under `bias` and their ids (n, width), picked on the device (runtime.head)."""
        if bias not in self._biases:
            if len(self._biases) >= MAX_BIASES:
                self._biases.clear()
            self._biases[bias] = bias_array(self.cache.config.tgt_vocab_size, bias)
        return self._head(self.logits_value(), self._biases[bias], width, renormalize, rows=rows)

    def reorder(self, rows: list[int], beam_idx: np.ndarray, filled: int) -> None:
        """A beam search's step: `rows` take the caches of rows[beam_idx], slots [0, filled) (the cache
        set the next step reads). On CPU a gather of those rows in the host arrays the OrtValues wrap.

        On the device, one Gather of every row into the other cache set, which is scratch now: a step
        rewrites every slot of the set it writes (model.kv_cache.SlotCache), so the next step may as
        well read the gathered set. The parity flips instead of copying back, and both bindings keep
        their buffers, so their CUDA graphs replay unchanged. (Before: each cache crossed to the host
        and back, the whole batch every step.)"""
        parity, source = self.index % 2, np.asarray(rows)[beam_idx]
        if self.slots.caches_host is not None:
            gather_rows(self.slots.caches_host[parity], rows, source, filled)
            return
        index = np.arange(self.batch)  # (batch,): rows outside `rows` keep their own cache
        index[np.asarray(rows)] = source
        self._gather(self.slots.caches[parity], index, out=self.slots.caches[1 - parity])
        self.index += 1  # the next step reads set 1 - parity (and writes set parity)


def row_head(cache: StaticCache) -> BeamHead:
    """The beam head of a cache's in-flight rows, on the decoder's threads (as GrowingCache.head)."""
    return BeamHead(cache.device, cache.options.intra_op_threads or 0)


def gather_rows(caches: list[np.ndarray], rows: list[int], source: np.ndarray, filled: int) -> None:
    """In each cache (batch, heads, slots, head_dim): rows[j] becomes source[j], slots [0, filled) only
    (rows that continue their own cache are not copied)."""
    rows = np.asarray(rows)
    moved = rows != source
    rows, source = rows[moved], source[moved]
    for cache in caches:
        cache[rows, :, :filled] = cache[source, :, :filled]  # the right side is a copy: no overlap issue
