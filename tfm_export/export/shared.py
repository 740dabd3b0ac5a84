"""What every export shares, the checkpoint's (export.exporter) and a user's module's (export.module_export): the
limits torch.onnx is held to, a quiet torch.onnx, stage timing for the CLI's progress, the versions a manifest
records."""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from typing import Callable, Iterator

import onnx
import torch

from .. import __version__
from ..errors import ExportError
from .options import OPSETS  # declared with ExportOptions.opset

log = logging.getLogger(__name__)

# Protobuf cannot hold more than 2 GB; bigger models keep their weights in external files (a margin
# below 2 GB: a graph holds the shared embedding besides its share of the parameters).
EXTERNAL_DATA_BYTES = 1_500_000_000
# on_stage(name, None) when a stage starts, on_stage(name, seconds) when it ends.
StageCallback = Callable[[str, "float | None"], None]


def check_opset(opset: int) -> None:
    """ExportError unless torch.onnx writes `opset` as asked (OPSETS)."""
    if not OPSETS[0] <= opset <= OPSETS[1]:
        raise ExportError(f"{{opset}} is not supported: the exporter writes opsets {OPSETS[0]}..{OPSETS[1]}",
                          options={"opset": opset})


def needs_external_data(model: torch.nn.Module, forced: bool = False) -> bool:
    """Whether the graphs keep their weights in external files (`forced`, or too big for protobuf)."""
    return forced or sum(p.numel() * p.element_size() for p in model.parameters()) > EXTERNAL_DATA_BYTES


def versions() -> dict[str, str | None]:
    """The manifest's `created_by`: this package's and the exporting libraries' versions."""
    import onnxscript

    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    return {"tfm_export": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__, "onnxruntime": ort_version}


class Stages:
    """Times named stages and reports each to a callback (the CLI's progress display)."""

    def __init__(self, callback: StageCallback | None):
        self.callback = callback

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.callback:
            self.callback(name, None)
        start = time.perf_counter()
        yield
        seconds = time.perf_counter() - start
        log.info("%s: %.1f s", name, seconds)
        if self.callback:
            self.callback(name, seconds)


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """torch.onnx logs and warns a lot on success; keep that out of the user's terminal."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
