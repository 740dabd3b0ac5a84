"""`tfm-export export` (also `tfm-export MODEL`) and `tfm-export validate`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from ..errors import ValidationError
from .common import cli_option, hub_options, library_errors, main_group, missing_modules, requires_extra, resolve_model_arg
from .progress import StageDisplay
from ..export.int4 import Int4Settings

def import_options(fn=None, records: bool = True):
    """The options shared by every command that loads a checkpoint of any layout (`records`: the command
    writes the checkpoint's front end into the manifest, as export does; validate only loads the model)."""
    if fn is None:
        return lambda fn: import_options(fn, records)
    frontends = ("kaldi-fbank (Kaldi's filterbank, n_feats bins; the speech_tutorial layout's default) "
                 "or none (the frames come from the caller: generate --features).")
    if records:
        frontend_help = ("A frames model's front end, recorded in the manifest so that `transcribe` reads audio: "
                         + frontends)
        fbank_help = ("A filterbank field over torchaudio.compliance.kaldi.fbank's defaults (repeatable), e.g. "
                      "sample_scale=32768 (Kaldi's 16-bit samples), frame_shift_ms=10, normalize=mean_var "
                      "(docs/speech.md lists them).")
    else:  # validate compares the graphs on frames and keeps the manifest's front end as export wrote it
        frontend_help = ("A frames model's front end, as given to export; only checked against the model here "
                         f"(validate compares frames and leaves the manifest's front end as it is): {frontends}")
        fbank_help = ("A filterbank field (repeatable) as given to export, e.g. sample_scale=32768; only checked "
                      "against the model here (docs/speech.md lists them).")
    options = [
        click.option("--layout", default=None,
                     help="Checkpoint layout (default: detected from the key names), e.g. tfm-export, "
                          "tutorial, nn_transformer, marian."),
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="JSON file with a TransformerConfig, for a bare state_dict saved from our model."),
        click.option("--heads", type=int, help="Attention heads (not readable from weights)."),
        click.option("--src-pad-id", type=int, help="Source padding id."),
        click.option("--tgt-pad-id", type=int, help="Target padding id."),
        click.option("--bos-id", type=int, help="Decoder start (BOS) id."),
        click.option("--eos-id", type=int, help="End-of-sequence id."),
        click.option("--norm-first/--norm-after", default=None,
                     help="Layer norm placement of an nn.Transformer model (pre-LN / post-LN)."),
        click.option("--activation", type=click.Choice(["relu", "gelu", "silu"]),
                     help="Feed-forward activation of an nn.Transformer model."),
        click.option("--max-len", type=int, help="Longest sequence, when the weights do not fix it."),
        click.option("--frontend", type=click.Choice(["kaldi-fbank", "none"]), default=None, help=frontend_help),
        click.option("--fbank", multiple=True, metavar="KEY=VALUE", callback=parse_fbank, help=fbank_help),
        click.option("--trust-pickle", is_flag=True,
                     help="Load a whole pickled module (runs code from the file: only for files you trust)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_fbank(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any] | None:
    """Click callback: `--fbank KEY=VALUE` -> {field: value} typed as filterbank.Filterbank's fields (None: none
    given); an unknown field or a value of the wrong type is a usage error."""
    from ..filterbank import FIELD_TYPES

    fields: dict[str, Any] = {}
    for item in values:
        key, sep, text = item.partition("=")
        if not sep or key not in FIELD_TYPES:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE with KEY one of {', '.join(FIELD_TYPES)}")
        try:
            fields[key] = FIELD_PARSERS.get(FIELD_TYPES[key], FIELD_TYPES[key])(text)
        except ValueError:
            raise click.BadParameter(f"{key} takes a {FIELD_TYPES[key].__name__}, got {text!r}") from None
    return fields or None


def _boolean(text: str) -> bool:
    if text.lower() not in BOOLEANS:
        raise ValueError(text)
    return BOOLEANS[text.lower()]


BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
# A field's type -> how its --fbank text is read (else the type itself: int, float, str)
FIELD_PARSERS = {bool: _boolean}


def int4_options(fn):
    """`--int4-<field>` for each field of export.int4.Int4Settings (its one declaration: help, choices,
    default); unset (None) unless given, so that export_command can tell given from default."""
    for item in reversed(dataclasses.fields(Int4Settings)):
        flag = f"--int4-{item.name.replace('_', '-')}"
        meta = item.metadata
        if item.type in (bool, "bool"):
            option = click.option(flag, f"int4_{item.name}", is_flag=True, default=None, help=meta["help"])
        else:
            kind = click.Choice([str(c) for c in meta["choices"]])
            option = click.option(flag, f"int4_{item.name}", type=kind, default=None, show_choices=True,
                                  callback=lambda ctx, param, value, chosen={str(c): c for c in meta["choices"]}:
                                  None if value is None else chosen[value],  # "128" -> 128, "auto" stays
                                  help=f"{meta['help']} Default {item.default}; with --quantize int4.")
        fn = option(fn)
    return fn


def int4_settings(given: dict[str, Any]) -> Int4Settings | None:
    """The Int4Settings of the `int4_*` options given (popped from `given`), or None when none was given."""
    values = {f.name: given.pop(f"int4_{f.name}") for f in dataclasses.fields(Int4Settings)}
    values = {name: value for name, value in values.items() if value is not None}
    return Int4Settings(**values) if values else None


# The library's range (export.shared.OPSETS; a test keeps them equal), checked by click before any work.
OPSETS = click.IntRange(17, 25)


@main_group.command("export")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: MODEL_onnx/ next to the checkpoint).")
@click.option("--opset", type=OPSETS, default=18, show_default=True,
              help=f"ONNX opset version ({OPSETS.min}..{OPSETS.max}).")
@click.option("--atol", type=click.FloatRange(min=0, min_open=True), default=1e-4, show_default=True,
              help="Validation tolerance: max abs difference between ORT and eager outputs.")
@click.option("--no-validate", is_flag=True, help="Skip the ORT-vs-eager validation (not recommended).")
@click.option("--force", is_flag=True,
              help="Replace the output folder if it holds a previous export (never a folder with other files).")
@click.option("--optimize", is_flag=True, help="Fuse the graphs for ONNX Runtime (attention with past, skip-layer-norm, GELU).")
@click.option("--quantize", type=click.Choice(["int8", "int4"]), default=None,
              help="Weights for CPU: int8 (dynamic int8 MatMuls) or int4 (4-bit MatMulNBits; the vocabulary head "
                   "int8, or a scan with exact candidates when large: --int4-head); validation reports token "
                   "agreement with float32.")
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
              help="Weights and compute dtype; float16 is for CUDA (caches float16, logits float32).")
@click.option("--cuda-graph", is_flag=True,
              help="Also export decoder_static.onnx (pre-allocated cache): CUDA replays each step as a graph, and "
                   "`tfm-export serve` batches requests in flight with it (on CPU with decoder_rows.onnx, also "
                   "exported for float32).")
@click.option("--static-slots", type=click.IntRange(min=2), default=None,
              help="Cache slots of decoder_static.onnx (default: max_len): the most tokens a row generates with "
                   "it; fewer make every step cheaper (attention spans all slots). Implies --cuda-graph.")
@click.option("--external-data", is_flag=True,
              help="Keep each graph's weights in a GRAPH.onnx.data file beside it (automatic for models over "
                   "1.5 GB: protobuf holds 2 GB at most); variants keep their own data files.")
@click.option("--eval-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Held-out set for the quality report: `source<TAB>reference` per line (for speech, an audio "
                   "file's path relative to this file). A variant is scored against its float32 graphs and the "
                   "references: chrF and BLEU, WER for speech (default: the checkpoint's sample texts).")
@click.option("--max-quality-drop", type=click.FloatRange(min=0), default=None, metavar="POINTS",
              help="Fail the export (nothing written) when the variant loses more than POINTS of chrF against the "
                   "references (against float32's outputs without them; WER points for speech).")
@click.option("--calibration-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Source texts like the model's real inputs, one a line (a TSV's first column is read), for "
                   "--int4-method gptq: each is decoded once and what every layer reads on it weights the "
                   "rounding. Never the held-out --eval-file: a calibrated model would be scored on its own data.")
@click.option("--adapter", default=None, metavar="PACKAGE.MODULE:OBJECT",
              help="Your own architecture: MODEL is a module saved whole (torch.save(model, path), with "
                   "--trust-pickle) and OBJECT provides encode(model, src_ids, src_mask) and, to generate, "
                   "decode(model, tgt_ids, memory, src_mask), plus its special ids and sizes as attributes "
                   "(docs/exporting.md, 'Your own architecture').")
@int4_options
@hub_options
@import_options
@library_errors
def export_command(model: Path, out: Path | None, opset: int, atol: float, no_validate: bool, force: bool,
                   optimize: bool, quantize: str | None, dtype: str, cuda_graph: bool, static_slots: int | None,
                   external_data: bool, eval_file: Path | None, max_quality_drop: float | None,
                   calibration_file: Path | None, adapter: str | None, revision: str | None, token: str | None,
                   **load_opts: Any) -> None:
    """Export MODEL (a checkpoint file, a Hugging Face folder, or a Hugging Face Hub id such as
    Helsinki-NLP/opus-mt-en-de, downloaded into the Hugging Face cache) to ONNX, then validate it.

    A path that exists is always a path: a folder named like a Hub id is used as it is."""
    requires_extra("export", "export")
    int4 = int4_settings(load_opts)
    if adapter is not None:
        variant = optimize or quantize or int4 or dtype != "float32" or cuda_graph or static_slots is not None
        if variant or eval_file or max_quality_drop is not None or external_data or calibration_file:
            raise click.UsageError("--adapter exports float32 graphs without a cache: drop --optimize, --quantize, "
                                   "--int4-*, --dtype, --cuda-graph, --static-slots, --external-data, --eval-file, "
                                   "--max-quality-drop and --calibration-file")
        _export_module(model, out, adapter, opset, atol, no_validate, force, load_opts)
        return
    from ..export.exporter import ExportOptions, check_options, default_out_dir, export_model
    from ..export.validation_report import format_report
    from ..importers import load_model
    from ..files import check_output_dir

    # A Hub id's default output is NAME_onnx/ here, never beside the snapshot inside the Hugging Face cache.
    default = default_out_dir(model) if model.exists() else Path(f"{model.name}_onnx")
    out = out or default
    options = ExportOptions(opset=opset, atol=atol, validate=not no_validate, force=force, optimize=optimize,
                            quantize=quantize, int4=int4, dtype=dtype,
                            static_cache=cuda_graph or static_slots is not None,
                            static_slots=static_slots, external_data=external_data,
                            eval_file=str(eval_file) if eval_file else None,
                            max_quality_drop=max_quality_drop,
                            calibration_file=str(calibration_file) if calibration_file else None)
    # Before downloading or loading: never lose a user's file, and refuse what the options alone rule out.
    check_output_dir(out, force, [model])
    check_options(options)
    resolved = resolve_model_arg(model, revision, token)
    click.echo(f"exporting {model} -> {out}", err=True)
    checkpoint = load_model(resolved.path, origin=resolved.origin, **load_opts)
    _echo_detected(checkpoint)
    try:
        with StageDisplay() as show:
            manifest = export_model(checkpoint, out, options, on_stage=show)
    except ValidationError as exc:
        click.echo(format_report(exc.report), err=True)
        raise
    if manifest.validation:
        click.echo(format_report(manifest.validation))
    click.echo(f"wrote {out} ({', '.join(g.file for g in manifest.graphs.values())}, manifest.json)")


def _export_module(model: Path, out: Path | None, adapter: str, opset: int, atol: float, no_validate: bool,
                   force: bool, load_opts: dict[str, Any]) -> None:
    """`--adapter`: the pickled module through the adapter's encode/decode (export.module_export)."""
    from ..export.exporter import default_out_dir
    from ..export.module_export import export_with_adapter, load_adapter, load_module
    from ..files import check_output_dir

    out = out or default_out_dir(model)
    check_output_dir(out, force, [model])
    spec = load_adapter(adapter)  # before unpickling: a wrong name fails fast
    click.echo(f"exporting {model} -> {out} through the adapter {adapter}", err=True)
    module = load_module(model, load_opts["trust_pickle"])
    ids = {k: load_opts.get(k) for k in ("src_pad_id", "tgt_pad_id", "bos_id", "eos_id", "max_len")}
    with StageDisplay() as show:
        manifest = export_with_adapter(module, spec, out, opset=opset, atol=atol, validate=not no_validate,
                                       force=force, on_stage=show, source={"checkpoint": model.name}, inputs=[model],
                                       **ids)
    report = manifest.validation or {}
    for name, row in report.get("outputs", {}).items():
        click.echo(f"  {name}: max abs diff {row['max_abs']:.2e} (atol {report['atol']:g})")
    for name in ("greedy", "beam"):
        if name in report:
            click.echo(f"  {name} tokens equal on {report[name]['equal']}/{report[name]['sources']} sources")
    click.echo(f"wrote {out} ({', '.join(g.file for g in manifest.graphs.values())}, manifest.json)")


def _echo_detected(checkpoint: Any) -> None:
    meta = checkpoint.meta or {}
    cfg = checkpoint.config
    layout = meta.get("layout", "tfm-export")
    click.echo(f"  layout {layout}: d_model {cfg.d_model}, {cfg.n_heads} heads, {cfg.n_encoder_layers}+"
               f"{cfg.n_decoder_layers} layers, d_ff {cfg.d_ff}, vocab {cfg.src_vocab_size}/{cfg.tgt_vocab_size}, "
               f"max_len {cfg.max_len}", err=True)
    if meta.get("options"):
        click.echo(f"  options used: {meta['options']}", err=True)
    if meta.get("detected"):
        click.echo(f"  detected: {meta['detected']}", err=True)


@main_group.command("validate")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--model", "model_path", type=click.Path(path_type=Path),
              help="The checkpoint (or Hugging Face folder or Hub id) the folder was exported from, to compare "
                   "with eager (default: the one the manifest names, when it sits next to the folder, at its recorded "
                   "path with the same weights, or in the Hugging Face cache, and PyTorch is installed).")
@click.option("--atol", type=float, default=1e-4, show_default=True, help="Max abs difference allowed.")
@hub_options
@import_options(records=False)
@library_errors
def validate_command(folder: Path, model_path: Path | None, atol: float, revision: str | None, token: str | None,
                     **load_opts: Any) -> None:
    """Check an export FOLDER: runtime checks, then against the eager model when its checkpoint is at hand.

    The runtime checks need no PyTorch: the manifest's schema and hashes, each graph against the manifest,
    greedy decoding of the recorded samples. The eager comparison (the `export` extra) stores its report
    in the manifest.
    """
    from ..manifest import describe_source, load_manifest
    from ..runtime.verify import format_verification, verify_export

    if model_path is not None:
        requires_extra("export", "validate --model")
    manifest = load_manifest(folder)
    click.echo(f"{folder}: {describe_source(manifest.source)}")
    click.echo(format_verification(verify_export(folder, manifest=manifest)))
    if (manifest.validation or {}).get("quality"):  # measured at export (export.quality)
        from ..export.quality import format_quality

        click.echo(format_quality(manifest.validation["quality"]))
    if model_path is not None:
        model_path = resolve_model_arg(model_path, revision, token).path
    model_path = model_path or _recorded_checkpoint(folder, manifest)
    if model_path is None:
        return
    from ..manifest import write_manifest
    from ..export.validate import validate_export
    from ..export.validation_report import format_report
    from ..importers import load_model

    model = load_model(model_path, **load_opts).build_model()
    try:
        with StageDisplay() as show, show.stage("validate"):
            report = validate_export(folder, model, atol=atol, manifest=manifest)
    except ValidationError as exc:
        click.echo(format_report(exc.report), err=True)
        raise
    write_manifest(folder, manifest.replace(validation=report))
    click.echo(format_report(report))
    click.echo(f"{folder}: validation passed")


def _recorded_checkpoint(folder: Path, manifest: Any) -> Path | None:
    """The model FOLDER was exported from (its Hub snapshot in the cache, its local path with the same weights,
    or a checkpoint next to FOLDER), or None (saying why only the runtime checks ran)."""
    if missing_modules("export"):
        why = "PyTorch is not installed (pip install 'tfm-export[export]', then pass --model MODEL.pt)"
    else:
        from ..export.validate import recorded_checkpoint
        from ..importers.hub import cached_snapshot, unchanged_local_origin

        try:
            return (cached_snapshot(manifest.source) or unchanged_local_origin(manifest.source)
                    or recorded_checkpoint(folder, manifest))
        except ValidationError as exc:
            why = exc.render(cli_option)
    click.echo(f"{folder}: runtime checks passed; not compared with the eager model: {why}")
    return None
