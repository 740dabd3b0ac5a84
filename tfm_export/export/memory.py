"""Give freed memory back to the system between the export's stages.

torch.onnx's tracing and serialisation allocate and free gigabytes for a model over 2 GB. glibc keeps
much of what is freed (its mmap threshold rises after large frees, so later blocks come from the heap),
and the validation that follows would then run on top of it. `malloc_trim` returns the free pages; it
changes nothing else, and elsewhere than glibc it is skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def release_freed_memory() -> None:
    """Collect garbage, then ask glibc to return its free pages to the system (a no-op without glibc)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:  # no C library to load: nothing to trim
        return
    if trim is not None:
        trim(0)
