"""Live progress of long steps on stderr: a spinner on a terminal, plain lines otherwise."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO, Iterator

import click

SPINNER = "|/-\\"


class StageDisplay:
    """An `on_stage(name, seconds_or_None)` callback: shows each stage when it starts and ends.

    On a terminal the running stage is one line with a spinner and the elapsed time, rewritten in
    place; elsewhere (logs, CI, pipes) a line when a stage starts and one when it ends. Use it as a
    context manager so the spinner stops when a stage fails.
    """

    def __init__(self, stream: IO[str] | None = None, indent: str = "  "):
        self.stream = stream or sys.stderr
        self.indent = indent
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, name: str, seconds: float | None) -> None:
        if seconds is None:
            self._start(name)
        else:
            self._end(name, seconds)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show one timed stage around the body (for steps outside export_model)."""
        self(name, None)
        start = time.perf_counter()
        yield
        self(name, time.perf_counter() - start)

    def __enter__(self) -> "StageDisplay":
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt()

    def _start(self, name: str) -> None:
        self._halt()
        if not self.live:
            click.echo(f"{self.indent}{name} ...", file=self.stream)
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._spin, args=(name, time.perf_counter()), daemon=True)
        self._thread.start()

    def _end(self, name: str, seconds: float) -> None:
        self._halt()
        click.echo(f"{self.indent}{name:<16} {seconds:6.1f} s", file=self.stream)

    def _spin(self, name: str, start: float) -> None:
        turn = 0
        while not self._stop.wait(0.1 if turn else 0):
            elapsed = time.perf_counter() - start
            self.stream.write(f"\r{self.indent}{name:<16} {elapsed:6.1f} s {SPINNER[turn % len(SPINNER)]}")
            self.stream.flush()
            turn += 1

    def _halt(self) -> None:
        """Stop the spinner and clear its line."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.stream.write("\r\033[K")
        self.stream.flush()
