"""The sides of `speech-batched` (benchmarks/speech_batched.py says what each runs and why): ours' transcribe
with VAD and batching, and faster-whisper's BatchedInferencePipeline on the same weights (its CTranslate2 model
made to say it is multilingual where the folder is), each with its VAD's chunks and their features apart."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from .whisper import converted, exported, window_padding

PROMPT = 4  # <|startoftranscript|>, <|en|>, <|transcribe|>, <|notimestamps|>
OPTIONS = dict(language="en", task="transcribe", num_beams=1)  # ours (timestamps off by default)


class Ours:
    """The export's transcribe with VAD and batching; `vad_parameters` None: the defaults."""

    def __init__(self, model: Any, batch: int, vad_parameters: dict[str, Any] | None):
        self.model, self.batch, self.vad_parameters = model, batch, vad_parameters

    def __call__(self, samples: np.ndarray) -> str:
        return self.model.transcribe(samples, vad=True, batch_size=self.batch, vad_parameters=self.vad_parameters,
                                     **OPTIONS)["text"]

    def chunks(self, samples: np.ndarray, window_s: float) -> list[np.ndarray]:
        """The chunks' audio, as its VAD and chunking cut the recording."""
        from ..runtime.speech.vad import VadParameters, collect_chunks, speech_timestamps

        spans = speech_timestamps(samples, VadParameters.of(self.vad_parameters))
        return [chunk.samples for chunk in collect_chunks(samples, spans, window_s)]

    def features(self, chunks: list[np.ndarray]) -> None:
        """Each chunk's log-mel features, as its transcription computes them (one window, audio padded)."""
        from ..audio.features import log_mel
        from ..runtime.speech.whisper import speech_settings

        config = speech_settings(self.model)[1]
        for chunk in chunks:
            log_mel(chunk, config)


class Multilingual:
    """A CTranslate2 Whisper model that says it is multilingual: CTranslate2 decides by the vocabulary's size
    (51,865 ids or more), so a small multilingual model (the fixture: 532) reads as English-only, and
    faster-whisper then prompts without <|en|><|transcribe|>, which the model was trained with."""

    is_multilingual = True

    def __init__(self, model: Any):
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class Faster:
    """faster-whisper's BatchedInferencePipeline with its own VAD."""

    def __init__(self, model: Any, batch: int, max_positions: int, suppress_tokens: list[int]):
        from faster_whisper import BatchedInferencePipeline

        self.pipeline, self.batch, self.suppress_tokens = BatchedInferencePipeline(model), batch, suppress_tokens
        self.frames = model.feature_extractor.nb_max_frames
        # CTranslate2 decodes at most max_length // 2 new ids (served_speech.FasterBatched)
        self.max_new_tokens = 2 * (max_positions - PROMPT) - 3

    def __call__(self, samples: np.ndarray) -> str:
        with window_padding(self.frames):
            segments, _ = self.pipeline.transcribe(
                samples, language="en", task="transcribe", beam_size=1, best_of=1, temperature=0.0,
                vad_filter=True, without_timestamps=True, compression_ratio_threshold=None,
                log_prob_threshold=None, no_speech_threshold=None, max_new_tokens=self.max_new_tokens,
                batch_size=self.batch, suppress_tokens=list(self.suppress_tokens))  # it extends the list given
            return "".join(segment.text for segment in segments)  # a generator: decoding happens here

    def chunks(self, samples: np.ndarray, window_s: float) -> list[np.ndarray]:
        """The chunks' audio, as the pipeline's VAD (its own parameters) and collect_chunks cut the recording."""
        from faster_whisper.vad import VadOptions, collect_chunks, get_speech_timestamps

        spans = get_speech_timestamps(samples, VadOptions(max_speech_duration_s=window_s, min_silence_duration_ms=160))
        return collect_chunks(samples, spans, max_duration=window_s)[0]

    def features(self, chunks: list[np.ndarray]) -> None:
        """Each chunk's features, as the pipeline computes them (padded to the window after)."""
        extractor = self.pipeline.model.feature_extractor
        for chunk in chunks:
            extractor(chunk)


def open_sides(fixture: Path, precision: str, args: argparse.Namespace, window_s: float) -> dict[str, Any]:
    """The three sides of one precision, on the export and the conversion of `fixture` (made in --work)."""
    from faster_whisper import WhisperModel

    from ..runtime import RuntimeOptions, open_export

    int8 = precision == "int8"
    export = exported(fixture, args.work / f"ours-{precision}", "int8" if int8 else None)
    ct2 = converted(fixture, args.work / f"ct2-{precision}", "int8" if int8 else None)
    model = open_export(export, "cpu", RuntimeOptions(intra_op_threads=args.threads))
    faster = WhisperModel(str(ct2), device="cpu", compute_type=precision, cpu_threads=args.threads, num_workers=1)
    if json.loads((fixture / "generation_config.json").read_text()).get("is_multilingual"):
        faster.model = Multilingual(faster.model)
    positions = json.loads((fixture / "config.json").read_text())["max_target_positions"]
    suppress = json.loads((fixture / "generation_config.json").read_text()).get("suppress_tokens") or []
    batched_vad = {"max_speech_duration_s": window_s, "min_silence_duration_ms": 160}  # the pipeline's own
    made = {"ours": Ours(model, args.batch_size, batched_vad), "ours-default-vad": Ours(model, args.batch_size, None),
            "faster-whisper": Faster(faster, args.batch_size, positions, suppress)}
    return {f"{name} {precision}": side for name, side in made.items()}

