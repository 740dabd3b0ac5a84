"""`tfm-export demo`: the whole job on the bundled model (what `make demo` runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..resources import bundled
from .common import check_threads, library_errors, main_group, requires_extra
from .progress import StageDisplay

BUNDLED = bundled("num2words-de")  # the installed package's copy, or the checkout's models/num2words-de


@main_group.command("demo")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=BUNDLED / "model.pt",
              show_default=True, help="Checkpoint to demonstrate.")
@click.option("--heldout", type=click.Path(path_type=Path), default=BUNDLED / "heldout.tsv", show_default=True,
              help="source<TAB>expected lines; the first --samples are translated.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo_out/num2words-de_onnx"),
              show_default=True, help="Export folder (replaced if it holds a previous export; never if it holds "
                                      "other files).")
@click.option("--samples", type=click.IntRange(min=1), default=8, show_default=True,
              help="How many inputs to translate.")
@click.option("--threads", type=int, default=2, show_default=True, callback=check_threads,
              help="Threads for the latency table.")
@library_errors
def demo_command(model_path: Path, heldout: Path, out: Path, samples: int, threads: int) -> None:
    """Export, validate, translate samples with ONNX Runtime, and compare latency with eager."""
    requires_extra("export", "demo")
    from ..bench.bench import BenchSettings, run_benchmark
    from ..bench.report import format_table
    from ..demo import compare_samples, format_samples, read_heldout
    from ..model.eager import EagerModel
    from ..export.exporter import ExportOptions, export_model
    from ..importers import load_any
    from ..runtime import open_export
    from ..export.validation_report import format_report
    from ..files import check_output_dir

    # --out is replaced when it holds a previous export, never when it holds anything else.
    check_output_dir(out, True, [model_path])
    click.secho(f"1. export {model_path} -> {out} (with validation)", bold=True)
    checkpoint = load_any(model_path)
    with StageDisplay(sys.stdout) as show:
        manifest = export_model(checkpoint, out, ExportOptions(force=True), on_stage=show)
    click.echo(format_report(manifest.validation))

    click.secho("\n2. translate with ONNX Runtime (CPU), next to eager PyTorch", bold=True)
    pairs = read_heldout(heldout, samples) if heldout.exists() else [(s, None) for s in checkpoint.samples or []]
    rows = compare_samples(open_export(out, device="cpu"), EagerModel.from_checkpoint(checkpoint),
                           [p[0] for p in pairs], [p[1] for p in pairs])
    click.echo(format_samples(rows))

    click.secho(f"\n3. latency: eager PyTorch vs ONNX Runtime ({threads} threads, 24 new tokens)", bold=True)
    report = run_benchmark(checkpoint, out, BenchSettings(batches=(1, 8), src_len=6, new_tokens=24, repeat=3,
                                                          threads=threads))
    click.echo(format_table(report))
    if not all(r["ort_equals_eager"] for r in rows):
        raise click.ClickException("ONNX Runtime and eager disagree on a sample (see the table above)")
    if any(r["correct"] is False for r in rows):
        raise click.ClickException("the model got a sample wrong (see the table above)")
    click.secho(f"\ndone: {out} is ready to ship (see README: 'Use the export from another app')", bold=True)
