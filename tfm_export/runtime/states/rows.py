"""Decoder rows over a fixed set of cache slots: `Rows`, and `RowBatch` over decoder_static.onnx. Torch-free.

A `Rows` is a runtime.decode.loop.DecoderState whose rows can be bound one at a time: each row keeps
its own position (`positions`, the graph's per-row `cache_len`), so a row that just joined is at 0
while its neighbours are deep into their targets. A direct call binds all its rows at once
(runtime.states.static.StaticCache.start); the server's in-flight scheduler (runtime.inflight) binds a
request into free rows between two steps and releases them when it ends. Beam search picks on the
device (runtime.states.head, over some rows: `top(..., rows=)`) and reorders its rows between steps.

Two siblings implement the storage: `RowBatch` here (decoder_static.onnx: two cache sets swapped
every step, replayable as CUDA graphs, captured by the thread that steps) and runtime.states.host_rows.HostRows
(decoder_rows.onnx on CPU: one cache set written in place).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from ..decode.processors import BiasKey

# Runs of each binding before its graph is captured and replayed (ORT runs a graph id uncaptured first).
CAPTURE_RUNS = 3


class Rows:
    """What both row kinds share: positions, binding, the device head and the beam reorder's rows."""

    device_top = True

    def __init__(self, cache, batch: int, src_len: int, encoded_names: list[str]):
        """`cache`: the runtime.states.static.StaticCache of the export (its encoder, device, options)."""
        self.cache, self.batch, self.src_len, self.encoded_names = cache, batch, src_len, encoded_names
        self.head = cache.head  # shared: its sessions are made once per export
        self.positions = np.zeros(batch, dtype=np.int64)  # (batch,) slots each row has filled (cache_len)
        self.bound = np.zeros(batch, dtype=bool)  # (batch,) rows that hold a source

    def encode(self, src: np.ndarray, encoder: ort.InferenceSession | None = None) -> list[np.ndarray]:
        """The encoder outputs of `src` (rows, L) on the host, in `write`'s order. Touches no row, so
        another thread may call it while this one steps (`encoder`: a session of its own for that)."""
        return (encoder or self.cache.encoder).run(self.encoded_names, {self.cache.source_name: src})

    def bind(self, rows: list[int], src: np.ndarray) -> None:
        """Encode `src` (len(rows), L <= src_len) at its own length L and write it into `rows`."""
        self.write(rows, self.encode(src))

    def write(self, rows: list[int], encoded: list[np.ndarray]) -> None:
        """Write `encode`'s outputs into `rows` between two steps; they start at position 0.

        Positions past the source's length L get src_mask False: cross attention gives them weight
        exactly 0 whatever they hold, so the tokens equal those of a source padded to src_len, and
        the encoder did no work for the padding (on a max_len 256 model that was most of the cost of
        joining)."""
        self.positions[rows], self.bound[rows] = 0, True
        self._store(rows, encoded)

    def release(self, row: int) -> None:
        """`row` left: it idles at position 0 (what it holds is masked or overwritten by the next `write`)."""
        self.positions[row], self.bound[row] = 0, False
        self._free(row)

    def step(self, tokens: np.ndarray) -> None:
        """One decoder step of every row: tokens (batch,) at each row's position; bound rows move on."""
        self._run(np.ascontiguousarray(tokens, dtype=np.int64))
        self.positions[self.bound] += 1

    def top(self, bias: BiasKey, width: int, renormalize: bool, rows: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """Beam search's candidates of some rows (n,) (default: all) of the last step: each row's `width`
        best log-probabilities under `bias` and their ids (n, width), picked on the device."""
        return self.head.pick(self.logits_value(), bias, width, renormalize, rows)

    def reorder(self, beam_idx: np.ndarray, rows: list[int] | None = None) -> None:
        """A beam search's step: `rows` (default: all) take the caches of rows[beam_idx], the slots they
        have filled (a row's later slots are unread)."""
        rows = list(range(self.batch)) if rows is None else rows
        self._gather(rows, np.asarray(rows)[beam_idx], int(self.positions[rows].max()))

    def capture(self) -> None:
        """Capture the step's CUDA graphs now (RowBatch on CUDA); nothing elsewhere."""

    # The storage: each sibling's own.
    def _store(self, rows: list[int], encoded: list[np.ndarray]) -> None: ...

    def _free(self, row: int) -> None: ...

    def _run(self, tokens: np.ndarray) -> None: ...

    def _gather(self, rows: list[int], source: np.ndarray, filled: int) -> None: ...

    def logits_value(self) -> ort.OrtValue: ...


class RowBatch(Rows):
    """Rows over one bound buffer set of decoder_static.onnx (runtime.states.static.StaticCache.allocate): its
    two cache sets, `input_ids`, `cache_len`, `logits` and `next_ids`, bound once, so that on CUDA each
    of the two bindings is one CUDA graph. `slots`: a direct call's buffers (the cache's LRU); None:
    buffers of its own (the server's rows, idle until bound)."""

    def __init__(self, cache, batch: int, src_len: int, slots=None):
        own = slots is None
        self.slots = cache.allocate(batch, src_len) if own else slots
        super().__init__(cache, batch, src_len, list(self.slots.encoder_host))
        self._device_gather = cache.gather
        self.index = 0  # step s reads cache set s % 2 and writes the other (a device reorder flips it)
        # The src_len axis of each encoder output (src_mask: 1, cross.*: 2), where a bound source is written.
        self._src_axis = {name: cache.spec.tensor(name).shape.index("src_len") for name in self.encoded_names}
        # Exports from before per-row positions take one cache_len (1,) for every row (direct calls only).
        self._positions = self.positions if cache.spec.tensor("cache_len").shape[0] == "batch" else self.positions[:1]
        if own:
            self.slots.encoder_host["src_mask"][:, 0] = True  # idle rows attend to one (zero) position
            self._push(self.encoded_names)

    def start(self, src: np.ndarray, expand: int) -> "RowBatch":
        """A direct call: every row bound, source i in rows i*expand .. i*expand + expand-1."""
        self.positions[:], self.bound[:] = 0, True
        if expand == 1:  # written straight into the decoder's bound inputs, on the device
            binding = self.cache.encoder.io_binding()
            binding.bind_ortvalue_input(self.cache.source_name, self.cache.device_value(src))
            for name, value in self.slots.encoder_outputs.items():
                binding.bind_ortvalue_output(name, value)
            self.cache.encoder.run_with_iobinding(binding)
        else:
            self.write(list(range(self.batch)), [np.repeat(v, expand, axis=0) for v in self.encode(src)])
        return self

    def capture(self) -> None:
        """CUDA: capture both bindings' graphs now, every row idle; call it on the thread that will step
        (ORT keeps a thread's graphs in that thread's context), before other threads use the GPU.

        A capture forbids CUDA work from any other thread of the process (cudaErrorStreamCaptureUnsupported):
        captured on the first steps of a running server, it failed when the joiner encoded a source at
        that moment (seen on an H100). The idle steps write slot 0 of every row, which a joining row
        overwrites in its own first step before it reads it. On CPU nothing is captured."""
        if not self.cache.capture:
            return
        for _ in range(2 * CAPTURE_RUNS):
            self.step(np.zeros(self.batch, np.int64))

    def _store(self, rows: list[int], encoded: list[np.ndarray]) -> None:
        for name, value in zip(self.encoded_names, encoded):  # (rows, ..., L, ...)
            axis = self._src_axis[name]
            written = (rows, *[slice(None)] * (axis - 1), slice(0, value.shape[axis]))
            self.slots.encoder_host[name][written] = value
        self.slots.encoder_host["src_mask"][rows, encoded[self.encoded_names.index("src_mask")].shape[1]:] = False
        self._push(self.encoded_names)

    def _push(self, names: list[str]) -> None:
        """Make host writes visible to the decoder: nothing to do where the OrtValue wraps the array."""
        for name in names:
            value, array = self.slots.encoder_outputs[name], self.slots.encoder_host[name]
            if value.data_ptr() != array.ctypes.data:
                value.update_inplace(array)

    def _run(self, tokens: np.ndarray) -> None:
        slots, parity = self.slots, self.index % 2
        slots.input_ids.update_inplace(tokens.reshape(self.batch, 1))
        slots.cache_len.update_inplace(self._positions)  # (batch,), or (1,) in older exports
        self.cache.session.run_with_iobinding(slots.bindings[parity], slots.run_options[parity])
        self.index += 1

    def next_ids(self) -> np.ndarray:
        """(batch,): the one tensor that crosses to the host in greedy decoding."""
        return self.slots.next_ids.numpy()

    def logits(self) -> np.ndarray:
        """The last step's logits (batch, tgt_vocab), copied to the host."""
        return self.slots.logits.numpy()

    def logits_value(self) -> ort.OrtValue:
        """The last step's logits (batch, tgt_vocab) where the decoder wrote them (no copy)."""
        return self.slots.logits

    def _gather(self, rows: list[int], source: np.ndarray, filled: int) -> None:
        """On CPU a gather of those rows in the host arrays the OrtValues wrap.

        On the device, one Gather of every row into the other cache set, which is scratch now: a step
        rewrites every slot of the set it writes (model.kv_cache.SlotCache), so the next step may as
        well read the gathered set. The parity flips instead of copying back, and both bindings keep
        their buffers, so their CUDA graphs replay unchanged. (Before: each cache crossed to the host
        and back, the whole batch every step.)"""
        parity = self.index % 2
        if self.slots.caches_host is not None:
            gather_rows(self.slots.caches_host[parity], rows, source, filled)
            return
        index = np.arange(self.batch)  # (batch,): rows outside `rows` keep their own cache
        index[np.asarray(rows)] = source
        self._device_gather(self.slots.caches[parity], index, out=self.slots.caches[1 - parity])
        self.index += 1  # the next step reads set 1 - parity (and writes set parity)


def gather_rows(caches: list[np.ndarray], rows: list[int], source: np.ndarray, filled: int) -> None:
    """In each cache (batch, heads, slots, head_dim): rows[j] becomes source[j], slots [0, filled) only
    (rows that continue their own cache are not copied)."""
    rows = np.asarray(rows)
    moved = rows != source
    rows, source = rows[moved], source[moved]
    for cache in caches:
        cache[rows, :, :filled] = cache[source, :, :filled]  # the right side is a copy: no overlap issue
