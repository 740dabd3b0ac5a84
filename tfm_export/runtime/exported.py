"""Decoding an export folder on ONNX Runtime, with the KV cache kept on the device.

Every decode runs under the one driver of runtime.decode.loop on the cache chosen when the folder is
opened: the growing cache of decoder.onnx (runtime.states.growing), or the static one of decoder_static.onnx,
replayed as CUDA graphs on CUDA (runtime.states.static). With the static cache, beam search and sampling use
it too when their tokens fit its slots (RuntimeOptions.static_search), else the growing cache; both
reorder beam rows on the device. The methods (generate, generate_ids, translate, stream) are
runtime.api's. Torch-free.
"""

from __future__ import annotations

import logging
import os
import threading
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnxruntime as ort

from ..config import TransformerConfig
from ..errors import InputError
from ..manifest import Manifest, load_manifest
from .checks import check_sessions
from .states.growing import GrowingCache
from .states.nocache import NoCacheCache, encoder_only_error, is_module_export, run_encoder, runtime_graphs
from .api import GenerateMixin
from .decode.draft_length import DraftLength
from .decode.loop import DecodeTimings, DecoderCache
from .options.generation import GenerationConfig
from .sources import feature_batch, float_source, source_batch  # feature_batch: re-exported (its former home)
from .device import Device, RuntimeOptions, open_sessions
from .states.static import GRAPH_NAME as STATIC_GRAPH
from .states.static import StaticCache, open_static
from .states.shortlist import MaskedCache, ShortlistCache, open_shortlist_decoder
from .decode.vmap import VocabularyMap

log = logging.getLogger(__name__)

TOKEN_TYPES = ("int64", "int32")  # encoder inputs that are token ids (Manifest.encoder_input)
FEATURE_TYPES = ("float32", "float16")  # encoder inputs that are features (Whisper's log-mel)

__all__ = ["DecodeTimings", "ExportedModel", "open_export", "uses_static_decoder"]


class ExportedModel(GenerateMixin):
    """An opened export folder: `generate` (n-best with scores), `generate_ids` for token ids,
    `translate` for text, `stream` for one source as it is decoded (runtime.api)."""

    def __init__(self, folder: Path, manifest: Manifest, device: Device,
                 sessions: dict[str, ort.InferenceSession], static: StaticCache | None = None,
                 static_search: bool = True, options: RuntimeOptions | None = None):
        """`static`: the static-cache decoder, when opened with it (else every decode grows its cache);
        `static_search`: beam search and sampling use it too (RuntimeOptions.static_search)."""
        self.folder, self.manifest, self.device = folder, manifest, device
        self.config: TransformerConfig = manifest.config
        self.encoder, self.decoder = sessions["encoder"], sessions.get("decoder")
        # A module export (runtime.states.nocache): a decoder without a cache, or none (encoder-only).
        self.nocache = (NoCacheCache(self.encoder, sessions[runtime_graphs(manifest)[1]], manifest)
                        if is_module_export(manifest) and len(sessions) > 1 else None)
        self.growing = None if is_module_export(manifest) else GrowingCache(
            self.encoder, self.decoder, device, self.config, manifest.cache_dtype, manifest.cross_per_source,
            manifest.encoder_input.name, manifest.decoder_positions)
        self.static_cache, self.static_search = static, static_search
        self.options, self._extra_sessions, self._extra_lock = options or RuntimeOptions(), {}, threading.Lock()
        if static is not None and static.capture:
            # CUDA graphs: a capture fails while another thread runs on the GPU, so this model's calls on
            # the growing cache wait for those on the static one and the other way round (docs/deploying.md).
            self.growing.lock = static.lock
        # Defaults of generate/translate: the export's generation section (e.g. Marian's num_beams).
        self.generation = GenerationConfig.from_dict(manifest.generation)
        self.draft_lengths: dict[tuple, DraftLength] = {}  # speculation's policies, kept across calls

    @property
    def cache(self) -> DecoderCache:
        """The cache greedy decoding runs on: the static one when opened with it, else the growing one."""
        return self.static_cache or self.growing or self.cache_for(self.generation, 0)

    def checking_cache(self) -> DecoderCache | None:
        """The growing cache when its decoder returns earlier_logits (speculative decoding checks drafts on it)."""
        return self.growing if self.growing is not None and self.growing.positions else None

    def cache_for(self, config: GenerationConfig, steps: int) -> DecoderCache:
        if self.growing is None:  # a module export
            if self.nocache is None:
                raise encoder_only_error()
            return self.nocache
        static = self.static_cache
        if static is not None and (config.is_greedy or (self.static_search and steps <= static.slots)):
            return static
        return self.growing

    vmap: VocabularyMap | None = None  # CTranslate2's vocabulary map: translate(..., use_vmap=True) shortlists by it

    def with_shortlist(self, ids: Sequence[int]) -> "Shortlisted":
        """This model with its output head restricted to `ids` (and EOS, the decoder start, the forced first
        token): a runner whose decodes choose among them only (runtime.states.shortlist; CTranslate2's vmap)."""
        cfg = self.config
        own = [cfg.eos_id, cfg.bos_id, *([] if self.generation.forced_bos_token_id is None
                                         else [self.generation.forced_bos_token_id])]
        ids = np.unique(np.array([*own, *ids], dtype=np.int64))
        if ids.min() < 0 or ids.max() >= cfg.tgt_vocab_size:
            raise InputError(f"a shortlist id is out of range for a vocabulary of {cfg.tgt_vocab_size} ids")
        if self.growing is None:
            raise InputError("a vocabulary shortlist needs an export with a cached decoder (decoder.onnx)")
        with self._extra_lock:
            if "shortlist" not in self._extra_sessions:
                path = self.folder / self.manifest.graphs["decoder"].file
                self._extra_sessions["shortlist"] = open_shortlist_decoder(path, cfg.tgt_vocab_size, self.device.name,
                                                                           self.options)
            session = self._extra_sessions["shortlist"]
        cache = (MaskedCache(self.growing, ids, cfg.tgt_vocab_size, cfg.suppress_ids) if session is None
                 else ShortlistCache(self.growing, session, ids))
        return Shortlisted(self, cache, ids)

    def shortlisted(self, sources: Sequence[Sequence[int]]) -> "Shortlisted":
        """`with_shortlist` of the sources' tokens under `vmap` (runtime.decode.vmap)."""
        if self.vmap is None:
            raise InputError("use_vmap needs a vocabulary map: set model.vmap = VocabularyMap.load(path)")
        return self.with_shortlist(self.vmap.shortlist(sources))

    def extra_session(self, name: str) -> ort.InferenceSession:
        """A graph the decode loops do not run (alignment.onnx), opened on first use with this model's device
        and options."""
        with self._extra_lock:  # a server's workers may ask at once: one session
            if name not in self._extra_sessions:
                path = self.folder / self.manifest.graphs[name].file
                self._extra_sessions[name] = open_sessions({name: path}, self.device.name, self.options)[1][name]
            return self._extra_sessions[name]

    @cached_property
    def tokenizer(self) -> Any:
        """The manifest's tokenizer (InputError when the export has none)."""
        if not self.manifest.tokenizer:
            raise InputError("this export has no tokenizer; pass token ids (--ids) instead of text")
        from ..text.tokenizer import tokenizer_from_dict

        return tokenizer_from_dict(self.manifest.tokenizer, self.folder)

    def source_input(self, sources: Any) -> Any:
        """The encoder's input as the manifest declares it: token ids (lists of ints, padded), a float array
        (batch, n_mels, n_frames) of features, or frames (a list of (frames, n_feats) arrays), padded
        (runtime.sources.float_source)."""
        declared = self.manifest.encoder_input
        if declared.dtype in FEATURE_TYPES:
            return float_source(sources, declared, self.config.max_len)
        if declared.dtype not in TOKEN_TYPES:
            raise InputError(f"this export's encoder reads {declared.name} ({declared.dtype} "
                             f"{', '.join(map(str, declared.shape))}), not token ids; pass that input instead")
        return source_batch(sources, self.config).astype(declared.dtype, copy=False)  # (batch, src_len)

    def run(self, sources: Sequence[Sequence[int]]) -> dict[str, Any]:
        """An encoder-only export's outputs (numpy arrays by name) for token-id sources, padded into one
        batch (runtime.states.nocache.run_encoder)."""
        if "decoder" in self.manifest.graphs or self.nocache is not None:
            raise InputError("this export has a decoder; decode with `tfm-export generate` (model.translate), "
                             "not run")
        return run_encoder(self.encoder, self.manifest, self.source_input(sources))

    def transcribe(self, audio: Any, language: str | None = None, task: str | None = "transcribe",
                   timestamps: bool = False, num_beams: int = 1, prompt: Any = None,
                   max_seconds: float | None = 3600.0, max_new_tokens: int | None = None,
                   on_text: Any = None, vad: bool = False, vad_parameters: Any = None,
                   **options: Any) -> dict[str, Any]:
        """A speech export: speech (a path, bytes or float32 samples at 16 kHz) -> {text, language,
        segments, ids}. Whisper: window by window (runtime.speech.whisper.transcribe; `on_text`: the text so far
        after each); a frames model: its filterbank's frames, decoded whole (runtime.speech.frames, which
        refuses language, task other than transcribe, timestamps and prompt). `vad`: only the recording's
        speech, chunk by chunk, times still the recording's (runtime.speech.chunks; `vad_parameters`: a
        runtime.speech.vad.VadParameters or a dict of its fields). `options`: the transcription's own
        (runtime.speech.whisper.transcribe's `runner`)."""
        from .speech.transcribe import transcribe

        return transcribe(self, audio, language=language, task=task, timestamps=timestamps, num_beams=num_beams,
                          prompt=prompt, max_seconds=max_seconds, max_new_tokens=max_new_tokens, on_text=on_text,
                          vad=vad, vad_parameters=vad_parameters, **options)

    def stream_transcribe(self, chunks: Any, **options: Any) -> Any:
        """Live speech: `chunks` (float32 samples at 16 kHz, as they arrive) -> an iterator of StreamUpdate
        (confirmed text, never changed after, and the tentative rest), the last one final. The buffer is
        re-transcribed as audio comes and LocalAgreement-2 confirms text (runtime.speech.streaming; `options`:
        StreamTranscriber's: language, task, prompt, options=StreamOptions(...), transcribe's own)."""
        from .speech.streaming import stream_transcribe

        return stream_transcribe(self, chunks, **options)

    def _step_limit(self, config: GenerationConfig) -> tuple[int, str]:
        slots = self.static_cache.slots if self.static_cache else None  # fixed by its export
        if config.is_greedy and slots is not None and slots < self.config.max_len:
            return slots, "the static decoder's cache slots"
        return super()._step_limit(config)


class Shortlisted(GenerateMixin):
    """An ExportedModel decoding on a shortlist cache (`ExportedModel.with_shortlist`): the model's methods,
    every decode on the growing cache with the restricted head. `ids`: the shortlist (None: `cache` is used as it
    is): a call whose forced first token is not in it (translate's target language) decodes on the shortlist with
    that token added, which it must be able to choose (beam search's gathered head would find no allowed token)."""

    def __init__(self, model: ExportedModel, cache: DecoderCache, ids: np.ndarray | None = None):
        self.model, self.shortlist_cache, self.ids = model, cache, ids
        self.config, self.generation = model.config, model.generation
        self.draft_lengths: dict[tuple, DraftLength] = {}  # this shortlist's own, as its checks differ

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    def source_input(self, sources: Any) -> Any:
        return self.model.source_input(sources)

    def cache_for(self, config: GenerationConfig, steps: int) -> DecoderCache:
        forced = config.forced_bos_token_id
        if self.ids is not None and forced is not None and forced not in self.ids:
            return self.model.with_shortlist([*self.ids.tolist(), forced]).shortlist_cache
        return self.shortlist_cache


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
    paths = {name: folder / manifest.graphs[name].file for name in runtime_graphs(manifest)}
    options = options or RuntimeOptions()
    chosen, sessions = open_sessions(paths, device, options)
    check_sessions(manifest, sessions)
    log.info("opened %s on %s", folder, chosen.name)
    static = None
    if uses_static_decoder(options, chosen, manifest):
        static = open_static(folder, manifest, chosen, options, sessions["encoder"])
    return ExportedModel(folder, manifest, chosen, sessions, static, options.static_search, options)
