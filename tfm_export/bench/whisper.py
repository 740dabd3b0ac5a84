"""The Whisper peers as benchmark backends (`whisper-speed`, `served-speech`, `speech-batched`): ours (ONNX
Runtime), faster-whisper (CTranslate2), transformers (eager) and Optimum (a worker process), each with
transcribe(samples, language) and steps(features, n); the exports and conversions they read; WER and the versions
of what ran.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, TfmExportError
from ..manifest import has_manifest
from ..runtime import GREEDY, RuntimeOptions, open_export
from . import harness
from .optimum_client import WORKER, OptimumProcess

log = logging.getLogger(__name__)
RATE = 16000


BACKENDS = ("ours-f32", "ours-int8", "faster-whisper-f32", "faster-whisper-int8", "transformers")

OPTIMUM = "optimum"  # a backend only with --optimum-python

OPTIMUM_WORKER = WORKER  # its whisper mode


class Folder:
    """What every backend needs to know of the Hugging Face folder."""

    def __init__(self, path: Path):
        config = json.loads((path / "config.json").read_text())
        gen = json.loads((path / "generation_config.json").read_text())
        self.path, self.max_positions = path, config["max_target_positions"]
        self.window_frames, self.n_mels = 2 * config["max_source_positions"], config["num_mel_bins"]
        self.sot, self.eos = config["decoder_start_token_id"], gen["eos_token_id"]
        self.no_timestamps = gen["no_timestamps_token_id"]


class Ours:
    """The export on ONNX Runtime; the encoder session's time is summed (the profile)."""

    def __init__(self, export: Path, folder: Folder, threads: int):
        self.model = open_export(export, "cpu", RuntimeOptions(intra_op_threads=threads))
        self.encoder_s, self.encoder_calls = 0.0, 0
        encoder = self.model.encoder
        encoder.run_with_iobinding = harness.summing(encoder.run_with_iobinding, self._encoder_call)

    def _encoder_call(self, seconds: float) -> None:
        self.encoder_s += seconds
        self.encoder_calls += 1

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        return self.model.transcribe(samples, language=language, task="transcribe", timestamps=True,
                                     num_beams=1)["text"]

    def steps(self, features: np.ndarray, n: int) -> int:
        ids = self.model.generate_ids(features, max_new_tokens=n, stop_at_eos=False, config=GREEDY)
        return min(len(row) for row in ids)


@contextlib.contextmanager
def window_padding(frames: int):
    """faster-whisper pads each window to 3000 frames (pad_or_trim's default) whatever chunk_length says:
    pad to the model's own window while it runs (nothing changes for 30 s models)."""
    import faster_whisper.transcribe as fwt

    original = fwt.pad_or_trim
    if frames != 3000:
        fwt.pad_or_trim = functools.partial(original, length=frames)
    try:
        yield
    finally:
        fwt.pad_or_trim = original


class Faster:
    """faster-whisper's WhisperModel on a CTranslate2 conversion; its ctranslate2 model for the steps."""

    def __init__(self, ct2: Path, folder: Folder, threads: int, compute_type: str):
        from faster_whisper import WhisperModel

        self.folder = folder
        self.model = WhisperModel(str(ct2), device="cpu", compute_type=compute_type, cpu_threads=threads,
                                  num_workers=1)
        frames = self.model.feature_extractor.nb_max_frames
        if frames != folder.window_frames:
            raise InputError(f"faster-whisper read a window of {frames} frames from {ct2}/preprocessor_config.json,"
                             f" the model's is {folder.window_frames}")

    @property
    def max_new_tokens(self) -> int:
        """Up to max_target_positions - 4 new tokens a window, as ours and transformers: CTranslate2's
        Whisper.generate decodes at most max_length // 2 new tokens (OpenAI's sample_len, n_text_ctx // 2) and
        faster-whisper passes max_length = len(prompt) + max_new_tokens (3 ids here), capped at 448."""
        return min(2 * (self.folder.max_positions - 4) - 3, 448 - 3)

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        with window_padding(self.folder.window_frames):
            segments, _ = self.model.transcribe(
                samples, language=language, task="transcribe", beam_size=1, best_of=1, temperature=0.0,
                condition_on_previous_text=False, vad_filter=False, without_timestamps=False,
                word_timestamps=False, compression_ratio_threshold=None, log_prob_threshold=None,
                no_speech_threshold=None, max_new_tokens=self.max_new_tokens)
            return "".join(segment.text for segment in segments)  # a generator: decoding happens here

    def steps(self, features: np.ndarray, n: int) -> int:
        import ctranslate2

        f = self.folder
        prompt = [f.sot, f.no_timestamps]
        out = self.model.model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(features)),
                                        [prompt] * len(features), beam_size=1, max_length=2 * n,  # n new ids
                                        suppress_tokens=[f.eos], suppress_blank=False)
        return min(len(r.sequences_ids[0]) for r in out)


class Eager:
    """transformers' WhisperForConditionalGeneration, eager attention, float32."""

    def __init__(self, folder: Folder, threads: int):
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.folder = folder
        self.model = transformers.WhisperForConditionalGeneration.from_pretrained(
            str(folder.path), attn_implementation="eager").eval()
        self.extractor = transformers.WhisperFeatureExtractor.from_pretrained(str(folder.path))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder.path))

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        import torch

        long = len(samples) > self.extractor.n_samples  # long-form: all frames, unpadded, and a mask
        inputs = self.extractor(samples, sampling_rate=RATE, return_tensors="pt", truncation=not long,
                                padding="longest" if long else "max_length", return_attention_mask=True)
        with torch.inference_mode():
            ids = self.model.generate(
                inputs.input_features, attention_mask=inputs.attention_mask, language=language, task="transcribe",
                return_timestamps=True, condition_on_prev_tokens=False, num_beams=1, do_sample=False,
                compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)[0]

    def steps(self, features: np.ndarray, n: int) -> int:
        import torch
        import transformers
        from transformers.generation.utils import GenerationMixin

        f = self.folder
        config = transformers.GenerationConfig(
            decoder_start_token_id=f.sot, eos_token_id=f.eos, pad_token_id=f.eos, bos_token_id=f.eos,
            max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1, use_cache=True)
        prompt = torch.tensor([[f.sot, f.no_timestamps]] * len(features))
        with torch.inference_mode():
            out = GenerationMixin.generate(self.model, input_features=torch.from_numpy(features),
                                           decoder_input_ids=prompt, generation_config=config)
        return out.shape[1] - prompt.shape[1]


class OptimumWhisper(OptimumProcess):
    """optimum_worker.py's whisper mode under Optimum's venv's python: exports (or reuses) `work`/optimum, then
    times each call itself: `seconds` is the last call's time as the worker measured it, which the measures take
    instead of their own (own_time)."""

    def __init__(self, python: Path, folder: Folder, work: Path, threads: int):
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.sent: dict[str, tuple[np.ndarray, Path]] = {}  # kind -> (the array last written, its file)
        super().__init__(python, "whisper", [str(folder.path), str(work / "optimum")], threads)

    def npy(self, kind: str, array: np.ndarray) -> str:
        """`array` as a .npy file in the work folder, written when it is not the array last sent as `kind`."""
        held = self.sent.get(kind)
        if held is None or held[0] is not array:
            path = self.work / f"optimum-{kind}.npy"
            np.save(path, np.ascontiguousarray(array, dtype=np.float32))
            self.sent[kind] = (array, path)  # the array is held, so its identity is not reused
        return str(self.sent[kind][1])

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        return self.ask({"transcribe": self.npy("samples", samples), "language": language})["text"]

    def steps(self, features: np.ndarray, n: int) -> int:
        return self.ask({"steps": self.npy("features", features), "new_tokens": n})["new_tokens"]


def own_time(backend: Any, outside: float) -> float:
    """A call's seconds: `outside` (its wall time, taken here), or Optimum's as its worker measured it."""
    return backend.seconds if isinstance(backend, OptimumWhisper) else outside


def open_backends(names: list[str], folder: Folder, work: Path, threads: int, optimum_python: Path | None = None,
                  skipped: list[str] | None = None) -> dict[str, Any]:
    """The backends by name, each on `folder` (exports and conversions made in `work` when missing). A folder
    that Optimum refuses leaves it out, with the reason printed and added to `skipped`."""
    made: dict[str, Any] = {}
    for name in names:
        if name.startswith("ours-"):
            quantize = None if name == "ours-f32" else "int8"
            made[name] = Ours(exported(folder.path, work / name, quantize), folder, threads)
        elif name.startswith("faster-whisper-"):
            int8 = name.endswith("int8")
            ct2 = converted(folder.path, work / f"ct2-{'int8' if int8 else 'f32'}", "int8" if int8 else None)
            made[name] = Faster(ct2, folder, threads, "int8" if int8 else "float32")
        elif name == "transformers":
            made[name] = Eager(folder, threads)
        elif name == OPTIMUM and optimum_python:
            try:
                made[name] = OptimumWhisper(optimum_python, folder, work, threads)
            except Exception as exc:  # no such python, or a folder Optimum refuses (its stderr above says more)
                reason = f"Optimum skipped on {folder.path.name}: {type(exc).__name__}: {exc}"
                log.warning("%s", reason)
                if skipped is not None:
                    skipped.append(reason)
        else:
            raise InputError(f"unknown backend {name}; choose from {', '.join(BACKENDS)}, {OPTIMUM} (with "
                             "--optimum-python)")
    return made


# --- what the backends read, and what their outputs are scored by


def normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalized(reference), normalized(hypothesis) or "<empty>"))


def exported(folder: Path, out: Path, quantize: str | None) -> Path:
    """`tfm-export FOLDER -o OUT [--quantize int8]` (validation included), unless `out` holds an export."""
    if not has_manifest(out):
        extra = ["--quantize", quantize] if quantize else []
        done = subprocess.run([sys.executable, "-m", "tfm_export", str(folder), "-o", str(out), *extra],
                              capture_output=True, text=True)
        if done.returncode:
            raise TfmExportError(f"tfm-export {folder} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return out


def converted(folder: Path, out: Path, quantization: str | None) -> Path:
    """CTranslate2's TransformersConverter, as faster-whisper's docs convert a Whisper folder."""
    if not (out / "model.bin").exists():
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(folder), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
            str(out), quantization=quantization, force=True)
    return out


def versions(optimum_python: Path | None) -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("faster-whisper", "ctranslate2", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    if optimum_python:
        from .optimum_client import optimum_versions  # the Optimum venv's optimum, transformers and onnxruntime

        out |= optimum_versions(optimum_python)
    return out
