"""Session weights on transparent huge pages (runtime.hugepages): which ranges are advised, and that the kernel
backs them with huge pages where it can."""

import mmap
import sys
from pathlib import Path

import pytest

from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.hugepages import (HUGE_PAGE, added, anonymous_ranges, huge_aligned,
                                           new_memory_on_huge_pages, wait)

MB = 1 << 20


def test_added_ranges_are_what_appeared_around_the_old_ones():
    before = [(100, 200), (300, 400)]
    # a mapping grown at its end (the heap), one grown downwards and merged with another, a new one
    after = [(100, 250), (280, 400), (500, 600)]
    assert added(before, after) == [(200, 250), (280, 300), (500, 600)]
    assert added(before, before) == []
    assert added([], after) == after
    assert added([(0, 1000)], after) == []


SMAPS = """\
00400000-00600000 r-xp 00000000 fd:01 12 /usr/bin/python3
Rss:                 100 kB
01000000-09000000 rw-p 00000000 00:00 0 [heap]
Rss:              131072 kB
7f0000000000-7f0000800000 rw-p 00000000 00:00 0
Rss:                  16 kB
7f0001000000-7f0001400000 rw-p 00000000 00:00 0
Rss:                4096 kB
7f0002000000-7f0002200000 rw-p 00000000 fd:01 13 /tmp/weights.data
Rss:                2048 kB
"""


def test_mostly_untouched_and_file_mappings_are_left_alone(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    # the 8 MiB mapping with 16 kB in memory is a thread's stack: not advised
    assert anonymous_ranges(str(smaps), resident=0.5) == [(0x01000000, 0x09000000), (0x7F0001000000, 0x7F0001400000)]
    assert len(anonymous_ranges(str(smaps))) == 3


def test_only_whole_huge_pages_are_advised():
    assert huge_aligned([(1, HUGE_PAGE + 1), (HUGE_PAGE - 5, 3 * HUGE_PAGE + 7)]) == [(HUGE_PAGE, 3 * HUGE_PAGE)]


def anon_huge_kb(start: int, end: int) -> int:
    """AnonHugePages (kB) of the mappings overlapping [start, end)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            inside = lo < end and hi > start
        elif inside and fields[0] == "AnonHugePages:":
            total += int(fields[1])
    return total


def thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "missing"
    return text[text.index("[") + 1:text.index("]")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
@pytest.mark.parametrize("background", [False, True])
def test_memory_made_inside_goes_on_huge_pages_and_old_memory_does_not(background):
    if thp_mode() not in ("always", "madvise"):
        pytest.skip(f"SKIPPED: transparent huge pages are {thp_mode()} here")
    old = mmap.mmap(-1, 8 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    old.write(b"x" * (8 * MB))
    with new_memory_on_huge_pages(background=background):
        new = mmap.mmap(-1, 8 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        new.write(b"y" * (8 * MB))  # written before the advice: it must keep its contents
    wait()
    ranges = {start: end for start, end in anonymous_ranges()}
    assert new[:1] == b"y" and new[-1:] == b"y"
    address = next(start for start in ranges if new_address(new, start, ranges[start]))
    huge = anon_huge_kb(address, ranges[address])
    if huge == 0 and thp_mode() == "madvise":
        pytest.skip("SKIPPED: this kernel does not collapse on request (MADV_COLLAPSE is Linux 6.1+)")
    assert huge >= 2 * 1024  # at least one whole 2 MiB page of the 8 MiB
    old_address = next(start for start in ranges if new_address(old, start, ranges[start]))
    if thp_mode() == "madvise" and old_address != address:
        assert anon_huge_kb(old_address, ranges[old_address]) == 0


def new_address(buffer: mmap.mmap, start: int, end: int) -> bool:
    """Whether `buffer` lies in [start, end)."""
    import ctypes

    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    return start <= address < end


def test_the_option_turns_it_off(tiny_export, monkeypatch):
    from contextlib import contextmanager

    from tfm_export.runtime import device

    asked = []

    @contextmanager
    def recorder(enabled=True, background=True):
        asked.append(enabled)
        yield

    monkeypatch.setattr(device, "new_memory_on_huge_pages", recorder)
    sources = [[5, 9, 13, 7], [40, 41]]
    plain = open_export(tiny_export, "cpu", RuntimeOptions(huge_pages=False)).generate_ids(sources, 12)
    assert asked == [False, False]  # encoder and decoder
    monkeypatch.undo()
    assert open_export(tiny_export, "cpu").generate_ids(sources, 12) == plain  # memory backing only
