"""The generic exporter: specs -> ONNX graphs -> manifest, written atomically.

The output goes to a hidden temporary folder beside OUT and is renamed into place only after
every graph is exported, checked and (by default) validated, so a failed run leaves no OUT.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import onnx
import torch

from .. import __version__
from ..model.checkpoint import Checkpoint
from ..errors import ExportError, OutputError, TfmExportError
from ..files import os_error_message, prepare_output_dir
from .graphs import GRAPH_MODULES, dynamic_shapes, example_inputs
from ..manifest import FORMAT, graph_entry, write_manifest
from ..model.transformer import Transformer
from .specs import EXTRA_GRAPH_SPECS, GRAPH_SPECS, GraphSpec

log = logging.getLogger(__name__)

# Protobuf cannot hold more than 2 GB; bigger models keep their weights in external files.
EXTERNAL_DATA_BYTES = 1_500_000_000
# on_stage(name, None) when a stage starts, on_stage(name, seconds) when it ends.
StageCallback = Callable[[str, "float | None"], None]


@dataclass(frozen=True)
class ExportOptions:
    """How to export and check a checkpoint."""

    opset: int = 18  # ONNX opset of both graphs
    atol: float = 1e-4  # validation tolerance (max abs diff) for float outputs
    validate: bool = True  # compare ORT with eager before the folder is renamed into place
    force: bool = False  # replace an existing OUT
    dtype: str = "float32"  # weights/compute dtype of the graphs (float16: CUDA only)
    optimize: bool = False  # fuse the graphs for ONNX Runtime (tfm_export.variants)
    quantize: str | None = None  # "int8": dynamic int8 weights for CPU (tfm_export.variants)
    static_cache: bool = False  # also export decoder_static.onnx (pre-allocated cache, for CUDA graphs)

    @property
    def is_variant(self) -> bool:
        """True when the float32 graphs are transformed after export."""
        return self.dtype != "float32" or self.optimize or self.quantize is not None


def default_out_dir(checkpoint_path: str | os.PathLike) -> Path:
    """`model.pt` -> `model_onnx/` next to it."""
    path = Path(checkpoint_path)
    return path.parent / f"{path.stem if path.is_file() or path.suffix else path.name}_onnx"


def export_graph(model: Transformer, spec: GraphSpec, folder: Path, opset: int) -> list[str]:
    """Export one graph described by `spec` into `folder`; returns its external-data file names."""
    module = GRAPH_MODULES[spec.name](model).eval()
    cfg = model.config
    args = example_inputs(spec, {"src_ids": cfg.src_vocab_size, "input_ids": cfg.tgt_vocab_size,
                                 "cache_len": cfg.max_len})
    path = folder / spec.file
    big = sum(p.numel() * p.element_size() for p in model.parameters()) > EXTERNAL_DATA_BYTES
    with _quiet_exporter():
        try:
            program = torch.onnx.export(
                module, args, dynamo=True, opset_version=opset,
                dynamic_shapes=dynamic_shapes(spec, module.n_named_args),
                input_names=spec.input_names(), output_names=spec.output_names(), verbose=False)
        except Exception as exc:  # the exporter raises many types; keep its first line
            raise ExportError(f"torch.onnx could not export the {spec.name}: {_first_line(exc)}") from exc
        program.save(str(path), external_data=big)
    check_graph(path, spec)
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(spec.file) and p.name != spec.file)


def check_graph(path: Path, spec: GraphSpec) -> None:
    """Full onnx.checker (with strict shape inference) and the spec's I/O names, in order."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"{path.name} failed onnx.checker: {_first_line(exc)}") from exc
    proto = onnx.load(str(path), load_external_data=False)
    got_in = [v.name for v in proto.graph.input]
    got_out = [v.name for v in proto.graph.output]
    if got_in != spec.input_names() or got_out != spec.output_names():
        raise ExportError(f"{path.name} has inputs {got_in[:3]}... outputs {got_out[:3]}..., not the "
                          f"spec's; this is a bug in tfm-export, please report it")


def export_model(checkpoint: Checkpoint, out_dir: str | os.PathLike, options: ExportOptions = ExportOptions(),
                 on_stage: StageCallback | None = None) -> dict[str, Any]:
    """Export `checkpoint` to `out_dir` (encoder.onnx, decoder.onnx, manifest.json); returns the manifest."""
    out_dir = Path(out_dir)
    # Before any long work: refuse an OUT that holds user files, prove its parent is writable.
    target = prepare_output_dir(out_dir, options.force, _inputs(checkpoint))
    tmp = target.tmp
    stage = _Stages(on_stage)
    try:
        with stage("load"):
            model = checkpoint.build_model()
        graphs = {}
        for name, make_spec in _graph_specs(options).items():
            spec = make_spec(model.config)
            with stage(f"export {name}"):
                extra = export_graph(model, spec, tmp, options.opset)
            graphs[name] = graph_entry(spec, tmp, options.opset, extra)
        manifest = _manifest(checkpoint, model, graphs, options, _copy_tokenizer_files(checkpoint, tmp))
        if options.is_variant:
            from .variants import apply_variants

            with stage("transform"):
                apply_variants(tmp, manifest, model, options)
        write_manifest(tmp, manifest)
        if options.validate:
            from .validate import validate_export

            with stage("validate"):
                # The manifest's variant decides the checks (parity, float16 tolerance, int8 agreement).
                manifest["validation"] = validate_export(tmp, model, atol=options.atol)
            write_manifest(tmp, manifest)
        target.commit()
    except BaseException as exc:
        target.discard()
        if isinstance(exc, OSError):  # a full disk or a vanished folder mid-export: one line
            raise OutputError(os_error_message(exc, out_dir)) from exc
        raise
    log.info("exported %s to %s", checkpoint.path or "model", out_dir)
    return manifest


def _graph_specs(options: ExportOptions) -> dict[str, Callable[..., GraphSpec]]:
    """The graphs to export: encoder and decoder, plus those requested (specs.EXTRA_GRAPH_SPECS)."""
    wanted = {"decoder_static": options.static_cache}
    return {**GRAPH_SPECS, **{k: v for k, v in EXTRA_GRAPH_SPECS.items() if wanted[k]}}


def _manifest(checkpoint: Checkpoint, model: Transformer, graphs: dict, options: ExportOptions,
              tokenizer: dict | None) -> dict[str, Any]:
    cfg = model.config
    return {
        "format": FORMAT,
        "created_by": _versions(),
        "config": cfg.to_dict(),
        "special_ids": {"src_pad": cfg.src_pad_id, "tgt_pad": cfg.tgt_pad_id, "bos": cfg.bos_id,
                        "eos": cfg.eos_id},
        "tokenizer": tokenizer,
        "samples": checkpoint.samples,
        "source": {"checkpoint": Path(checkpoint.path).name if checkpoint.path else None, **checkpoint.meta},
        # apply_variants() rewrites this when the graphs are transformed after export.
        "variant": {"dtype": "float32", "io_dtype": "float32", "optimized": False, "quantize": None},
        "graphs": graphs,
        "validation": None,
    }


def _copy_tokenizer_files(checkpoint: Checkpoint, folder: Path) -> dict | None:
    """Copy a tokenizer's extra files (e.g. SentencePiece models) next to the graphs."""
    if checkpoint.tokenizer is None:
        return None
    source = checkpoint.meta.get("tokenizer_folder")
    if source:
        from ..text.tokenizer import tokenizer_from_dict

        for path in tokenizer_from_dict(checkpoint.tokenizer, Path(source)).files():
            shutil.copy2(path, folder / Path(path).name)
    return checkpoint.tokenizer


def _inputs(checkpoint: Checkpoint) -> list[str | None]:
    """What the export reads: never inside the folder it replaces."""
    return [checkpoint.path, checkpoint.meta.get("tokenizer_folder")]


def _versions() -> dict[str, str | None]:
    import onnxscript

    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    return {"tfm_export": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__, "onnxruntime": ort_version}


class _Stages:
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
def _quiet_exporter() -> Iterator[None]:
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


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, TfmExportError):
        return str(exc)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]
