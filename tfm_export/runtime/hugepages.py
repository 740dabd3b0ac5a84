"""Session weights on transparent huge pages (Linux). Torch-free.

A decoder step at small batches streams every weight once (opus-mt: 120 MB a step). ONNX Runtime
copies the weights into heap memory of its own (the prepacked MatMul layouts), which glibc maps in
4 KiB pages unless told otherwise, and most kernels ship transparent huge pages in `madvise` mode:
then every step walks the page tables for ~30k pages and the CPU's prefetchers stop at each 4 KiB
boundary. On the 2-core EPYC VM of BENCHMARKS.md the opus-mt decoder step took 22-27 % less CPU
time with its weights on 2 MiB pages (the same as starting Python with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which only works when set before the process starts).

So `create_session` notes the process's anonymous memory before a session is made and, after it,
asks the kernel to back what the session added with huge pages: madvise(MADV_HUGEPAGE) on those
ranges (2 MiB-aligned, inward), then madvise(MADV_COLLAPSE) (Linux 6.1+) to do it now rather than
whenever khugepaged gets there; on a thread of its own (`wait` joins it), so that opening a model
does not wait. Mappings mostly not in memory (the stacks of the session's threads) are left alone: a
collapse fills in what it covers. Both calls are advice: the contents never change, and a kernel
without them (or with huge pages off, `never`) refuses, which is logged and ignored. Only memory that
appeared while the session was made is touched (another thread allocating meanwhile may have its
ranges advised too, which is harmless; so is a range freed before the collapse reaches it).
RuntimeOptions.huge_pages turns it off.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux 6.1+: collapse the range into huge pages now (EINVAL before)
HUGE_PAGE = 2 << 20  # x86-64 and arm64 (4 KiB base pages) PMD size
Ranges = list[tuple[int, int]]


def anonymous_ranges(maps: str = "/proc/self/maps", resident: float = 0.0) -> Ranges:
    """The process's writable anonymous mappings (heap included) as sorted (start, end) pairs; with `resident`,
    only those with at least that share of their pages in memory (`maps` is then an smaps file)."""
    ranges: Ranges = []
    current = None  # the anonymous mapping whose smaps fields follow, if the last header was one
    with open(maps, encoding="ascii") as lines:
        for line in lines:
            fields = line.split()
            if fields[0].endswith(":"):  # an smaps field of the mapping above
                if fields[0] == "Rss:" and current and int(fields[1]) * 1024 < resident * (current[1] - current[0]):
                    ranges.remove(current)  # mostly untouched (a thread's stack): a collapse would fill it in
                continue
            name = fields[5] if len(fields) > 5 else ""
            current = None
            if fields[1].startswith("rw") and name in ("", "[heap]"):
                current = tuple(int(x, 16) for x in fields[0].split("-"))
                ranges.append(current)
    return sorted(ranges)


def added(before: Ranges, after: Ranges) -> Ranges:
    """The parts of `after` outside every range of `before` (mappings grow at either end and merge)."""
    out = []
    for start, end in after:
        for old_start, old_end in before:
            if old_end <= start or old_start >= end:
                continue
            if old_start > start:
                out.append((start, old_start))
            start = max(start, old_end)
            if start >= end:
                break
        if start < end:
            out.append((start, end))
    return out


def huge_aligned(ranges: Ranges) -> Ranges:
    """Each range shrunk to whole huge pages; those with none left are dropped."""
    aligned = [(-(-start // HUGE_PAGE) * HUGE_PAGE, end // HUGE_PAGE * HUGE_PAGE) for start, end in ranges]
    return [(start, end) for start, end in aligned if end > start]


def _madvise() -> ctypes._CFuncPtr | None:
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def advise(ranges: Ranges) -> int:
    """MADV_HUGEPAGE then MADV_COLLAPSE on each range; the bytes the kernel collapsed."""
    madvise = _madvise()
    collapsed = 0
    for start, end in ranges if madvise else ():
        for advice in (MADV_HUGEPAGE, MADV_COLLAPSE):
            if madvise(start, end - start, advice) != 0:
                log.debug("madvise(%#x, %d, %d): %s", start, end - start, advice, os.strerror(ctypes.get_errno()))
                break
        else:
            collapsed += end - start
    return collapsed


_pending: list[threading.Thread] = []  # collapses still running (`wait`)
_one_at_a_time = threading.Lock()  # sessions made in a row collapse in turn, not on every core at once


def _after_fork() -> None:
    """A forked child has none of its parent's threads: a lock one of them held would never be released."""
    global _one_at_a_time
    _one_at_a_time = threading.Lock()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _collapse(ranges: Ranges) -> None:
    with _one_at_a_time:
        start = time.perf_counter()
        collapsed = advise(ranges)
    log.debug("huge pages: %.0f of %.0f MB collapsed in %.2f s", collapsed / 2**20,
              sum(end - begin for begin, end in ranges) / 2**20, time.perf_counter() - start)


def wait(timeout: float | None = None) -> None:
    """Until the collapses started so far are done (benchmarks, tests; decoding does not need to wait)."""
    while _pending:
        _pending.pop(0).join(timeout)


@contextmanager
def new_memory_on_huge_pages(enabled: bool = True, background: bool = True) -> Iterator[None]:
    """Around making a session: afterwards, the anonymous memory that appeared meanwhile goes on huge pages.

    `background`: collapse on a thread of its own (the kernel copies each 2 MiB: about 0.5 s for the
    opus-mt decoder on the VM of BENCHMARKS.md), so that opening a model does not wait for it and a
    one-off translation is not slowed down by it; the session runs meanwhile, on small pages where the
    collapse has not reached yet."""
    if not enabled or not sys.platform.startswith("linux"):
        yield
        return
    try:
        before = anonymous_ranges()
    except OSError:  # no /proc
        yield
        return
    yield
    ranges = huge_aligned(added(before, anonymous_ranges("/proc/self/smaps", resident=0.5)))
    if not ranges:
        return
    if not background:
        _collapse(ranges)
        return
    thread = threading.Thread(target=_collapse, args=(ranges,), name="tfm-export-huge-pages", daemon=True)
    thread.start()
    _pending[:] = [t for t in _pending if t.is_alive()] + [thread]
