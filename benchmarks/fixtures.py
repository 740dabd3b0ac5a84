"""The one seam between the benchmarks and the test fixtures: the fixture modules stay in tests/ (and the
whisper-digits model's speech.py beside its model), and are loaded from their files here.

Why this seam, not the fixtures moved into benchmarks/: the fixture modules (tests/hf_fixtures.py,
marian_fixtures.py, reference_models.py, whisper_fixtures.py, fixtures/train_fixtures.py: some 1,400 lines)
are the tests' own; dozens of test files import them by their flat names, as pytest's rootdir insertion
lets them. Moving them would churn every one of those tests for the benefit of a few benchmarks. So the
benchmarks read them unchanged, through this module only: each is loaded from its path under the flat name
the tests use (registered in sys.modules, so a test and a benchmark in one process share one module, and
their own flat imports of each other resolve), and sys.path is never touched here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
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
