"""`tfm-export generate` (greedy, beam search or sampling on ONNX Runtime) and `tfm-export run` (an encoder-only
export): the commands and their outputs; generate's sources are read by cli.sources, its decoding flags made by
cli.decoding_flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from .common import library_errors, main_group, ort_thread_options, parse_int_list, spin_beside
from .decoding_flags import GenerateCommand, generation_config
from .sources import encode_texts, feature_sources, markup_of, read_documents, read_sources, with_eos


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@main_group.command("generate", cls=GenerateCommand)
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--text", multiple=True, help="Source text (repeatable); needs a tokenizer in the manifest.")
@click.option("--ids", multiple=True,
              help='Source token ids, e.g. "3 17 9" (repeatable). When the export\'s tokenizer ends sources '
                   'with EOS, EOS is appended unless the ids end with it, so ids match --text.')
@click.option("--input", "input_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
              help="A file with one source per line (- reads standard input); results stream with a progress "
                   "bar.")
@click.option("--input-format", type=click.Choice(["text", "ids"]), default="text", show_default=True,
              help="How --input lines are read.")
@click.option("--features", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A .npy file of features for an export whose encoder reads them (repeatable): one source's "
                   "frames (frames, n_feats), or Whisper's (n_mels, n_frames); with a leading axis, one source "
                   "per row. Frames of different lengths are padded and masked.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Sources decoded together.")
@ort_thread_options
@click.option("--cuda-graph/--no-cuda-graph", default=None,
              help="Replay decoder steps as CUDA graphs (needs an export made with --cuda-graph; on CPU the "
                   "same loop runs uncaptured). Default: on when the device is CUDA and the export has one.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per source: ids (and text), score (beam search, sampling, processors); with "
                   "--n-best, every hypothesis under `hypotheses`.")
@click.option("--stream", is_flag=True,
              help="Print each source's output as it is decoded (greedy and sampling; beam search prints "
                   "when done), one source at a time.")
@click.option("--source-lang", default=None,
              help="The source language's code, for multilingual models (`tfm-export languages FOLDER` lists them).")
@click.option("--target-lang", default=None,
              help="The target language's code, for multilingual models: its token starts every output.")
@click.option("--split-sentences", is_flag=True,
              help="Translate documents: --input is read whole (not a source per line) and each --text is a "
                   "document; each is split into sentences, translated in batches and printed as the translated "
                   "document, its whitespace and line breaks kept. A sentence over the model's max_len is cut at "
                   "the limit (a warning). Text only; not with --json or --stream.")
@click.option("--format", "doc_format", type=click.Choice(["text", "html", "markdown"]), default=None,
              help="The documents' markup: html or markdown translate their text nodes and keep the markup (tags, "
                   "attributes, code; inline tags carried to the words) and imply --split-sentences. Default: "
                   "from --input's extension (.html, .htm, .md, .markdown), else text.")
@click.option("--greedy", is_flag=True,
              help="Start from plain greedy decoding instead of the export's default settings (e.g. a folder's "
                   "beam search and forced EOS); the decoding flags below still apply.")
@click.option("--assistant", type=click.Path(path_type=Path), default=None,
              help="A draft export of the same vocabulary (a smaller model, or this one's int8/int4 variant): greedy "
                   "decoding and sampling speculate, the draft proposing ids that the model checks several at a "
                   "time (greedy: plain greedy's output; --sample: the same distribution, seeded; sources are then "
                   "decoded one at a time).")
@library_errors
def generate_command(folder: Path, text: tuple[str, ...], ids: tuple[str, ...], input_file: Path | None,
                     input_format: str, features: tuple[Path, ...], device: str, batch_size: int,
                     threads: int | None, spin: bool, cuda_graph: bool | None, as_json: bool, stream: bool, source_lang: str | None,
                     target_lang: str | None, split_sentences: bool, doc_format: str | None, greedy: bool,
                     assistant: Path | None,
                     **decoding: Any) -> None:
    """Decode with the export in FOLDER on ONNX Runtime (its default decoding unless flags say otherwise)."""
    from ..runtime import RuntimeOptions, open_export

    if stream and as_json:  # one of them would be ignored
        raise click.UsageError("--stream prints text as it is decoded and --json a record per source once it is "
                               "done; pick one")
    doc_format = doc_format or markup_of(input_file)
    spin = spin_beside(spin, assistant)
    if split_sentences or doc_format != "text":
        documents = read_documents(text, ids, input_file, input_format, features, stream or as_json)
        model = open_export(folder, device, RuntimeOptions(intra_op_threads=threads, spin_wait=spin,
                                                           cuda_graph=cuda_graph))
        config = generation_config(model, decoding, greedy)
        draft = _assistant(assistant, device, threads, spin, config)
        for translation in model.translate(documents, config=config, source_lang=source_lang,
                                           target_lang=target_lang, split_sentences=True, format=doc_format,
                                           assistant=draft):
            click.echo(translation, nl=not translation.endswith("\n"))  # the document's own last line break
        return
    kind, sources, labels = read_sources(text, ids, input_file, input_format, features)
    if not sources:  # an empty --input (a pipeline with nothing to say): nothing to decode, and said so
        click.echo(f"{'standard input' if str(input_file) == '-' else input_file} has no sources (no line with "
                   f"text): nothing to decode", err=True)
        return
    options = RuntimeOptions(intra_op_threads=threads, spin_wait=spin, cuda_graph=cuda_graph)
    model = open_export(folder, device, options)
    has_tokenizer = bool(model.manifest.tokenizer)
    if target_lang is not None and has_tokenizer:
        decoding = {**model.language_options(target_lang), **decoding}
    config = generation_config(model, decoding, greedy)
    if kind == "text":
        encoded = encode_texts(model, sources, labels, source_lang, target_lang)
    elif kind == "features":
        sources, encoded = feature_sources(model, sources)
    else:
        encoded = with_eos(sources, model.tokenizer) if has_tokenizer else sources
    tokenizer = model.tokenizer if has_tokenizer else None
    draft = _assistant(assistant, device, threads, spin, config)
    if stream:
        for src, ids_ in zip(sources, encoded):
            _stream(model, src, ids_, tokenizer, config)
        return
    with click.progressbar(length=len(sources), label="decoding", file=sys.stderr,
                           hidden=input_file is None) as bar:
        for chunk, chunk_src in zip(_batches(encoded, batch_size), _batches(sources, batch_size)):
            for src, hyps in zip(chunk_src, _decode(model, chunk, config, draft)):
                click.echo(_format(src, hyps, tokenizer, as_json))
            bar.update(len(chunk))


def _assistant(folder: Path | None, device: str, threads: int | None, spin: bool, config: Any) -> Any:
    """--assistant's export, opened on the same device (None without it); speculation is greedy's or sampling's."""
    if (folder is not None or config.prompt_lookup_num_tokens) and config.num_beams > 1:
        raise click.UsageError("--prompt-lookup and --assistant speed up greedy decoding and sampling only, and this "
                               "decoding is beam search (the export's defaults or --num-beams); add --greedy or "
                               "--sample")
    if folder is None:
        return None
    from ..runtime import RuntimeOptions, open_export

    return open_export(folder, device, RuntimeOptions(intra_op_threads=threads, spin_wait=spin))


def _decode(model: Any, sources: list[list[int]], config: Any, assistant: Any = None) -> list[list[Any]]:
    """Hypotheses per source; plain greedy keeps the fast loop (CUDA graphs), which gives ids without scores
    (and speculates with --prompt-lookup or an assistant, as sampling does: runtime.api `generate`)."""
    if config.is_greedy:
        from ..runtime.options.generation import Hypothesis

        rows = model.generate_ids(sources, config=config, assistant=assistant)
        return [[Hypothesis(ids, float("nan"))] for ids in rows]
    return model.generate(sources, config, assistant=assistant)


def _stream(model: Any, source: Any, ids: list[int], tokenizer: Any, config: Any) -> None:
    """One source: its source text, a tab, then the output as it comes."""
    click.echo(f"{_shown(source)}\t", nl=False)
    pieces = model.stream(ids, config)
    if tokenizer is None:
        for token in pieces:
            click.echo(f"{token} ", nl=False)
    else:
        from ..runtime.api import text_pieces

        for piece in text_pieces(tokenizer, pieces):
            click.echo(piece, nl=False)
    click.echo("")


def _shown(source: Any) -> str:
    return source if isinstance(source, str) else " ".join(map(str, source))


def _record(ids: list[int], score: float, tokenizer: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"ids": ids}
    if score == score:  # NaN: plain greedy, no score
        record["score"] = round(score, 6)
    if tokenizer is not None:
        record["text"] = tokenizer.decode(ids)
    return record


def _format(source: Any, hyps: list[Any], tokenizer: Any, as_json: bool) -> str:
    """The best hypothesis as before (source, ids, text, score), plus `hypotheses` with --n-best."""
    records = [_record(h.ids, h.score, tokenizer) for h in hyps]
    if as_json:
        record = {"source": source, **records[0]}
        if len(records) > 1:
            record["hypotheses"] = records
        return json.dumps(record, ensure_ascii=False)
    shown = [r.get("text", " ".join(map(str, r["ids"]))) for r in records]
    if len(records) == 1:
        return f"{_shown(source)}\t{shown[0]}"
    return "\n".join(f"{_shown(source)}\t{s}\t{r['score']:.4f}" for s, r in zip(shown, records))


@main_group.command("run")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--ids", multiple=True, required=True,
              help='Source token ids, e.g. "3 17 9" (repeatable; padded into one batch).')
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@library_errors
def run_command(folder: Path, ids: tuple[str, ...], device: str) -> None:
    """Run an encoder-only export in FOLDER (exported with --adapter / export_module without decode): one JSON
    object per source with each output's row."""
    from ..runtime import open_export

    sources = [parse_int_list(i, "--ids") for i in ids]
    outputs = open_export(folder, device).run(sources)
    for row in range(len(sources)):
        click.echo(json.dumps({"ids": sources[row], **{k: v[row].tolist() for k, v in outputs.items()}}))
