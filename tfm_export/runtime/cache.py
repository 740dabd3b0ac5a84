"""The growing-cache decoder (decoder.onnx) on ONNX Runtime, as a runtime.decoding.DecoderCache.

Every tensor between steps is an OrtValue bound through IOBinding: on CUDA the past/present
caches, the cross keys/values and the logits stay on the GPU and only `next_ids` (batch,) crosses
to the host each step. Each step's `present.*` is rebound as the next step's `past.*`. Torch-free.

For runtime.search the same state also hands the logits to the host (`logits`: sampling, processors
that need whole rows), or keeps them on the device and returns only each row's best candidates
(`top`, runtime.head.BeamHead: beam search), and reorders its past rows on the device (`reorder`,
runtime.reorder.RowGather).
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import cached_property

import numpy as np
import onnxruntime as ort

from ..config import TransformerConfig
from .device import Device
from .head import BeamHead
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
                 config: TransformerConfig, cache_dtype: str, per_source: bool = False):
        """`per_source`: the decoder takes the encoder's outputs once per source (Manifest.cross_per_source)."""
        self.encoder, self.decoder, self.device, self.config = encoder, decoder, device, config
        self.per_source = per_source
        self.cache_dtype = np.dtype(cache_dtype)
        self.past_names = kv_names("past", config, "self.")
        self.present_names = kv_names("present", config, "self.")
        self.cross_names = kv_names("cross", config)

    def start(self, src: np.ndarray) -> "_GrowingState":
        return _GrowingState(self, self._encode(src), src.shape[0])

    def start_search(self, src: np.ndarray, expand: int) -> "_GrowingState":
        """Encode once for `expand` decoder rows per source (beams, samples). A decoder that takes the
        encoder's outputs per source keeps them as they are: its rows attend to them by source, reading
        a source's cross keys/values once per step rather than once per beam. Older exports get each
        source's outputs repeated `expand` times on the device."""
        encoded = self._encode(src)
        if expand > 1 and not self.per_source:
            index = np.repeat(np.arange(src.shape[0]), expand)  # (batch * expand,): row i*expand+j is source i
            encoded = dict(zip(encoded, self.gather(list(encoded.values()), index)))
        return _GrowingState(self, encoded, src.shape[0] * expand)

    @cached_property
    def gather(self) -> RowGather:
        return RowGather(self.device, self.helper_threads)

    @cached_property
    def head(self) -> BeamHead:
        return BeamHead(self.device, self.helper_threads)

    @property
    def helper_threads(self) -> int:
        """The decoder's intra-op threads (0: ORT's default), for the gather and head sessions."""
        return self.decoder.get_session_options().intra_op_num_threads

    def _encode(self, src: np.ndarray) -> dict[str, ort.OrtValue]:
        """Run the encoder once; its outputs stay on the device as OrtValues."""
        binding = self.encoder.io_binding()
        binding.bind_ortvalue_input("src_ids", device_value(self.device, src))
        names = [o.name for o in self.encoder.get_outputs()]
        for name in names:
            binding.bind_output(name, self.device.ort_type, self.device.index)
        self.encoder.run_with_iobinding(binding)
        return dict(zip(names, binding.get_outputs()))


class _GrowingState:
    """One call's binding: encoder outputs bound once, past/present rebound every step."""

    def __init__(self, cache: GrowingCache, encoded: dict[str, ort.OrtValue], batch: int):
        """`batch`: the decoder rows (sources * rows per source)."""
        cfg, self.cache = cache.config, cache
        # A per-call binding keeps concurrent requests on one session independent.
        self.binding = cache.decoder.io_binding()
        self.binding.bind_ortvalue_input("src_mask", encoded["src_mask"])
        for name in cache.cross_names:
            self.binding.bind_ortvalue_input(name, encoded[name])
        empty = np.zeros((batch, cfg.n_heads, 0, cfg.head_dim), cache.cache_dtype)  # past_len = 0
        self.past = [device_value(cache.device, empty)] * len(cache.past_names)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Greedy: only next_ids (batch,) crosses to the host."""
        return self._run(tokens, on_host="next_ids")[1].numpy()  # (batch,)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """Search: the logits (rows, tgt_vocab) cross instead (on CPU they are host memory already)."""
        return self._run(tokens, on_host="logits")[0].numpy()

    def top(self, tokens: np.ndarray, bias: np.ndarray, width: int, renormalize: bool = False
            ) -> tuple[np.ndarray, np.ndarray]:
        """Beam search: each row's `width` best log-probabilities + bias (rows, width) float64 and their
        ids, picked on the device (runtime.head); the logits stay there."""
        return self.cache.head(self._run(tokens, on_host=None)[0], bias, width, renormalize)

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Beam search: row r of the past becomes row beam_idx[r], gathered on the device."""
        self.past = self.cache.gather(self.past, beam_idx)

    def _run(self, tokens: np.ndarray, on_host: str | None) -> list[ort.OrtValue]:
        cache, binding, device = self.cache, self.binding, self.cache.device
        binding.bind_ortvalue_input("input_ids", device_value(device, tokens))
        for name, value in zip(cache.past_names, self.past):
            binding.bind_ortvalue_input(name, value)
        binding.clear_binding_outputs()
        for name in ("logits", "next_ids"):
            if name == on_host:
                binding.bind_output(name, "cpu")  # the one tensor that crosses to the host
            else:
                binding.bind_output(name, device.ort_type, device.index)
        for name in cache.present_names:
            binding.bind_output(name, device.ort_type, device.index)
        cache.decoder.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        self.past = outputs[2:]  # present.* of this step: the next step's past.*
        return outputs
