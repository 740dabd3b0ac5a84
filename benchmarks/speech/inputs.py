"""Moved: the recordings and random folders to benchmarks.fixtures, the rest to tfm_export.bench.whisper; these
names stay only until speech-batched imports the new ones (#59)."""

from benchmarks.fixtures import ROOT, long_recording, random_folder, random_layouts  # noqa: F401
from tfm_export.bench.whisper import RATE, converted, exported, normalized, versions, wer  # noqa: F401
