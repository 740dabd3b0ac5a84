"""`tfm-export bench`: eager PyTorch, ONNX Runtime and CTranslate2 timed in one interleaved run (bench.bench)."""

from __future__ import annotations

from pathlib import Path

import click

from .common import (hub_options, library_errors, main_group, ort_thread_options, parse_int_list, requires_extra,
                     resolve_model_arg)


@main_group.command("bench")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--model", "model_path", type=click.Path(path_type=Path),
              help="Checkpoint (or Hugging Face folder or Hub id) for the eager rows when TARGET is an export folder.")
@click.option("--device", default="cpu", show_default=True, help="Devices, comma-separated: cpu,cuda.")
@click.option("--batch", default="1,8", show_default=True, help="Batch sizes, comma-separated.")
@click.option("--src-len", type=click.IntRange(min=1), default=32, show_default=True, help="Source tokens per row.")
@click.option("--new-tokens", type=click.IntRange(min=1), default=64, show_default=True,
              help="Tokens generated per row (EOS ignored).")
@click.option("--repeat", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed runs per backend, interleaved.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untimed runs per backend first.")
@ort_thread_options
@click.option("--also", "peers", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Another export folder of the same model (e.g. --optimize or int8), measured as an extra "
                   "'ort:<folder>' row in the same run; repeatable.")
@click.option("--num-beams", type=click.IntRange(min=1), default=1, show_default=True,
              help="Measure beam search with this many beams (rows ort-beamN, eager-beamN, ctranslate2-beamN).")
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), help="Write a bar chart (PNG).")
@hub_options
@library_errors
def bench_command(target: Path, model_path: Path | None, device: str, batch: str, src_len: int, new_tokens: int,
                  repeat: int, warmup: int, threads: int | None, spin: bool, peers: tuple[Path, ...],
                  num_beams: int, json_file: Path | None, plot_file: Path | None, revision: str | None,
                  token: str | None) -> None:
    """Eager PyTorch vs ONNX Runtime latency on TARGET (a checkpoint, a Hugging Face folder or Hub id, or an
    export folder)."""
    requires_extra("export", "bench")
    from ..bench.bench import BenchSettings, bench_target, run_benchmark
    from ..bench.report import check_outputs, format_table, plot, write_report

    batches = tuple(parse_int_list(batch, "--batch"))
    if not batches or min(batches) < 1:
        raise click.BadParameter(f"--batch must be sizes of at least 1, got {batch!r}")
    check_outputs(json_file, plot_file)  # before a Hub download and the run, not after them
    settings = BenchSettings(devices=tuple(d.strip() for d in device.split(",") if d.strip()),
                             batches=batches, src_len=src_len,
                             new_tokens=new_tokens, repeat=repeat, warmup=warmup, threads=threads,
                             spin_wait=spin, num_beams=num_beams)
    from ..manifest import is_export_folder

    # A Hub id (TARGET or --model) is downloaded into the Hugging Face cache first; a path is used as it is.
    if not is_export_folder(target):
        target = resolve_model_arg(target, revision, token).path
    if model_path is not None:
        model_path = resolve_model_arg(model_path, revision, token).path
    checkpoint, export_dir = bench_target(target, model_path)
    if checkpoint is None:
        click.echo("no checkpoint given (--model): ORT rows only", err=True)
    click.echo(f"measuring {', '.join(settings.devices)} x batch {batch}: {warmup} warm-up + {repeat} timed "
               f"runs per backend ...", err=True)
    report = run_benchmark(checkpoint, export_dir, settings, peers,
                           progress=lambda where: click.echo(f"  {where}", err=True))
    click.echo(format_table(report))
    if json_file:
        write_report(report, json_file)
    if plot_file:
        plot(report, plot_file)
