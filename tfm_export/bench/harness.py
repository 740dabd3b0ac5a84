"""The benchmark harness: interleaved rounds, warm-up, repeats, medians, machine info, JSON rows and a
Markdown table. `tfm-export bench` (bench.bench) and every scenario under benchmarks/ measure through it.

Why interleaving: the machines these figures come from are shared, and their speed drifts by more than
the differences sought between runs. Each round runs every side once (A, B, then B, A in the next, so no
side always goes first), after a warm-up of each; only ratios within one run are reported.

It lives in the package, not in benchmarks/, so that `tfm-export bench` shares it; it imports nothing
heavy (the library versions are read from the installed metadata), so that a driver comparing two
checkouts runs it in one while its measuring processes import the other's tfm_export.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import InputError
from ..files import write_file_atomically

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "onnxruntime", "numpy", "ctranslate2", "transformers")  # versions in machine_info


@dataclass(frozen=True)
class Plan:
    """How many times each side runs: `warmup` untimed runs first, then `rounds` interleaved rounds in
    which each side runs once (its run may itself repeat, which the side's callable decides)."""

    rounds: int = 5
    warmup: int = 1

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.warmup < 0:
            raise InputError(f"a plan needs at least one round and no negative warm-up, got {self}")


def rotation(sides: Sequence[str], rounds: int) -> list[list[str]]:
    """The order of the sides in each round: A, B / B, A / A, B ... for two; for more, each round starts
    one later (A B C / B C A / C A B), so every side takes every place equally often."""
    n = len(sides)
    if n == 2:
        return [list(sides) if r % 2 == 0 else list(reversed(sides)) for r in range(rounds)]
    return [[sides[(r + i) % n] for i in range(n)] for r in range(rounds)] if n else [[] for _ in range(rounds)]


def interleave(sides: Mapping[str, Callable[[], Any]], plan: Plan = Plan(),
               progress: Callable[[str], None] | None = None) -> dict[str, list[Any]]:
    """Run every side's callable `plan.warmup` times (untimed), then `plan.rounds` rounds in `rotation`
    order; returns each side's measurements in round order (whatever the callable returns: seconds, ms a
    token, tokens/s, or a dict of several)."""
    names = list(sides)
    for name in names:
        for _ in range(plan.warmup):
            sides[name]()
    samples: dict[str, list[Any]] = {name: [] for name in names}
    for r, order in enumerate(rotation(names, plan.rounds)):
        for name in order:
            samples[name].append(sides[name]())
        if progress:
            progress(f"round {r + 1}/{plan.rounds}: " + ", ".join(f"{n} {_short(samples[n][-1])}" for n in order))
    return samples


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "done"


def timed(fn: Callable[[], Any], clock: Callable[[], float] | None = None) -> float:
    """Seconds one call of `fn` takes (the harness's one clock, time.perf_counter; `clock=time.thread_time`:
    this thread's CPU time, which another process taking a core does not add to)."""
    clock = clock or time.perf_counter
    start = clock()
    fn()
    return clock() - start


def timed_call(fn: Callable[[], Any], clock: Callable[[], float] | None = None) -> tuple[float, Any]:
    """`timed`'s seconds of one call of `fn`, with what it returned (a transcription's text, a decode's ids)."""
    clock = clock or time.perf_counter
    start = clock()
    result = fn()
    return clock() - start, result


def summing(fn: Callable[..., Any], add: Callable[[float], None], clock: Callable[[], float] | None = None
            ) -> Callable[..., Any]:
    """`fn` wrapped to time each of its calls: their seconds go to `add` (a call that raises counts too), their
    results back to the caller. For a profile of one part of a run (an encoder session, an alignment)."""
    clock = clock or time.perf_counter

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            add(clock() - start)

    return wrapper


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """The fastest of `repeat` timed calls, in seconds: what a run of a side reports when the noise to
    filter is other processes taking a core (a run can only be slowed by it)."""
    return min(timed(fn) for _ in range(max(1, repeat)))


def prepared(out: Path, make: Callable[[Path], None]) -> float | None:
    """Make `out` unless it is there (a previous run's): seconds taken, or None when reused. `make(stage)` writes
    a path inside a staging folder of this call's own beside `out`, renamed into place when done; on failure only
    that staging folder goes, never a folder another run or the user left."""
    if out.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        stage = staging / out.name
        seconds = timed(lambda: make(stage))
        stage.rename(out)  # fails rather than replace what appeared at `out` meanwhile
        return seconds
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # made by mkdtemp above: this call's alone


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by rank (the value at index q*n of the sorted values; NaN when empty)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: Iterable[float]) -> float:
    """The median (NaN when there is none)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def summary(values: Sequence[float]) -> dict[str, Any]:
    """The median, the p90, the range and the count of one side's measurements."""
    return {"median": median(values), "p90": quantile(values, 0.9), "min": min(values, default=float("nan")),
            "max": max(values, default=float("nan")), "n": len(values)}


def ratio(after: Sequence[float], before: Sequence[float]) -> float:
    """median(after) / median(before); NaN when either is empty or the base is 0."""
    base = median(before)
    return median(after) / base if base and base == base else float("nan")


def paired_ratios(after: Sequence[float], before: Sequence[float]) -> list[float]:
    """Round by round after / before: two sides measured in the same round shared the machine's state."""
    return [a / b for a, b in zip(after, before) if b]


def run_json(cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
             timeout: float | None = None) -> dict[str, Any]:
    """Run a measuring process and return the last JSON object it printed on stdout (a fresh process per
    run: its own imports, page cache state and allocator, as a user's would have)."""
    done = subprocess.run(list(cmd), env=dict(env) if env is not None else None, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise InputError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise InputError(f"{' '.join(cmd[:3])} ... printed no JSON row")
    return json.loads(lines[-1])


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                        platform.processor())
    except OSError:
        return platform.processor()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info(threads: int | None = None, libraries: Sequence[str] = LIBRARIES) -> dict[str, Any]:
    """Where the figures were taken: CPU model, cores, load averages, the libraries' versions (from their
    installed metadata: nothing is imported), the date."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    versions = {name: _version(name) for name in libraries}
    versions.setdefault("onnxruntime", None)
    if versions["onnxruntime"] is None:  # the GPU wheel's distribution name
        versions["onnxruntime"] = _version("onnxruntime-gpu")
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "load": load, "threads": threads,
            "python": platform.python_version(), **{k: v for k, v in versions.items() if v is not None},
            "date": time.strftime("%Y-%m-%d %H:%M")}


@dataclass(frozen=True)
class Column:
    """A Markdown table column: the row key and how to show its value ('-' when missing)."""

    key: str
    title: str = ""
    fmt: str = "{}"

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        return "-" if value is None else self.fmt.format(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """The rows as a Markdown table, one line a row."""
    lines = ["| " + " | ".join(c.title or c.key for c in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(c.cell(r) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class Report:
    """A scenario's output: its name, its settings, the machine and its rows (JSON-ready dicts)."""

    scenario: str
    settings: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=machine_info)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "machine": self.machine, "settings": self.settings, "rows": self.rows}

    def write(self, path: str | os.PathLike) -> None:
        """The report as JSON (atomically; replaces only an earlier harness report)."""
        text = json.dumps(self.as_dict(), indent=1) + "\n"
        write_file_atomically(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"), REPORT)

    def machine_line(self) -> str:
        m = self.machine
        libs = ", ".join(f"{k} {m[k]}" for k in LIBRARIES if m.get(k))
        return f"{m['cpu']}, {m['cores']} cores, load {m['load']}, Python {m['python']}, {libs}, {m['date']}"


def is_report(path: Path) -> bool:
    """True when `path` holds a JSON report this harness wrote (what Report.write may replace)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(k in data for k in ("scenario", "machine", "rows"))


REPORT = ("a benchmark harness report", is_report)


def write_text(path: str | os.PathLike, text: str) -> None:
    """A table or log a scenario writes: atomically, and never over an existing file."""
    write_file_atomically(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


@dataclass(frozen=True)
class Scenario:
    """One benchmark as a config row: where its entry point is ("module:function", imported only when it
    runs: the scenarios' imports are heavy), what it measures, and the arguments of its smoke run (None:
    it needs what a smoke test cannot have, e.g. a peer's own virtual environment or a GPU)."""

    name: str
    area: str
    target: str
    summary: str
    quick: tuple[str, ...] | None = None

    def entry(self) -> Callable[[], Any]:
        import importlib

        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)
