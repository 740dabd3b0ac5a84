"""The generic exporter: specs -> ONNX graphs -> manifest, written atomically.

The output goes to a hidden temporary folder beside OUT and is renamed into place only after
every graph is exported, checked and (by default) validated, so a failed run leaves no OUT.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..config import TransformerConfig
from ..model.checkpoint import Checkpoint
from ..errors import ExportError, OutputError, TfmExportError, first_line
from ..filterbank import Filterbank
from ..files import os_error_message, prepare_output_dir
from .contrib import custom_translations
from .graphs import GRAPH_MODULES, dynamic_shapes, example_inputs
from ..graph_io import EARLIER_LOGITS, GraphEntry
from ..manifest import Manifest, Variant, load_manifest, sha256_file, write_manifest
from .calibration import check_calibration, linear_hessians
from .checks import check_graph, external_files, finish_graph
from .folding import fold_transposes
from .earlier_head import guard_earlier_head
from .packing import pack_model
from .rewrite import Edit, rewrite_graph
from .int4 import width_advice
from .memory import release_freed_memory
from .options import ExportOptions, OptionsError, check_options
from .quality import EvalSet, check_drop, measure_quality, variant_quality
from .variants import int4_settings, transform_graphs, validation_settings, variant_of
from ..model.transformer import Transformer
from .shared import StageCallback, Stages, needs_external_data, quiet_exporter, versions
from .specs import ALIGNMENT_NAME, EXTRA_GRAPH_SPECS, GRAPH_SPECS, GraphSpec, alignment_spec, encoder_input

log = logging.getLogger(__name__)

__all__ = ["ExportOptions", "check_options", "default_out_dir", "export_model"]  # ExportOptions: export.options

SLOT_GRAPHS = ("decoder_static", "decoder_rows")  # graphs over a fixed number of cache slots
ROWS_QUANTIZE = (None, "int4")  # the --quantize values that keep decoder_rows.onnx (see _graph_specs)
# The --quantize values whose projections are packed (export.packing): int8's weights have one scale per tensor.
PACKED_QUANTIZE = (None, "int4")


def default_out_dir(checkpoint_path: str | os.PathLike) -> Path:
    """`model.pt` -> `model_onnx/` next to it."""
    path = Path(checkpoint_path)
    return path.parent / f"{path.stem if path.is_file() or path.suffix else path.name}_onnx"


def export_graph(model: Transformer, spec: GraphSpec, folder: Path, opset: int, external: bool = False) -> list[str]:
    """Export one graph described by `spec` into `folder` (weights in external files when `external`);
    returns its external-data file names."""
    module = GRAPH_MODULES[spec.name](model).eval()
    cfg = model.config
    slots = spec.tensor("past.0.self.key").shape[2] if spec.name in SLOT_GRAPHS else cfg.max_len
    # id ranges of the integer inputs (a features input is float: random normal values)
    ids = {encoder_input(cfg).name: cfg.src_vocab_size, "input_ids": cfg.tgt_vocab_size, "cache_len": slots}
    args = example_inputs(spec, ids)
    path = folder / spec.file
    with quiet_exporter():
        try:
            program = torch.onnx.export(
                module, args, dynamo=True, opset_version=opset,
                dynamic_shapes=dynamic_shapes(spec, module.n_named_args),
                custom_translation_table=custom_translations(),
                input_names=spec.input_names(), output_names=spec.output_names(), verbose=False)
        except Exception as exc:  # the exporter raises many types; keep its first line
            raise ExportError(f"torch.onnx could not export the {spec.name}: {first_line(exc)}") from exc
        program.save(str(path), external_data=external)
    if external:
        fold_transposes(path)
    check_graph(path, spec)
    return external_files(path)


def export_model(checkpoint: Checkpoint, out_dir: str | os.PathLike, options: ExportOptions = ExportOptions(),
                 on_stage: StageCallback | None = None) -> Manifest:
    """Export `checkpoint` to `out_dir` (encoder.onnx, decoder.onnx, manifest.json); returns the manifest."""
    out_dir = Path(out_dir)
    eval_set, calibration = check_options(options)  # a bad file: before any work (the options checked themselves)
    slots = options.static_slots
    if slots is not None and not 2 <= slots <= checkpoint.config.max_len:
        raise OptionsError(f"{{static_slots}} must be 2..{checkpoint.config.max_len} (the model's max_len)",
                           options={"static_slots": slots})
    options = _family_defaults(options, checkpoint)
    if calibration is not None:
        check_calibration(checkpoint)
    _check_quality_options(options, eval_set, checkpoint)
    # Before any long work: refuse an OUT that holds user files, prove its parent is writable.
    target = prepare_output_dir(out_dir, options.force,
                                _inputs(checkpoint) + [options.eval_file, options.calibration_file])
    advice = width_advice(checkpoint.config.d_model) if options.quantize == "int4" else None
    if advice:  # after the input checks: a refused command prints its one line alone
        log.warning("%s", advice)
    stage = Stages(on_stage)
    # A variant's quality is measured against its own float32 graphs, copied aside before the transforms: on the
    # eval file, else on the folder's own text or speech (export.quality_sources).
    compare = options.is_variant and options.validate
    float32 = tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.float32-", dir=target.tmp.parent) \
        if compare else contextlib.nullcontext()
    try:
        with stage("load"):
            model = checkpoint.build_model()
        with float32 as reference:
            reference = Path(reference) if reference else None
            manifest = _write_graphs(checkpoint, model, target.tmp, options, stage, reference, calibration)
            release_freed_memory()  # the exporter's freed gigabytes, before the validation's sessions open
            if options.validate:
                manifest = _validate(target.tmp, model, manifest, options, eval_set, reference, stage)
        write_manifest(target.tmp, manifest)  # once, after the last transform and the validation
        target.commit()
    except BaseException as exc:
        target.discard()
        if isinstance(exc, OSError):  # a full disk or a vanished folder mid-export: one line
            raise OutputError(os_error_message(exc, out_dir)) from exc
        raise
    log.info("exported %s to %s", checkpoint.path or "model", out_dir)
    return manifest


def _family_defaults(options: ExportOptions, checkpoint: Checkpoint) -> ExportOptions:
    """`options` with what the model's family decides made concrete: int4's `ffn_output` auto (the importer
    records in `meta` whether the family's FFN output reads outlier activations)."""
    if options.quantize != "int4":
        return options
    outliers = bool(checkpoint.meta.get("ffn_output_outliers"))
    return dataclasses.replace(options, int4=int4_settings(options).resolved(outliers))


def _check_quality_options(options: ExportOptions, eval_set: EvalSet | None, checkpoint: Checkpoint) -> None:
    """Refuse a --max-quality-drop that this checkpoint leaves nothing to score on: nothing silently goes
    unchecked (the rules of the options alone are export.options.RULES)."""
    # Without one, a variant is scored on the folder's own text (a tokenizer's) or speech (espeak-ng's).
    speech = bool(checkpoint.meta.get("speech") or checkpoint.meta.get("filterbank"))
    scorable = shutil.which("espeak-ng") is not None if speech else checkpoint.tokenizer is not None
    if options.max_quality_drop is not None and eval_set is None and not scorable:
        raise OptionsError("{max_quality_drop} needs a held-out set: pass {eval_file} (source<TAB>reference lines)",
                           options={"max_quality_drop": None, "eval_file": None})


def _validate(folder: Path, model: Transformer, manifest: Manifest, options: ExportOptions,
              eval_set: EvalSet | None, reference: Path | None, stage: Stages) -> Manifest:
    """Validation (the manifest's variant decides the checks: parity, float16 tolerance, int8 agreement), then
    the quality report on the held-out set; the manifest with both, or a ValidationError carrying them."""
    from .validate import validate_export

    with stage("validate"):
        report = validate_export(folder, model, options.atol, manifest=manifest)
    default = eval_set is None and reference is not None  # the folder's own text (export.quality_sources)
    if default:
        from .quality_sources import default_eval_set

        eval_set = default_eval_set(folder, manifest)
    # Without float32 graphs to compare with and without references, a report would hold no score.
    if eval_set is not None and (reference is not None or eval_set.references is not None):
        with stage("quality"):
            float32 = (reference, load_manifest(reference)) if reference else None
            try:
                report = {**report, "quality": measure_quality(folder, manifest, eval_set, float32,
                                                               validation_settings(manifest.variant)["device"])}
            except TfmExportError as exc:  # the default set never fails an export that asked for no score
                if not default or options.max_quality_drop is not None:
                    raise
                log.warning("the variant was not scored against float32 on %s: %s", eval_set.origin, exc)
        check_drop(report, options.max_quality_drop)
    return manifest.replace(validation=report, quality=variant_quality(report.get("quality")))


def _write_graphs(checkpoint: Checkpoint, model: Transformer, folder: Path, options: ExportOptions,
                  stage: Stages, reference: Path | None = None, calibration: tuple[str, ...] | None = None
                  ) -> Manifest:
    """Export every graph, transform the variants, stamp and hash each file once; the Manifest of `folder`.
    `reference`: a folder that gets the float32 graphs before the transforms, as an export of its own;
    `calibration`: the source texts GPTQ calibrates on."""
    specs, float32, extra = {}, {}, {}
    external = needs_external_data(model, options.external_data)
    for name, make_spec in _graph_specs(options, model.config).items():
        float32[name] = make_spec(model.config)
        with stage(f"export {name}"):
            extra[name] = export_graph(model, float32[name], folder, options.opset, external)
        specs[name] = make_spec(model.config, options.dtype)  # the I/O after the variant's transforms
    if reference is not None:
        for name, spec in float32.items():
            for file in (spec.file, *extra[name]):
                shutil.copy2(folder / file, reference / file)
    transforms = {}
    if options.is_variant:
        release_freed_memory()  # the graph export's freed gigabytes, before the transforms read the graphs
        # GPTQ's Hessians go to a folder of their own inside this export's staging folder (`folder`, made by
        # this export), removed once the transforms have read them.
        spill = Path(tempfile.mkdtemp(prefix=".hessians-", dir=folder)) if calibration is not None else None
        try:
            hessians = None
            if calibration is not None:
                with stage("calibrate"):
                    hessians = linear_hessians(model, checkpoint, calibration, spill,
                                               decoder_only=int4_settings(options).encoder == "int8")
                release_freed_memory()
            with stage("transform"):
                transforms = transform_graphs(folder, specs, options, hessians)
        finally:
            hessians = None
            if spill is not None:
                shutil.rmtree(spill, ignore_errors=True)
    with stage("finish graphs"):
        for spec in specs.values():
            edits = _finishing_edits(options, spec)
            if edits:
                rewrite_graph(folder / spec.file, edits, external)
    tokenizer, copied = _copy_tokenizer_files(checkpoint, folder)
    manifest = Manifest(config=model.config, graphs=_entries(folder, specs, model.config),
                        variant=variant_of(options, transforms), tokenizer=tokenizer,
                        files={name: sha256_file(folder / name) for name in copied}, samples=checkpoint.samples,
                        source=_source(checkpoint), created_by=versions(),
                        generation=checkpoint.meta.get("generation_defaults") or None,
                        features=checkpoint.meta.get("features"), speech=checkpoint.meta.get("speech"),
                        filterbank=Filterbank.from_dict(fb) if (fb := checkpoint.meta.get("filterbank")) else None)
    if reference is not None:
        for name in copied:
            shutil.copy2(folder / name, reference / name)
        write_manifest(reference, manifest.replace(graphs=_entries(reference, float32, model.config),
                                                   variant=Variant()))
    return manifest


def _finishing_edits(options: ExportOptions, spec: GraphSpec) -> dict[str, Edit]:
    """What is rewritten in a graph once its transforms are done, in one load and save: projections packed
    (float32 and int4: exact, bit for bit, export.packing), then the earlier positions' head put under an If
    (export.earlier_head: every variant's decoder, its head as the transforms left it; a float32 or float16 head
    stays unguarded)."""
    edits: dict[str, Edit] = {}
    if options.dtype == "float32" and options.quantize in PACKED_QUANTIZE:
        edits["packed"] = pack_model
    if EARLIER_LOGITS in spec.output_names():
        edits["earlier_if"] = guard_earlier_head
    return edits


def _entries(folder: Path, specs: dict[str, GraphSpec], config: TransformerConfig) -> dict[str, GraphEntry]:
    """Each graph's manifest entry: stamped with the config (the file's last write), then hashed once with
    the external-data files it names (a variant's own, which its transform wrote)."""
    graphs = {}
    for name, spec in specs.items():
        path = folder / spec.file
        opset = finish_graph(path, config)
        data = {f: sha256_file(folder / f) for f in external_files(path)}
        graphs[name] = GraphEntry(spec, sha256_file(path), opset, data)
    return graphs


def _source(checkpoint: Checkpoint) -> dict:
    """The manifest's `source`: the checkpoint's name and meta (its feature config goes to Manifest.features,
    its speech decoding settings to Manifest.speech, its filterbank to Manifest.filterbank)."""
    meta = {k: v for k, v in checkpoint.meta.items() if k not in ("features", "speech", "filterbank")}
    return {"checkpoint": Path(checkpoint.path).name if checkpoint.path else None, **meta}


def _graph_specs(options: ExportOptions, config: TransformerConfig) -> dict[str, Callable[..., GraphSpec]]:
    """The graphs to export: encoder and decoder, plus those requested (specs.EXTRA_GRAPH_SPECS)."""
    # decoder_rows serves in-flight batching on CPU in float32 (its runtime writes the cache on the
    # host), --optimize and int4 included. float16 (a GPU's) and int8 exports keep decoder_static alone,
    # which the runtime falls back to: int8's activation scales span the batch, so its rows would decode
    # differently from serial calls (int4's MatMulNBits quantise each row's activations apart; its int8
    # head, one MatMul per step, is no worse on the rows than on decoder_static). So do models with T5's
    # relative position bias: the fused operator of the rows graph takes no bias.
    rows = (options.static_cache and options.dtype == "float32" and options.quantize in ROWS_QUANTIZE
            and not config.relative_buckets)
    wanted = {"decoder_static": options.static_cache, "decoder_rows": rows}
    extra = {k: functools.partial(v, slots=options.static_slots) for k, v in EXTRA_GRAPH_SPECS.items() if wanted[k]}
    # Whisper's alignment heads: the graph that times tokens for word timestamps (runtime.speech.alignment)
    aligned = {ALIGNMENT_NAME: alignment_spec} if config.alignment_heads else {}
    return {**GRAPH_SPECS, **extra, **aligned}


def _copy_tokenizer_files(checkpoint: Checkpoint, folder: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """Copy a tokenizer's extra files (e.g. SentencePiece models) next to the graphs and write the files
    the JavaScript runtimes read instead (a Marian source model's tokenizer.json); the manifest's
    tokenizer section that names them, and the names of all these files."""
    source = checkpoint.meta.get("tokenizer_folder")
    if checkpoint.tokenizer is None or not source:
        return checkpoint.tokenizer, []
    from ..text.tokenizer import tokenizer_from_dict

    tokenizer = tokenizer_from_dict(checkpoint.tokenizer, Path(source))
    copied = []
    for path in tokenizer.files():
        shutil.copy2(path, folder / Path(path).name)
        copied.append(Path(path).name)
    data, written = tokenizer.write_runtime_files(folder)
    return data, copied + written


def _inputs(checkpoint: Checkpoint) -> list[str | None]:
    """What the export reads: never inside the folder it replaces."""
    return [checkpoint.path, checkpoint.meta.get("tokenizer_folder")]
