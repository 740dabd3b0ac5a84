"""`tfm-export generate` (greedy decoding on ONNX Runtime) and `tfm-export bench`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from .common import ort_thread_options, library_errors, main_group, parse_int_list, requires_extra


def _sources(text: tuple[str, ...], ids: tuple[str, ...], input_file: Path | None, input_format: str
             ) -> tuple[str, list[Any]]:
    given = sum(bool(x) for x in (text, ids, input_file))
    if given != 1:
        raise click.UsageError("give exactly one of --text, --ids or --input")
    if text:
        kind, sources = "text", list(text)
    elif ids:
        kind, sources = "ids", [parse_int_list(i, "--ids") for i in ids]
    else:
        lines = [ln for ln in _read_text(input_file).splitlines() if ln.strip()]
        kind = input_format
        sources = [parse_int_list(ln, f"line of {input_file}") for ln in lines] if kind == "ids" else lines
    # One rule for text and ids: an empty source has nothing to translate.
    empty = next((n for n, s in enumerate(sources, 1) if not s), None)
    if empty is not None:
        raise click.ClickException(f"source {empty} is empty; give at least one character or token id")
    return kind, sources


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{path} is not UTF-8 text (byte {exc.start}); pass a text file, one "
                                   f"source per line") from None


def _with_eos(sources: list[list[int]], tokenizer: Any) -> list[list[int]]:
    """--ids follow the tokenizer's convention: when encoding appends EOS, append it if missing."""
    suffix = tokenizer.encode("")  # [eos] for tokenizers that end every source with it, else []
    if not suffix:
        return sources
    return [s if s[-len(suffix):] == suffix else s + suffix for s in sources]


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@main_group.command("generate")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--text", multiple=True, help="Source text (repeatable); needs a tokenizer in the manifest.")
@click.option("--ids", multiple=True,
              help='Source token ids, e.g. "3 17 9" (repeatable). When the export\'s tokenizer ends sources '
                   'with EOS, EOS is appended unless the ids end with it, so ids match --text.')
@click.option("--input", "input_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file with one source per line; results stream with a progress bar.")
@click.option("--input-format", type=click.Choice(["text", "ids"]), default="text", show_default=True,
              help="How --input lines are read.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
              help="Most tokens per source (default: max_len).")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Sources decoded together.")
@ort_thread_options
@click.option("--cuda-graph/--no-cuda-graph", default=None,
              help="Replay decoder steps as CUDA graphs (needs an export made with --cuda-graph; on CPU the "
                   "same loop runs uncaptured). Default: on when the device is CUDA and the export has one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per source: ids (and text).")
@library_errors
def generate_command(folder: Path, text: tuple[str, ...], ids: tuple[str, ...], input_file: Path | None,
                     input_format: str, device: str, max_new_tokens: int | None, batch_size: int,
                     threads: int | None, spin: bool, cuda_graph: bool | None, as_json: bool) -> None:
    """Greedy decoding with the export in FOLDER on ONNX Runtime."""
    from ..runtime import RuntimeOptions, open_export

    kind, sources = _sources(text, ids, input_file, input_format)
    options = RuntimeOptions(intra_op_threads=threads, spin_wait=spin, cuda_graph=cuda_graph)
    model = open_export(folder, device, options)
    has_tokenizer = bool(model.manifest.tokenizer)
    if kind == "text":
        encoded = [model.tokenizer.encode(s) for s in sources]
    else:
        encoded = _with_eos(sources, model.tokenizer) if has_tokenizer else sources
    with click.progressbar(length=len(sources), label="decoding", file=sys.stderr,
                           hidden=input_file is None) as bar:
        for chunk, chunk_src in zip(_batches(encoded, batch_size), _batches(sources, batch_size)):
            for src, out in zip(chunk_src, model.generate_ids(chunk, max_new_tokens)):
                click.echo(_format(src, out, model.tokenizer if has_tokenizer else None, as_json))
            bar.update(len(chunk))


def _format(source: Any, ids: list[int], tokenizer: Any, as_json: bool) -> str:
    record: dict[str, Any] = {"source": source, "ids": ids}
    if tokenizer is not None:
        record["text"] = tokenizer.decode(ids)
    if as_json:
        return json.dumps(record, ensure_ascii=False)
    shown = record.get("text", " ".join(map(str, ids)))
    return f"{source if isinstance(source, str) else ' '.join(map(str, source))}\t{shown}"


@main_group.command("bench")
@click.argument("target", type=click.Path(exists=True, path_type=Path))
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Checkpoint for the eager rows when TARGET is an export folder.")
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
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), help="Write a bar chart (PNG).")
@library_errors
def bench_command(target: Path, model_path: Path | None, device: str, batch: str, src_len: int, new_tokens: int,
                  repeat: int, warmup: int, threads: int | None, spin: bool, peers: tuple[Path, ...],
                  json_file: Path | None, plot_file: Path | None) -> None:
    """Eager PyTorch vs ONNX Runtime latency on TARGET (a checkpoint, or an export folder)."""
    requires_extra("export", "bench")
    from ..bench.bench import BenchSettings, bench_target, format_table, plot, run_benchmark

    batches = tuple(parse_int_list(batch, "--batch"))
    if not batches or min(batches) < 1:
        raise click.BadParameter(f"--batch must be sizes of at least 1, got {batch!r}")
    settings = BenchSettings(devices=tuple(d.strip() for d in device.split(",") if d.strip()),
                             batches=batches, src_len=src_len,
                             new_tokens=new_tokens, repeat=repeat, warmup=warmup, threads=threads,
                             spin_wait=spin)
    checkpoint, export_dir = bench_target(target, model_path)
    if checkpoint is None:
        click.echo("no checkpoint given (--model): ORT rows only", err=True)
    click.echo(f"measuring {', '.join(settings.devices)} x batch {batch}: {warmup} warm-up + {repeat} timed "
               f"runs per backend ...", err=True)
    report = run_benchmark(checkpoint, export_dir, settings, peers,
                           progress=lambda where: click.echo(f"  {where}", err=True))
    click.echo(format_table(report))
    if json_file:
        json_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if plot_file:
        plot(report, plot_file)
