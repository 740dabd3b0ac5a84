"""`tfm-export demo`: the whole job on the bundled model (what `make demo` runs)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from ..resources import bundled
from .common import check_threads, library_errors, main_group, requires_extra
from .progress import StageDisplay

BUNDLED = bundled("num2words-de")  # the installed package's copy, or the checkout's models/num2words-de
HELDOUT = BUNDLED / "heldout.tsv"
README_SECTION = "What it supports"  # the README heading whose 'deploy with' table shows how to use an export


@main_group.command("demo")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=BUNDLED / "model.pt",
              show_default=True, help="Checkpoint to demonstrate.")
@click.option("--heldout", type=click.Path(path_type=Path), default=HELDOUT, show_default=True,
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
    from ..demo import compare_samples, format_samples
    from ..model.eager import EagerModel
    from ..export.exporter import ExportOptions, export_model
    from ..importers import load_any
    from ..runtime import open_export
    from ..export.validation_report import format_report

    _check_out(out, model_path)
    checkpoint = load_any(model_path)  # a wrong --model is its one line, before step 1 names the output
    pairs = _samples(heldout, samples, checkpoint, model_path)  # a wrong --heldout too, before --out is written
    click.secho(f"1. export {model_path} -> {out} (with validation)", bold=True)
    with StageDisplay(sys.stdout) as show:
        manifest = export_model(checkpoint, out, ExportOptions(force=True), on_stage=show)
    click.echo(format_report(manifest.validation))

    click.secho("\n2. translate with ONNX Runtime (CPU), next to eager PyTorch", bold=True)
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
    click.secho(f"\ndone: {out} is ready to ship (to use it from another app, see README: '{README_SECTION}', "
                f"its 'deploy with' table)", bold=True)


def _check_out(out: Path, model_path: Path) -> None:
    """--out is replaced when it holds a previous export, never when it holds anything else. The refusals
    name export's `-o`; demo's flag is --out."""
    from ..errors import OutputError
    from ..files import check_output_dir

    try:
        check_output_dir(out, True, [model_path])
    except OutputError as exc:
        raise OutputError(re.sub(r"(?<!\S)-o(?!\S)", "--out", str(exc))) from None


def _samples(heldout: Path, count: int, checkpoint: Any, model_path: Path) -> list[tuple[str, str | None]]:
    """The inputs to translate: the first `count` pairs of --heldout; without the default file (a model card
    not installed), the checkpoint's own samples. InputError when there are none."""
    from ..demo import read_heldout
    from ..errors import InputError

    if heldout.exists() or heldout != HELDOUT:  # a --heldout the user named must be there
        return read_heldout(heldout, count)
    pairs: list[tuple[str, str | None]] = [(s, None) for s in checkpoint.samples or []][:count]
    if not pairs:
        raise InputError(f"{model_path} has no sample inputs; pass --heldout FILE of source<TAB>expected lines")
    return pairs
