"""Device selection and ONNX Runtime session options. Torch-free."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from ..errors import DeviceError
from .hugepages import new_memory_on_huge_pages

log = logging.getLogger(__name__)

GRAPH_OPTIMIZATION = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def max_threads() -> int:
    """The most threads a session may ask for: more only thrash (100000 hangs ORT while it allocates)."""
    return max(64, 4 * (os.cpu_count() or 1))


def check_thread_count(value: int | None, what: str = "threads") -> int | None:
    """None (the default) or an int in 1..max_threads(); DeviceError otherwise."""
    if value is None:
        return None
    limit = max_threads()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise DeviceError(f"{what} must be between 1 and {limit} (or left out for the default), got {value!r}")
    return value


@dataclass(frozen=True)
class RuntimeOptions:
    """ONNX Runtime session settings; the defaults suit interactive greedy decoding."""

    intra_op_threads: int | None = None  # threads inside one op; None: ORT's default (physical cores)
    inter_op_threads: int | None = None  # threads across independent ops (parallel mode only)
    graph_optimization: str = "all"  # disable | basic | extended | all
    parallel_execution: bool = False  # run independent graph branches concurrently
    log_severity: int = 3  # 0 verbose .. 4 fatal; 3 keeps ORT's C++ warnings off the terminal
    profile_prefix: str | None = None  # write ORT's JSON profile with this file prefix
    # Decode with the static-cache decoder, captured as CUDA graphs on CUDA. None: when the device is
    # CUDA and the export has one (--cuda-graph); True: always (on CPU uncaptured; error without one).
    cuda_graph: bool | None = None
    # With the static-cache decoder: beam search and sampling use it too when their tokens fit its slots
    # (on CUDA their steps replay CUDA graphs as well). The server turns it off: its decode thread replays
    # the in-flight rows' graphs while its search lane decodes, and a new capture forbids any other
    # thread's GPU work (runtime.states.rows.RowBatch.capture).
    static_search: bool = True
    # Idle intra-op threads spin for work between ops: fastest on dedicated cores, but on a shared or
    # oversubscribed machine the spinning steals the cores the other threads need (see BENCHMARKS.md).
    spin_wait: bool = True
    # CUDA: let float32 MatMuls run in TensorFloat-32 (Ampere and later). ORT's CUDA provider does so by
    # default, which moved beam scores by ~1e-3 and flipped near-tie beams on an H100 (BENCHMARKS.md,
    # GPU). Off here, so a float32 export computes in float32 on every device; --dtype float16 is the
    # fast path.
    tf32: bool = False
    # ORT copies each MatMul's weights into its packed layout when a session opens: faster steps, about
    # twice the weights' memory. Validation of models over 2 GB turns it off (export.decoding_checks).
    prepack: bool = True
    # ORT's CPU memory arena keeps the largest activations of any run allocated for the next: fast, but
    # the validation's widest shapes would stay held beside the model (off there for models over 2 GB).
    cpu_arena: bool = True
    # CPU: back the memory each session adds (its weights, prepacked) with 2 MiB transparent huge pages
    # (runtime.hugepages): a small-batch step streams every weight, and on 4 KiB pages it took a quarter
    # more CPU time (BENCHMARKS.md). Linux only; a kernel that refuses is ignored.
    huge_pages: bool = True

    def __post_init__(self) -> None:
        check_thread_count(self.intra_op_threads, "intra_op_threads")
        check_thread_count(self.inter_op_threads, "inter_op_threads")

    def session_options(self) -> ort.SessionOptions:
        """The ort.SessionOptions these settings describe."""
        if self.graph_optimization not in GRAPH_OPTIMIZATION:
            raise DeviceError(f"graph_optimization must be one of {', '.join(GRAPH_OPTIMIZATION)}, "
                              f"got {self.graph_optimization!r}")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = GRAPH_OPTIMIZATION[self.graph_optimization]
        opts.log_severity_level = self.log_severity
        if self.intra_op_threads:
            opts.intra_op_num_threads = self.intra_op_threads
        if self.inter_op_threads:
            opts.inter_op_num_threads = self.inter_op_threads
        if not self.spin_wait:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if not self.prepack:
            opts.add_session_config_entry("session.disable_prepacking", "1")
        opts.enable_cpu_mem_arena = self.cpu_arena
        if self.parallel_execution:
            opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        if self.profile_prefix:
            opts.enable_profiling = True
            opts.profile_file_prefix = self.profile_prefix
        return opts


class NoUsableGpu(DeviceError):
    """CUDA was asked for, but ONNX Runtime can use no GPU here; `reason` says why, without advice."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Device:
    """Where sessions run: an ORT provider list plus the OrtValue device for IOBinding."""

    name: str  # cpu | cuda:N
    providers: tuple  # ORT providers, best first
    ort_type: str  # "cpu" or "cuda", as OrtValue and IOBinding name devices
    index: int  # device id


def device_kind(spec: str) -> tuple[str, int] | None:
    """`cpu` -> ("cpu", 0), `cuda`/`cuda:N` -> ("cuda", N), `auto` -> None: the one parser of device
    names, for ONNX Runtime here and for PyTorch (model.eager)."""
    spec = spec.strip().lower()
    if spec == "auto":
        return None
    kind, _, index = spec.partition(":")
    if kind == "cpu" and not index:
        return "cpu", 0
    if kind == "cuda" and (index.isdigit() or not index) and ":" not in index:
        return "cuda", int(index or 0)
    raise DeviceError(f"unknown device {spec!r}; use cpu, cuda, cuda:N or auto")


def parse_device(spec: str) -> Device:
    """`cpu`, `cuda`, `cuda:N` -> Device (CUDA needs the CUDA provider in this onnxruntime build)."""
    kind = device_kind(spec)
    if kind is None:
        raise DeviceError("device auto is resolved when sessions open; pass cpu, cuda or cuda:N here")
    if kind[0] == "cpu":
        return Device("cpu", ("CPUExecutionProvider",), "cpu", 0)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise NoUsableGpu("CUDA requested but this onnxruntime has no CUDA provider; install "
                          "onnxruntime-gpu or use --device cpu", "this onnxruntime has no CUDA provider")
    index = kind[1]
    providers = (("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider")
    return Device(f"cuda:{index}", providers, "cuda", index)


def create_session(path: Path, device: Device, options: RuntimeOptions) -> ort.InferenceSession:
    """An InferenceSession on `device`; refuses ORT's silent fall-back from CUDA to CPU."""
    # Provider start-up failures are logged by ORT's process-wide logger, not the session's.
    # A missing GPU is reported by our DeviceError below, so silence ORT's own errors for CUDA.
    ort.set_default_logger_severity(4 if device.ort_type == "cuda" else options.log_severity)
    with new_memory_on_huge_pages(options.huge_pages and device.ort_type == "cpu"):
        session = ort.InferenceSession(str(path), options.session_options(),
                                       providers=session_providers(device, options))
    if device.ort_type == "cuda" and session.get_providers()[0] != "CUDAExecutionProvider":
        raise NoUsableGpu(f"CUDA requested but ONNX Runtime could not use GPU {device.index} (no GPU, driver "
                          f"or CUDA libraries found); use --device cpu",
                          f"GPU {device.index}: no GPU, driver or CUDA libraries found")
    return session


def session_providers(device: Device, options: RuntimeOptions) -> list:
    """`device.providers` with `options` applied: on CUDA, float32 stays float32 unless `options.tf32`."""
    if device.ort_type != "cuda":
        return list(device.providers)
    (name, cuda), *rest = device.providers
    return [(name, {**cuda, "use_tf32": "1" if options.tf32 else "0"}), *rest]


def open_sessions(paths: dict[str, Path], device: str, options: RuntimeOptions
                  ) -> tuple[Device, dict[str, ort.InferenceSession]]:
    """Sessions for every graph on `device` (`auto`: CUDA when it works, else CPU, logged)."""
    if device.strip().lower() == "auto":
        try:
            return open_sessions(paths, "cuda", options)
        except NoUsableGpu as exc:
            # Nobody asked for CUDA: say why it was passed over, not the advice meant for --device cuda.
            log.info("device auto: using CPU (no GPU ONNX Runtime can use: %s)", exc.reason)
            return open_sessions(paths, "cpu", options)
    chosen = parse_device(device)
    return chosen, {name: create_session(p, chosen, options) for name, p in paths.items()}
