"""The one seam between the benchmarks and the test fixtures: the fixture modules stay in tests/ (and the
whisper-digits model's speech.py beside its model), and are loaded from their files here. It reads a checkout's
tests/ and models/ (the scenarios of `python -m benchmarks` run in one): an installed wheel has neither.

Why this seam, not the fixtures moved into the package: the fixture modules (tests/hf_fixtures.py,
marian_fixtures.py, reference_models.py, whisper_fixtures.py, fixtures/train_fixtures.py: some 1,400 lines)
are the tests' own; dozens of test files import them by their flat names, as pytest's rootdir insertion
lets them. Moving them would churn every one of those tests for the benefit of a few benchmarks. So the
benchmarks read them unchanged, through this module only: each is loaded from its path under the flat name
the tests use (registered in sys.modules, so a test and a benchmark in one process share one module, and
their own flat imports of each other resolve), and sys.path is never touched here. No static import names
them, so the package's bench code still imports neither the tests nor the benchmarks (test_bench_harness).

What the speech benchmarks build on those fixtures is here too: long recordings spoken by espeak-ng (the
whisper-digits model's speech) and random Whisper folders of published layouts (whisper_fixtures').
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the checkout
TESTS = ROOT / "tests"
WHISPER_DIGITS = ROOT / "models" / "whisper-digits"


def _load(name: str, path: Path) -> ModuleType:
    """The module `name` from `path`, once per process (an earlier import by a test is reused)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def marian() -> ModuleType:
    """tests/marian_fixtures.py: Marian folders (OPUS_MT sizes, marian_folder)."""
    return _load("marian_fixtures", TESTS / "marian_fixtures.py")


def hf() -> ModuleType:
    """tests/hf_fixtures.py: the trained family folders, the speller, the held-out split."""
    marian()  # hf_fixtures imports it by its flat name
    return _load("hf_fixtures", TESTS / "hf_fixtures.py")


def train() -> ModuleType:
    """tests/fixtures/train_fixtures.py: how the trained fixtures are trained."""
    hf()
    return _load("train_fixtures", TESTS / "fixtures" / "train_fixtures.py")


def reference_models() -> ModuleType:
    """tests/reference_models.py: the seed models (TutorialTransformer)."""
    return _load("reference_models", TESTS / "reference_models.py")


def whisper() -> ModuleType:
    """tests/whisper_fixtures.py: random Whisper folders of published layouts."""
    return _load("whisper_fixtures", TESTS / "whisper_fixtures.py")


def whisper_digits_speech() -> ModuleType:
    """models/whisper-digits/speech.py: espeak-ng speech, as the model was trained and tested."""
    return _load("whisper_digits_speech", WHISPER_DIGITS / "speech.py")


def copy() -> ModuleType:
    """tests/copy_fixtures.py: the copy-heavy BART fixture (speculative decoding's summarization case)."""
    hf()  # copy_fixtures imports it by its flat name
    return _load("copy_fixtures", TESTS / "copy_fixtures.py")


# --- what the speech benchmarks build on them


def long_recording(fixture: Path, seconds: float, seed: int, work: Path, pauses: tuple[float, float] = (0.4, 1.2),
                   noise: float = 0.003, stem: str = "digits") -> tuple[np.ndarray, str]:
    """(samples, the spoken words): held-out English digit strings with `pauses` (seconds, uniform) over noise of
    standard deviation `noise`, `seconds` long; cached in `work` (a wav and its words) per (stem, seconds, seed)."""
    import soundfile

    from .whisper import RATE  # here, not above: `import benchmarks` loads this module, and needs no runtime

    wav, txt = work / f"{stem}_{seconds:g}s_{seed}.wav", work / f"{stem}_{seconds:g}s_{seed}.txt"
    if wav.exists() and txt.exists():
        return soundfile.read(wav, dtype="float32")[0], txt.read_text()
    # the fixture's speech: espeak-ng, as the model was trained and tested
    speech = _load("whisper_digits_speech", fixture / "speech.py")

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


def random_layouts() -> dict[str, tuple[Any, int, int]]:
    """name -> (whisper_fixtures.Layout, d_model, heads): published layouts at full width."""
    Layout = whisper().Layout

    return {"tiny": (Layout(4, 4, 80, True, 1500), 384, 6),   # openai/whisper-tiny
            "base": (Layout(6, 6, 80, True, 1500), 512, 8),   # openai/whisper-base
            "smoke": (Layout(2, 2, 80, True, 200), 64, 4)}    # 4 s windows: for smoke tests only


def random_folder(name: str, folder: Path, vocab: int) -> Path:
    """A random Whisper folder of layout `name` with `vocab` ids and 448 target positions (the fixtures'
    tokenizer and preprocessor_config; transformers' initialisation, seeded)."""
    import torch
    import transformers
    whisper_folder = whisper().whisper_folder

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
