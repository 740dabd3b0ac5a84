"""`tfm-export export` (also `tfm-export MODEL`) and `tfm-export validate`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import click

from ..errors import ValidationError
from .common import cli_option, hub_options, library_errors, main_group, requires_extra, resolve_model_arg
from .progress import StageDisplay
from ..export.int4 import Int4Settings
from ..export.options import OPTIONS

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


# A declared option's kind -> the Click attributes of its flag (export.options.OPTIONS; "settings": int4's,
# made by int4_options from Int4Settings).
def _number(o: Any) -> dict[str, Any]:
    ranged, plain = (click.IntRange, int) if o.kind == "integer" else (click.FloatRange, float)
    b = o.bounds
    if not b:
        return {"type": plain}
    return {"type": ranged(min=b.get("minimum", b.get("exclusiveMinimum")), min_open="exclusiveMinimum" in b,
                           max=b.get("maximum", b.get("exclusiveMaximum")), max_open="exclusiveMaximum" in b)}


CLICK_KINDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "integer": _number, "number": _number,
    "boolean": lambda o: {"is_flag": True, "flag_value": not o.default},  # --force True, --no-validate False
    "choice": lambda o: {"type": click.Choice(o.choices)},
    "file": lambda o: {"type": click.Path(exists=True, dir_okay=False, path_type=str)},
}


def export_flag(o: Any) -> click.Option:
    """The Click option of a declared export option: its flag, help (`{field}` spelled as flags), default,
    bounds or choices."""
    from ..runtime.options.spec import render_help

    attrs = CLICK_KINDS[o.kind](o)
    shown = o.default is not None and o.kind != "boolean"
    help = render_help(o.help, lambda name: EXPORT_OPTIONS[name].flag)
    return click.Option([o.flag, o.name], default=o.default, show_default=shown, metavar=o.metavar, help=help,
                        **attrs)


def export_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A flag per ExportOptions field that the CLI takes, in declaration order."""
    fn.__click_params__ = [*getattr(fn, "__click_params__", []),
                           *reversed([export_flag(o) for o in EXPORT_OPTIONS.values() if o.cli])]
    return fn


def export_flag_of(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One declared export option's flag on another command (validate's --atol)."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__click_params__ = [*getattr(fn, "__click_params__", []), export_flag(EXPORT_OPTIONS[name])]
        return fn
    return decorate


def export_options(given: dict[str, Any]) -> Any:
    """The ExportOptions of the flags given (popped from `given`, int4's too): the library checks them."""
    from ..export.options import ExportOptions

    return ExportOptions(**{name: given.pop(name) for name, o in EXPORT_OPTIONS.items() if o.cli},
                         int4=int4_settings(given))


EXPORT_OPTIONS = {o.name: o for o in OPTIONS}
OPSETS = CLICK_KINDS["integer"](EXPORT_OPTIONS["opset"])["type"]  # the library's range, checked by click first


@main_group.command("export")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: MODEL_onnx/ next to the checkpoint).")
@export_flags
@click.option("--adapter", default=None, metavar="PACKAGE.MODULE:OBJECT",
              help="Your own architecture: MODEL is a module saved whole (torch.save(model, path), with "
                   "--trust-pickle) and OBJECT provides encode(model, src_ids, src_mask) and, to generate, "
                   "decode(model, tgt_ids, memory, src_mask), plus its special ids and sizes as attributes "
                   "(docs/exporting.md, 'Your own architecture').")
@int4_options
@hub_options
@import_options
@library_errors
def export_command(model: Path, out: Path | None, adapter: str | None, revision: str | None, token: str | None,
                   **given: Any) -> None:
    """Export MODEL (a checkpoint file, a Hugging Face folder, or a Hugging Face Hub id such as
    Helsinki-NLP/opus-mt-en-de, downloaded into the Hugging Face cache) to ONNX, then validate it.

    A path that exists is always a path: a folder named like a Hub id is used as it is."""
    requires_extra("export", "export")
    options = export_options(given)  # what is left of `given`: the import options
    if adapter is not None:
        from ..export.options import module_options

        _export_module(model, out, adapter, module_options(options), given)
        return
    from ..export.exporter import check_options, default_out_dir, export_model
    from ..export.quality import format_variant_quality
    from ..export.validation_report import format_report
    from ..importers import load_model
    from ..files import check_output_dir

    # A Hub id's default output is NAME_onnx/ here, never beside the snapshot inside the Hugging Face cache.
    default = default_out_dir(model) if model.exists() else Path(f"{model.name}_onnx")
    out = out or default
    # Before downloading or loading: never lose a user's file, and refuse what the options' files rule out.
    check_output_dir(out, options.force, [model])
    check_options(options)
    resolved = resolve_model_arg(model, revision, token)
    click.echo(f"exporting {model} -> {out}", err=True)
    checkpoint = load_model(resolved.path, origin=resolved.origin, **given)
    _echo_detected(checkpoint)
    try:
        with StageDisplay() as show:
            manifest = export_model(checkpoint, out, options, on_stage=show)
    except ValidationError as exc:
        click.echo(format_report(exc.report), err=True)
        raise
    if manifest.validation:
        click.echo(format_report(manifest.validation))
    if manifest.quality is not None:
        click.echo(format_variant_quality(manifest))
    click.echo(f"wrote {out} ({', '.join(g.file for g in manifest.graphs.values())}, manifest.json)")


def _export_module(model: Path, out: Path | None, adapter: str, options: dict[str, Any],
                   load_opts: dict[str, Any]) -> None:
    """`--adapter`: the pickled module through the adapter's encode/decode (export.module_export); `options`:
    what it takes of the export options (export.options.module_options)."""
    from ..export.exporter import default_out_dir
    from ..export.module_export import export_with_adapter, load_adapter, load_module
    from ..files import check_output_dir

    out = out or default_out_dir(model)
    check_output_dir(out, options["force"], [model])
    spec = load_adapter(adapter)  # before unpickling: a wrong name fails fast
    click.echo(f"exporting {model} -> {out} through the adapter {adapter}", err=True)
    module = load_module(model, load_opts["trust_pickle"])
    ids = {k: load_opts.get(k) for k in ("src_pad_id", "tgt_pad_id", "bos_id", "eos_id", "max_len")}
    with StageDisplay() as show:
        manifest = export_with_adapter(module, spec, out, **options, on_stage=show,
                                       source={"checkpoint": model.name}, inputs=[model], **ids)
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
@export_flag_of("atol")
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
    from ..export.folder_validation import EagerMismatch, validate_folder

    if model_path is not None:
        requires_extra("export", "validate --model")
    try:
        with StageDisplay() as show:
            done = validate_folder(folder, model_path, atol=atol, load_options=load_opts, revision=revision,
                                   token=token, on_section=click.echo,
                                   progress=lambda line: click.echo(line, err=True), on_stage=show)
    except EagerMismatch as exc:  # the comparison's table, before the error's line
        from ..export.validation_report import format_report

        click.echo(format_report(exc.report), err=True)
        raise
    if done.skipped is not None:
        click.echo(f"{folder}: runtime checks passed; not compared with the eager model: "
                   f"{done.skipped.render(cli_option)}")
        return
    from ..export.validation_report import format_report

    click.echo(format_report(done.eager))
    click.echo(f"{folder}: validation passed")
