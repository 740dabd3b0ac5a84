"""The `tfm-export` command line: a Click group whose commands live in sibling modules.

`tfm-export model.pt ...` is routed to `tfm-export export model.pt ...`.
"""

from __future__ import annotations

import importlib
import logging
import signal

from .common import main_group

# Each module registers its commands on `main_group` when imported.
COMMAND_MODULES = ("init_cmd", "export_cmd", "run_cmds", "bench_cmd", "languages_cmd", "demo_cmd", "web_cmd",
                   "serve_cmd", "transcribe_cmd")

for _name in COMMAND_MODULES:
    try:
        importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"{__name__}.{_name}":
            raise

cli = main_group


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM (kill, a CI timeout) unwinds like Ctrl+C, so the exporter removes its .partial-* folder.
    signal.signal(signal.SIGTERM, _terminate)
    main_group(prog_name="tfm-export")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
