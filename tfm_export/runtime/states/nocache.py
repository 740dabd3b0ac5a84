"""Exports of a user's own module (export.module_export): a decoder without a cache, and encoder-only
models. Torch-free.

A module export has `encoder.onnx` (`src_ids`, `src_mask` -> its outputs: `memory` for a seq2seq
model) and, for a seq2seq model, `decoder_nocache.onnx` (`tgt_ids (batch, tgt_len)`, `memory`,
`src_mask` -> `logits (batch, tgt_vocab)` of the last position): the decoder reads the whole prefix
every step, as the user's own `decode` does. `NoCacheCache` / `NoCacheState` are one more
implementation of the decoder-state protocol (runtime.decode.loop), so greedy decoding, sampling and beam
search run through the one driver and the same strategies as every other export; the strategies read
the logits on the host (`device_top = False`). An encoder-only export has `encoder.onnx` alone;
`run_encoder` runs it (`ExportedModel.run`, `tfm-export run OUT --ids ...`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np

from ...errors import InputError
from ...manifest import Manifest

GRAPH_NAME = "decoder_nocache"  # the manifest's graph name of a decoder without a cache
MEMORY = "memory"  # the encoder output the no-cache decoder reads
SOURCE_MASK = "src_mask"  # bool (batch, src_len), True = a real token: an input of both graphs


def runtime_graphs(manifest: Manifest) -> tuple[str, ...]:
    """The graphs a runner opens: encoder and decoder; encoder and decoder_nocache (a module export);
    the encoder alone (encoder-only)."""
    if "decoder" in manifest.graphs:
        return "encoder", "decoder"
    return ("encoder", GRAPH_NAME) if GRAPH_NAME in manifest.graphs else ("encoder",)


def is_module_export(manifest: Manifest) -> bool:
    """A module export: no `decoder` (the cached decoder of the one model config)."""
    return "decoder" not in manifest.graphs


def encoder_feeds(manifest: Manifest, src: np.ndarray) -> dict[str, np.ndarray]:
    """The module encoder's inputs: the ids and, when it reads one, the mask of real tokens."""
    names = [t.name for t in manifest.graphs["encoder"].spec.inputs]
    feeds = {names[0]: src}
    if SOURCE_MASK in names:
        feeds[SOURCE_MASK] = src != manifest.config.src_pad_id
    return feeds


def run_encoder(session: Any, manifest: Manifest, src: np.ndarray) -> dict[str, np.ndarray]:
    """An encoder-only export's outputs for (batch, src_len) ids, by the names the manifest gives them."""
    names = [t.name for t in manifest.graphs["encoder"].spec.outputs]
    return dict(zip(names, session.run(names, encoder_feeds(manifest, src))))


def encoder_only_error() -> InputError:
    return InputError("this export is encoder-only (it has no decoder); run it with `tfm-export run OUT --ids ...` "
                      "or open_export(OUT).run(ids)")


class NoCacheCache:
    """encoder.onnx + decoder_nocache.onnx as a runtime.decode.loop.DecoderCache."""

    lock = nullcontext()  # nothing is shared between calls

    def __init__(self, encoder: Any, decoder: Any, manifest: Manifest):
        self.encoder, self.decoder, self.manifest = encoder, decoder, manifest

    def start(self, src: np.ndarray, expand: int = 1) -> "NoCacheState":
        """Encode once; each source's memory and mask are repeated for its `expand` rows."""
        memory = self.encoder.run([MEMORY], encoder_feeds(self.manifest, src))[0]
        mask = src != self.manifest.config.src_pad_id
        return NoCacheState(self, np.repeat(memory, expand, axis=0), np.repeat(mask, expand, axis=0))


class NoCacheState:
    """The rows' prefixes (rows, steps so far) and memory; each step runs the decoder on the whole prefix."""

    device_top = False  # the strategies read the logits on the host

    def __init__(self, cache: NoCacheCache, memory: np.ndarray, src_mask: np.ndarray):
        self.cache, self.memory, self.src_mask = cache, memory, src_mask
        self.prefix = np.zeros((memory.shape[0], 0), dtype=np.int64)  # (rows, steps so far)
        self.out: np.ndarray | None = None  # the last step's logits (rows, tgt_vocab)

    def step(self, tokens: np.ndarray) -> None:
        self.prefix = np.concatenate([self.prefix, tokens.reshape(-1, 1).astype(np.int64)], axis=1)
        feeds = {"tgt_ids": self.prefix, MEMORY: self.memory, SOURCE_MASK: self.src_mask}
        self.out = self.cache.decoder.run(["logits"], feeds)[0]

    def next_ids(self) -> np.ndarray:
        """The argmax of each row's logits (ties: the lower id, as the strategies pick)."""
        return self.out.argmax(axis=1).astype(np.int64)

    def logits(self) -> np.ndarray:
        return self.out

    def top(self, bias: Any, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("a decoder without a cache has no device head: strategies take its logits")

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Row r continues row beam_idx[r]: its prefix, and its memory (beams stay within their source,
        so this only matters for a caller that moves rows between sources)."""
        self.prefix = self.prefix[beam_idx]
        self.memory, self.src_mask = self.memory[beam_idx], self.src_mask[beam_idx]
