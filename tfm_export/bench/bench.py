"""Latency benchmark: eager PyTorch vs ONNX Runtime (and peers) on the same weights and inputs.

Backends are interleaved within one run (each repeat runs every backend once, in the harness's rotation)
after a warm-up, so machine noise hits them alike; quote the ratios, not the absolute times.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch

from ..model.checkpoint import Checkpoint
from ..errors import InputError
from ..manifest import Manifest, load_manifest
from ..runtime import GREEDY, DecodeTimings, GenerationConfig, RuntimeOptions, open_export
from . import harness

log = logging.getLogger(__name__)


class Runner(Protocol):
    def generate_ids(self, sources: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                     stop_at_eos: bool = True, timings: DecodeTimings | None = None,
                     config: GenerationConfig | None = None) -> list[list[int]]: ...


@dataclass(frozen=True)
class BenchSettings:
    """What to measure."""

    devices: tuple[str, ...] = ("cpu",)  # cpu, cuda, cuda:N
    batches: tuple[int, ...] = (1, 8)  # batch sizes
    src_len: int = 32  # source tokens per row
    new_tokens: int = 64  # generated per row; EOS is ignored so every backend does the same work
    repeat: int = 5  # timed runs per backend (interleaved)
    warmup: int = 1  # untimed runs per backend first
    threads: int | None = None  # intra-op threads for torch and ORT (None: library defaults)
    spin_wait: bool = True  # ORT's idle intra-op threads spin (RuntimeOptions.spin_wait); off on busy machines
    seed: int = 0  # source ids
    # Beam search with this many beams (1: greedy). Rows are named e.g. ort-beam4; every beam runs
    # new_tokens steps (EOS banned until the last), so per-token times compare across backends.
    num_beams: int = 1


@dataclass
class BenchContext:
    """What backends are built from."""

    checkpoint: Checkpoint | None  # eager needs the weights
    export_dir: Path | None  # ORT needs the export folder
    settings: BenchSettings
    peers: tuple[Path, ...] = ()  # more export folders (e.g. --optimize, int8), each an "ort:<folder>" row
    progress: Callable[[str], None] | None = None  # told "device b<batch>: repeat i/n" as the run goes


def _eager(ctx: BenchContext, device: str) -> Runner | None:
    if ctx.checkpoint is None:
        return None
    from ..model.eager import EagerModel

    return EagerModel(ctx.checkpoint.build_model(), device)


def _ort(ctx: BenchContext, device: str) -> Runner | None:
    if ctx.export_dir is None:
        return None
    # cuda_graph=False: the growing-cache decoder; its CUDA-graph twin is the ort-cuda-graph row.
    options = RuntimeOptions(intra_op_threads=ctx.settings.threads, spin_wait=ctx.settings.spin_wait,
                             cuda_graph=False)
    return open_export(ctx.export_dir, device, options, verify=False)


def _ort_cuda_graph(ctx: BenchContext, device: str) -> Runner | None:
    """ORT replaying CUDA graphs of the static-cache decoder: CUDA and a --cuda-graph export only."""
    if ctx.export_dir is None or not device.startswith("cuda") or ctx.settings.num_beams > 1:
        return None  # beam search runs on the growing cache
    if "decoder_static" not in _manifest(ctx.export_dir).graphs:
        return None
    options = RuntimeOptions(intra_op_threads=ctx.settings.threads, cuda_graph=True)
    return open_export(ctx.export_dir, device, options, verify=False)


def _ctranslate2(compute_type: str) -> Callable[[BenchContext, str], Runner | None]:
    """The CTranslate2 peer, when installed; its int8 row only beside an int8 ORT export."""

    def factory(ctx: BenchContext, device: str) -> Runner | None:
        if ctx.checkpoint is None or importlib.util.find_spec("ctranslate2") is None:
            return None
        if compute_type == "int8" and _ort_quantize(ctx) != "int8":
            return None
        from .ct2 import CT2Runner, unsupported

        if reason := unsupported(ctx.checkpoint.config):
            log.warning("no ctranslate2 row: %s (`python -m benchmarks ct2-batch` converts Hugging Face folders with "
                     "CTranslate2's own converter)", reason)
            return None

        return CT2Runner(ctx.checkpoint.build_model(), device, compute_type, ctx.settings.threads)

    return factory


def _manifest(folder: Path) -> Manifest:
    return load_manifest(folder, verify_hashes=False)  # bench reads the manifest often; hashes once, at open


def _ort_quantize(ctx: BenchContext) -> str | None:
    if ctx.export_dir is None:
        return None
    return _manifest(ctx.export_dir).variant.quantize


# name -> factory; a factory returns None when it cannot run with this context (e.g. no weights).
BACKENDS: dict[str, Callable[[BenchContext, str], Runner | None]] = {
    "eager": _eager, "ort": _ort, "ort-cuda-graph": _ort_cuda_graph, "ctranslate2": _ctranslate2("float32"),
    "ctranslate2-int8": _ctranslate2("int8")}


def _peer_backends(ctx: BenchContext) -> dict[str, Callable[[BenchContext, str], Runner | None]]:
    """The ORT rows (and CUDA-graph rows, where they apply) of each extra export folder, named after it."""
    def on(folder: Path, base: Callable[[BenchContext, str], Runner | None]
           ) -> Callable[[BenchContext, str], Runner | None]:
        return lambda c, device: base(BenchContext(c.checkpoint, folder, c.settings), device)

    return {f"{name}:{folder.name}": on(folder, base) for folder in ctx.peers
            for name, base in (("ort", _ort), ("ort-cuda-graph", _ort_cuda_graph))}


def _check_peers(ctx: BenchContext) -> None:
    """Every peer folder must hold the same model as the main export (else the rows do not compare)."""
    config = _manifest(ctx.export_dir).config if ctx.export_dir else None
    for folder in ctx.peers:
        peer = _manifest(folder).config
        if config is not None and peer != config:
            raise InputError(f"{folder} holds a different model than {ctx.export_dir}; compare exports of one checkpoint")


def bench_target(target: str | os.PathLike, model: str | os.PathLike | None = None
                 ) -> tuple[Checkpoint | None, Path | None]:
    """What `tfm-export bench TARGET [--model MODEL]` measures: TARGET is an export folder (its ORT rows;
    eager rows only with `model`) or a checkpoint (exported to a temporary folder by run_benchmark)."""
    from ..importers import load_any
    from ..manifest import is_export_folder

    export_dir = Path(target) if is_export_folder(target) else None
    weights = model or (None if export_dir else target)
    return (load_any(weights) if weights else None), export_dir


def run_benchmark(checkpoint: Checkpoint | None, export_dir: str | os.PathLike | None,
                  settings: BenchSettings = BenchSettings(),
                  peers: Sequence[str | os.PathLike] = (), progress: Callable[[str], None] | None = None
                  ) -> dict[str, Any]:
    """Measure every available backend on every device and batch; returns the JSON-ready report.

    `peers` are more export folders of the same model, measured as extra ORT rows in the same run;
    `progress` is told where the run is after each repeat (the CLI shows it).
    """
    if settings.threads:
        torch.set_num_threads(settings.threads)
    with tempfile.TemporaryDirectory(prefix="tfm-bench-") as tmp:
        if export_dir is None and checkpoint is not None:
            from ..export.exporter import ExportOptions, export_model

            export_dir = Path(tmp) / "export"
            export_model(checkpoint, export_dir, ExportOptions(validate=False))
        ctx = BenchContext(checkpoint, Path(export_dir) if export_dir else None, settings,
                           tuple(Path(p) for p in peers), progress)
        _check_peers(ctx)
        rows = [row for device in settings.devices for batch in settings.batches
                for row in _measure(ctx, device, batch)]
    _add_speedups(rows)
    return {"machine": machine_info(settings.threads), "settings": asdict(settings), "rows": rows}


def _measure(ctx: BenchContext, device: str, batch: int) -> list[dict[str, Any]]:
    s = ctx.settings
    # Plain greedy or beam search by name: an export's defaults (n-gram bans, length penalty, ...) would
    # make its rows do other work than the eager and CTranslate2 rows.
    config = GREEDY.replace(num_beams=s.num_beams)
    runners = {}
    for name, factory in {**BACKENDS, **_peer_backends(ctx)}.items():
        before = _rss_mb()
        runner = factory(ctx, device)
        if runner is None:
            continue
        sources = _sources(runner, batch, s)
        for _ in range(s.warmup):
            runner.generate_ids(sources, s.new_tokens, stop_at_eos=False, config=config)
        runners[_row_name(name, s)] = (runner, sources, _rss_mb() - before)
    timings: dict[str, list[DecodeTimings]] = {name: [] for name in runners}
    for i, order in enumerate(harness.rotation(list(runners), s.repeat)):
        for name in order:
            runner, sources, _ = runners[name]
            t = DecodeTimings()
            runner.generate_ids(sources, s.new_tokens, stop_at_eos=False, timings=t, config=config)
            timings[name].append(t)
        if ctx.progress:
            ctx.progress(f"{device} b{batch}: repeat {i + 1}/{s.repeat} ({len(runners)} backends)")
    return [_row(name, device, batch, s, timings[name], mem, getattr(runner, "separate_encoder", True))
            for name, (runner, _, mem) in runners.items()]


def _row_name(backend: str, s: BenchSettings) -> str:
    """`ort` -> `ort-beam4` with beams (`ort:peer` -> `ort-beam4:peer`)."""
    if s.num_beams == 1:
        return backend
    kind, colon, peer = backend.partition(":")
    return f"{kind}-beam{s.num_beams}{colon}{peer}"


def _sources(runner: Any, batch: int, s: BenchSettings) -> list[list[int]]:
    cfg = runner.config
    rng = random.Random(s.seed)
    allowed = [i for i in range(cfg.src_vocab_size) if i not in (cfg.src_pad_id, cfg.eos_id)]
    return [[rng.choice(allowed) for _ in range(s.src_len)] for _ in range(batch)]


def _row(name: str, device: str, batch: int, s: BenchSettings, runs: list[DecodeTimings],
         mem_mb: float, separate_encoder: bool = True) -> dict[str, Any]:
    """One table row; encoder_ms is None (the table's `-`) for a backend that times the encoder
    within its first step (CTranslate2), not a measured 0."""
    later = sorted(step for t in runs for step in t.steps_s[1:])
    totals = [t.encoder_s + sum(t.steps_s) for t in runs]
    encoder_ms = 1e3 * harness.median(t.encoder_s for t in runs) if separate_encoder else None
    return {
        "backend": name, "device": device, "batch": batch, "src_len": s.src_len, "new_tokens": s.new_tokens,
        "encoder_ms": encoder_ms,
        "first_step_ms": 1e3 * harness.median(t.steps_s[0] for t in runs),
        "per_token_ms_p50": 1e3 * harness.quantile(later, 0.5),
        "per_token_ms_p90": 1e3 * harness.quantile(later, 0.9),
        "tokens_per_s": batch * s.new_tokens / harness.median(totals),
        "peak_mem_mb": round(mem_mb, 1),
    }


def _add_speedups(rows: list[dict[str, Any]]) -> None:
    """speedup_vs_eager = eager per-token p50 / this backend's, within the same device and batch."""
    eager = {(r["device"], r["batch"]): r["per_token_ms_p50"] for r in rows if r["backend"].split("-beam")[0] == "eager"}
    for r in rows:
        base = eager.get((r["device"], r["batch"]))
        ok = base and r["per_token_ms_p50"] > 0
        r["speedup_vs_eager"] = round(base / r["per_token_ms_p50"], 3) if ok else None


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


def machine_info(threads: int | None) -> dict[str, Any]:
    """Where the figures were taken: the harness's machine info and the GPU, when there is one."""
    return {**harness.machine_info(threads), "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
