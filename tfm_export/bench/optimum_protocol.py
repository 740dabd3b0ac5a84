"""What every mode of optimum_worker.py shares: its arguments and reply stream, JSON lines answered one per line,
and folders written in a staging folder of their own then renamed into place.

Like the worker, it runs in Optimum's own virtual environment and imports neither tfm_export nor the benchmarks:
the worker's modes import it by its flat name (a script's folder is first on sys.path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TextIO
import argparse
import json
import shutil
import sys
import tempfile
import torch
import transformers


def staged(out: Path, write: Callable[[Path], None]) -> None:
    """`write(partial)` into a staging folder of this call's own beside `out`, then renamed to `out` (which fails
    rather than replace a folder this script did not write); on failure only that staging folder goes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        write(staging / out.name)
        (staging / out.name).rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # made by mkdtemp above: this call's alone


def serve(handle: Callable[[dict[str, Any]], dict[str, Any]], requests: TextIO, replies: TextIO) -> None:
    """One JSON reply line per JSON request line (every mode's timing server answers through it)."""
    for line in requests:
        try:
            reply = handle(json.loads(line))
        except Exception as exc:  # answered, so the caller sees why; the next request may still work
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def timing_server_args(doc: str, folder_help: str, cache_help: str) -> tuple[argparse.Namespace, Any]:
    """A timing server's arguments, and its replies' stream: stdout carries the replies only (anything printed
    goes to stderr), transformers quiet, torch on --threads."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", type=Path, help=folder_help)
    parser.add_argument("cache", type=Path, help=cache_help)
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads and torch threads")
    args = parser.parse_args()
    replies, sys.stdout = sys.stdout, sys.stderr
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    return args, replies
