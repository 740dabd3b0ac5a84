"""The growing-cache decoder (decoder.onnx) on ONNX Runtime, as a runtime.decode.loop.DecoderCache.

Every tensor between steps is an OrtValue bound through IOBinding: on CUDA the past/present
caches, the cross keys/values and the logits stay on the GPU. Each step's `present.*` is rebound as
the next step's `past.*`, and a strategy (runtime.decode.loop) reads only what it needs of the step:
`next_ids` (rows,) for greedy decoding, the logits on the host (sampling, processors that need whole
rows), or each row's best candidates picked on the device (`top`, runtime.states.head.BeamHead: beam
search); beam search reorders the past rows on the device (`reorder`, runtime.states.reorder.RowGather).
Torch-free.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import cached_property

import numpy as np
import onnxruntime as ort

from ...config import TransformerConfig
from ..device import Device
from .head import BeamHead
from .positions import PastTrim, PositionPicker
from ..decode.processors import BiasKey
from .reorder import RowGather


def device_value(device: Device, array: np.ndarray) -> ort.OrtValue:
    """`array` copied into an OrtValue on `device`."""
    return ort.OrtValue.ortvalue_from_numpy(array, device.ort_type, device.index)


def kv_names(prefix: str, config: TransformerConfig, suffix: str = "") -> list[str]:
    """past.0.self.key, past.0.self.value, past.1.self.key, ... in the specs' order."""
    return [f"{prefix}.{i}.{suffix}{kv}" for i in range(config.n_decoder_layers) for kv in ("key", "value")]


class GrowingCache:
    """decoder.onnx: the past grows by one slot a step, rebound from the previous step's present."""

    lock = nullcontext()  # nothing is shared between calls: each has its own binding

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, device: Device,
                 config: TransformerConfig, cache_dtype: str, per_source: bool, source_name: str,
                 positions: bool = False):
        """`per_source`: the decoder takes the encoder's outputs once per source (Manifest.cross_per_source);
        `source_name`: the encoder's input (Manifest.encoder_input); `positions`: the decoder returns
        earlier_logits (export.specs.EARLIER_LOGITS: it can check drafted tokens, runtime.decode.speculative)."""
        self.encoder, self.decoder, self.device, self.config = encoder, decoder, device, config
        self.per_source, self.source_name, self.positions = per_source, source_name, positions
        self.cache_dtype = np.dtype(cache_dtype)
        self.past_names = kv_names("past", config, "self.")
        self.present_names = kv_names("present", config, "self.")
        self.cross_names = kv_names("cross", config)

    def start(self, src: np.ndarray, expand: int = 1) -> "GrowingState":
        """Encode once for `expand` decoder rows per source (beams, samples). A decoder that takes the
        encoder's outputs per source keeps them as they are: its rows attend to them by source, reading
        a source's cross keys/values once per step rather than once per beam. Older exports get each
        source's outputs repeated `expand` times on the device."""
        encoded = self._encode(src)
        if expand > 1 and not self.per_source:
            index = np.repeat(np.arange(src.shape[0]), expand)  # (batch * expand,): row i*expand+j is source i
            encoded = dict(zip(encoded, self.gather(list(encoded.values()), index)))
        return GrowingState(self, encoded, src.shape[0] * expand)

    @cached_property
    def gather(self) -> RowGather:
        return RowGather(self.device, self.helper_threads)

    @cached_property
    def head(self) -> BeamHead:
        return BeamHead(self.device, self.helper_threads)

    @cached_property
    def picker(self) -> PositionPicker:
        return PositionPicker(self.device, self.helper_threads)

    @cached_property
    def trim(self) -> PastTrim:
        return PastTrim(self.device, self.helper_threads)

    @property
    def helper_threads(self) -> int:
        """The decoder's intra-op threads (0: ORT's default), for the gather and head sessions."""
        return self.decoder.get_session_options().intra_op_num_threads

    def _encode(self, src: np.ndarray) -> dict[str, ort.OrtValue]:
        """Run the encoder once; its outputs stay on the device as OrtValues."""
        binding = self.encoder.io_binding()
        binding.bind_ortvalue_input(self.source_name, device_value(self.device, src))
        names = [o.name for o in self.encoder.get_outputs()]
        for name in names:
            binding.bind_output(name, self.device.ort_type, self.device.index)
        self.encoder.run_with_iobinding(binding)
        return dict(zip(names, binding.get_outputs()))


class GrowingState:
    """One call's binding (a runtime.decode.loop.DecoderState): encoder outputs bound once, past/present
    rebound every step, every output left on the device until a strategy reads it."""

    device_top = True

    def __init__(self, cache: GrowingCache, encoded: dict[str, ort.OrtValue], rows: int):
        """`rows`: the decoder rows (sources * rows per source)."""
        cfg, self.cache = cache.config, cache
        # A per-call binding keeps concurrent requests on one session independent.
        self.binding = cache.decoder.io_binding()
        self.binding.bind_ortvalue_input("src_mask", encoded["src_mask"])
        for name in cache.cross_names:
            self.binding.bind_ortvalue_input(name, encoded[name])
        empty = np.zeros((rows, cfg.n_heads, 0, cfg.head_dim), cache.cache_dtype)  # past_len = 0
        self.past = [device_value(cache.device, empty)] * len(cache.past_names)
        self.outputs: dict[str, ort.OrtValue] = {}
        self.length = 0  # positions in the past
        self.fed = 0  # ids the last step fed

    def step(self, tokens: np.ndarray) -> None:
        self.feed(tokens.reshape(-1, 1))  # (rows, tgt_len=1)

    def feed(self, tokens: np.ndarray) -> None:
        """Feed each row several ids (rows, n) in one decoder step (a forced prefix, drafted ids): next_ids and
        logits are then the last position's, and `position_ids` every position's."""
        cache, binding, device = self.cache, self.binding, self.cache.device
        binding.bind_ortvalue_input("input_ids", device_value(device, np.ascontiguousarray(tokens, np.int64)))
        for name, value in zip(cache.past_names, self.past):
            binding.bind_ortvalue_input(name, value)
        binding.clear_binding_outputs()
        # earlier_logits only where a step feeds several ids (a check): a plain step's are (rows, 0, vocab), and
        # binding and wrapping them cost it ~5 µs for nothing (decode-core's trace); ORT runs with it unbound.
        positions = ("earlier_logits",) if cache.positions and tokens.shape[1] > 1 else ()
        for name in ("logits", "next_ids", *cache.present_names, *positions):
            binding.bind_output(name, device.ort_type, device.index)
        cache.decoder.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        self.outputs = {"logits": outputs[0], "next_ids": outputs[1], **dict(zip(positions, outputs[-1:]))}
        self.past = outputs[2:2 + len(cache.present_names)]  # present.* of this step: the next step's past.*
        self.length += tokens.shape[1]
        self.fed = tokens.shape[1]

    def position_ids(self, bias: np.ndarray) -> np.ndarray:
        """(rows, n) the greedy id after each id the last step fed, under `bias` (vocab,) (the model's bans),
        picked on the device (runtime.states.positions); needs a decoder with earlier_logits."""
        return self.cache.picker(self.outputs["earlier_logits"], self.outputs["logits"], bias)

    def position_logits(self) -> np.ndarray:
        """(rows, n, tgt_vocab) the logits after each of the n ids the last step fed, on the host (a speculative
        check whose processors read whole rows, runtime.decode.checking); n > 1 needs earlier_logits."""
        last = self.outputs["logits"].numpy()[:, None]
        if self.fed == 1:
            return last
        return np.concatenate([self.outputs["earlier_logits"].numpy(), last], axis=1)

    def truncate(self, length: int) -> None:
        """Keep the first `length` positions of the past (a speculative step's rejected ids leave it)."""
        if length < self.length:
            self.past, self.length = self.cache.trim(self.past, length), length

    def next_ids(self) -> np.ndarray:
        """Greedy: only next_ids (rows,) crosses to the host."""
        return self.outputs["next_ids"].numpy()

    def logits(self) -> np.ndarray:
        """The logits (rows, tgt_vocab) cross instead (on CPU they are host memory already)."""
        return self.outputs["logits"].numpy()

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        """Beam search: each row's `width` best log-probabilities + bias (rows, width) float64 and their
        ids, picked on the device (runtime.states.head); the logits stay there."""
        return self.cache.head.pick(self.outputs["logits"], bias, width, renormalize)

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Beam search: row r of the past becomes row beam_idx[r], gathered on the device."""
        self.past = self.cache.gather(self.past, beam_idx)
