"""Moved to tfm_export.bench.whisper (the Whisper peers as backends); these names stay only until speech-batched's
sides import the new ones (#59)."""

from tfm_export.bench.whisper import (  # noqa: F401
    BACKENDS, OPTIMUM, OPTIMUM_WORKER, Eager, Faster, Folder, OptimumWhisper, Ours, open_backends, own_time,
    window_padding)
