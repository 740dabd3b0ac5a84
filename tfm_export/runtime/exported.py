"""Greedy decoding of an export folder on ONNX Runtime, with the KV cache kept on the device.

Every tensor between steps is an OrtValue bound through IOBinding: on CUDA the past/present
caches, the cross keys/values and the logits stay on the GPU and only `next_ids` (batch,) crosses
to the host each step. The same code runs on CPU. Torch-free.
"""

from __future__ import annotations

import logging
import os
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnxruntime as ort

from ..config import TransformerConfig
from .decoding import GreedyRows, pad_batch, resolve_max_new_tokens, trim
from ..errors import InputError
from ..manifest import Manifest, load_manifest
from .checks import check_sessions
from .device import Device, RuntimeOptions, open_sessions
from .static import GRAPH_NAME as STATIC_GRAPH
from .static import open_static

log = logging.getLogger(__name__)


class DecodeTimings:
    """Wall-clock times of one generate call (benchmarks pass one in; normal calls do not)."""

    def __init__(self) -> None:
        self.encoder_s = 0.0
        self.steps_s: list[float] = []


class ExportedModel:
    """An opened export folder: `generate_ids` for token ids, `translate` for text."""

    def __init__(self, folder: Path, manifest: Manifest, device: Device,
                 sessions: dict[str, ort.InferenceSession]):
        self.folder, self.manifest, self.device = folder, manifest, device
        self.config: TransformerConfig = manifest.config
        self.encoder, self.decoder = sessions["encoder"], sessions["decoder"]
        self._cache_dtype = np.dtype(manifest.cache_dtype)
        layers = range(self.config.n_decoder_layers)
        self._past_names = [f"past.{i}.self.{kv}" for i in layers for kv in ("key", "value")]
        self._cross_names = [f"cross.{i}.{kv}" for i in layers for kv in ("key", "value")]
        self._present_names = [f"present.{i}.self.{kv}" for i in layers for kv in ("key", "value")]
        self.static: Any = None  # a runtime.static.StaticDecoder when open_export chose it (RuntimeOptions.cuda_graph)

    @cached_property
    def tokenizer(self) -> Any:
        """The manifest's tokenizer (InputError when the export has none)."""
        if not self.manifest.tokenizer:
            raise InputError("this export has no tokenizer; pass token ids (--ids) instead of text")
        from ..text.tokenizer import tokenizer_from_dict

        return tokenizer_from_dict(self.manifest.tokenizer, self.folder)

    def translate(self, texts: Sequence[str], max_new_tokens: int | None = None) -> list[str]:
        """Encode texts with the manifest's tokenizer, decode greedily, return texts."""
        sources = [self.tokenizer.encode(t) for t in texts]
        return [self.tokenizer.decode(ids) for ids in self.generate_ids(sources, max_new_tokens)]

    def generate_ids(self, sources: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                     stop_at_eos: bool = True, timings: DecodeTimings | None = None) -> list[list[int]]:
        """Greedy decoding of a batch of id lists (padded here); rows come back without BOS/EOS."""
        cfg = self.config
        src = np.asarray(pad_batch(sources, cfg.src_pad_id), dtype=np.int64)  # (batch, src_len)
        self._check_source(src)
        steps = resolve_max_new_tokens(max_new_tokens, 1, cfg.max_len)
        if self.static is not None:
            rows = self.static.generate(self.encoder, src, steps, stop_at_eos, timings)
        else:
            start = time.perf_counter()
            state = self._encode(src)
            if timings is not None:
                timings.encoder_s = time.perf_counter() - start
            rows = self._decode_loop(state, src.shape[0], steps, stop_at_eos, timings)
        return [trim(r, cfg.eos_id) if stop_at_eos else r for r in rows]

    def _check_source(self, src: np.ndarray) -> None:
        cfg = self.config
        bad = src[(src < 0) | (src >= cfg.src_vocab_size)]
        if bad.size:
            raise InputError(f"source id {int(bad[0])} is out of range for a vocabulary of "
                             f"{cfg.src_vocab_size} ids")
        if src.shape[1] > cfg.max_len:
            raise InputError(f"source length {src.shape[1]} exceeds the model's max_len ({cfg.max_len}); "
                             f"shorten or split the input")

    def _value(self, array: np.ndarray) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(array, self.device.ort_type, self.device.index)

    def _encode(self, src: np.ndarray) -> dict[str, ort.OrtValue]:
        """Run the encoder once; its outputs stay on the device as OrtValues."""
        binding = self.encoder.io_binding()
        binding.bind_ortvalue_input("src_ids", self._value(src))
        names = [o.name for o in self.encoder.get_outputs()]
        for name in names:
            binding.bind_output(name, self.device.ort_type, self.device.index)
        self.encoder.run_with_iobinding(binding)
        return dict(zip(names, binding.get_outputs()))

    def _decode_loop(self, state: dict[str, ort.OrtValue], batch: int, steps: int, stop_at_eos: bool,
                     timings: DecodeTimings | None) -> list[list[int]]:
        cfg = self.config
        # A per-call binding keeps concurrent requests on one session independent.
        binding = self.decoder.io_binding()
        binding.bind_ortvalue_input("src_mask", state["src_mask"])
        for name in self._cross_names:
            binding.bind_ortvalue_input(name, state[name])
        empty = self._value(np.zeros((batch, cfg.n_heads, 0, cfg.head_dim), self._cache_dtype))
        past = [empty] * len(self._past_names)  # (batch, heads, past_len=0, head_dim)
        tokens = np.full((batch, 1), cfg.bos_id, dtype=np.int64)  # (batch, tgt_len=1)
        rows = GreedyRows(batch, steps, cfg.eos_id, cfg.tgt_pad_id, stop_at_eos)
        for _ in range(steps):
            start = time.perf_counter() if timings is not None else 0.0
            binding.bind_ortvalue_input("input_ids", self._value(tokens))
            for name, value in zip(self._past_names, past):
                binding.bind_ortvalue_input(name, value)
            binding.clear_binding_outputs()
            binding.bind_output("logits", self.device.ort_type, self.device.index)
            binding.bind_output("next_ids", "cpu")  # the one tensor that crosses to the host
            for name in self._present_names:
                binding.bind_output(name, self.device.ort_type, self.device.index)
            self.decoder.run_with_iobinding(binding)
            outputs = binding.get_outputs()
            next_ids = rows.add(outputs[1].numpy())  # (batch,)
            past = outputs[2:]
            if timings is not None:
                timings.steps_s.append(time.perf_counter() - start)
            if rows.finished:
                break
            tokens = next_ids.reshape(batch, 1)  # (batch, tgt_len=1)
        return rows.rows()


def uses_static_decoder(options: RuntimeOptions, device: Device, manifest: Manifest) -> bool:
    """RuntimeOptions.cuda_graph, with None resolved: on CUDA when the export has a static decoder."""
    if options.cuda_graph is None:
        return device.ort_type == "cuda" and STATIC_GRAPH in manifest.graphs
    return options.cuda_graph


def open_export(folder: str | os.PathLike, device: str = "auto", options: RuntimeOptions | None = None,
                verify: bool = True, manifest: Manifest | None = None) -> ExportedModel:
    """Open an export folder (manifest and hashes checked unless `verify=False`) on `device`.

    `device`: cpu, cuda, cuda:N or auto (CUDA when usable, else CPU). `manifest`: the folder's, when the
    caller holds it already (the exporter validates before writing it); then nothing is re-read.
    """
    folder = Path(folder)
    manifest = manifest or load_manifest(folder, verify_hashes=verify)
    paths = {name: folder / g.file for name, g in manifest.graphs.items() if name in ("encoder", "decoder")}
    options = options or RuntimeOptions()
    chosen, sessions = open_sessions(paths, device, options)
    check_sessions(manifest, sessions)
    log.info("opened %s on %s", folder, chosen.name)
    model = ExportedModel(folder, manifest, chosen, sessions)
    if uses_static_decoder(options, chosen, manifest):
        model.static = open_static(folder, manifest, model.config, chosen, options)
    return model
