"""Inputs of the Whisper benchmarks: long recordings spoken by espeak-ng, random and trained folders, our exports and
CTranslate2 conversions of them, WER, and the versions of what ran."""

from __future__ import annotations

from pathlib import Path
import random
import re
import subprocess
import sys
from typing import Any

from benchmarks import fixtures
import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the checkout

RATE = 16000

def long_recording(fixture: Path, seconds: float, seed: int, work: Path, pauses: tuple[float, float] = (0.4, 1.2),
                   noise: float = 0.003, stem: str = "digits") -> tuple[np.ndarray, str]:
    """(samples, the spoken words): held-out English digit strings with `pauses` (seconds, uniform) over noise of
    standard deviation `noise`, `seconds` long; cached in `work` (a wav and its words) per (stem, seconds, seed)."""
    import soundfile

    wav, txt = work / f"{stem}_{seconds:g}s_{seed}.wav", work / f"{stem}_{seconds:g}s_{seed}.txt"
    if wav.exists() and txt.exists():
        return soundfile.read(wav, dtype="float32")[0], txt.read_text()
    # the fixture's speech: espeak-ng, as the model was trained and tested
    speech = fixtures._load("whisper_digits_speech", fixture / "speech.py")

    rng, target = random.Random(seed), int(seconds * RATE)
    parts, words, total = [], [], 0
    while True:
        spoken = speech.draw(rng, "en", heldout=True)
        pause, said = np.zeros(int(rng.uniform(*pauses) * RATE), np.float32), spoken.samples()
        if total + len(pause) + len(said) > target:
            break
        parts += [pause, said]
        words.append(spoken.text())
        total += len(pause) + len(said)
    parts.append(np.zeros(target - total, np.float32))
    samples = (np.concatenate(parts) + noise * np.random.default_rng(seed).standard_normal(target)).astype(np.float32)
    soundfile.write(wav, samples, RATE, subtype="FLOAT")
    txt.write_text(" ".join(words))
    return samples, " ".join(words)

def normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())

def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalized(reference), normalized(hypothesis) or "<empty>"))

def random_layouts() -> dict[str, tuple[Any, int, int]]:
    """name -> (whisper_fixtures.Layout, d_model, heads): published layouts at full width."""
    Layout = fixtures.whisper().Layout

    return {"tiny": (Layout(4, 4, 80, True, 1500), 384, 6),   # openai/whisper-tiny
            "base": (Layout(6, 6, 80, True, 1500), 512, 8),   # openai/whisper-base
            "smoke": (Layout(2, 2, 80, True, 200), 64, 4)}    # 4 s windows: for smoke tests only

def random_folder(name: str, folder: Path, vocab: int) -> Path:
    """A random Whisper folder of layout `name` with `vocab` ids and 448 target positions (the fixtures'
    tokenizer and preprocessor_config; transformers' initialisation, seeded)."""
    import torch
    import transformers
    whisper_folder = fixtures.whisper().whisper_folder

    if (folder / "model.safetensors").exists():
        return folder
    layout, d_model, heads = random_layouts()[name]
    whisper_folder(layout, folder, d_model=d_model, heads=heads)
    config = transformers.WhisperConfig.from_pretrained(folder)
    config.vocab_size, config.max_target_positions = max(vocab, config.vocab_size), 448
    config.init_std = 0.02  # transformers' default: the fixtures' 0.2 grows a 384-wide encoder's outputs so
    # large that float32 rounding alone fails the export's validation (6e-4 on the cross keys)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig.from_pretrained(folder)
    model.generation_config.max_length = 448
    model.save_pretrained(folder)
    return folder

def exported(folder: Path, out: Path, quantize: str | None) -> Path:
    """`tfm-export FOLDER -o OUT [--quantize int8]` (validation included), unless `out` holds an export."""
    if not (out / "manifest.json").exists():
        extra = ["--quantize", quantize] if quantize else []
        done = subprocess.run([sys.executable, "-m", "tfm_export", str(folder), "-o", str(out), *extra],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"tfm-export {folder} failed:\n{(done.stdout + done.stderr)[-3000:]}")
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
        from benchmarks.optimum_client import optimum_versions  # the Optimum venv's optimum, transformers and onnxruntime

        out |= optimum_versions(optimum_python)
    return out
