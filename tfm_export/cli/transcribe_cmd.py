"""`tfm-export transcribe FOLDER AUDIO...`: speech to text with a Whisper export (runtime.speech.whisper) or a frames
model exported with a filterbank (runtime.speech.frames); runtime.speech.transcribe picks by the manifest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .common import library_errors, main_group, ort_thread_options, spin_beside


@main_group.command("transcribe")
@click.argument("folder", type=click.Path(path_type=Path))
@click.argument("audio", nargs=-1, required=True, type=click.Path(allow_dash=True, path_type=Path))
@click.option("--language", default=None,
              help="Whisper: the spoken language, a code (de), an English name (german) or a token (<|de|>); "
                   "default: detected from the first 30 s.")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe", show_default=True,
              help="Whisper: transcribe (text in the spoken language) or translate (English text).")
@click.option("--timestamps", is_flag=True,
              help="Whisper: predict timestamps, segments with their times (long audio always decodes with them).")
@click.option("--word-timestamps", is_flag=True,
              help="Whisper: time each word (its alignment heads' cross-attention, as transformers' "
                   "return_token_timestamps): `words` [{word, start, end}] in --json, per segment and in all.")
@click.option("--num-beams", type=click.IntRange(min=1), default=1, show_default=True,
              help="Beam search with this many beams (Whisper: in each 30 s window; 1: greedy).")
@click.option("--prompt", default=None,
              help="Whisper: an initial prompt, text the transcript is conditioned on (spellings, names).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
              help="Most tokens per 30 s window, or per recording for a frames model (default: up to max_len).")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=3600.0, show_default=True,
              help="Refuse recordings longer than this many seconds.")
@click.option("--format", "out_format", type=click.Choice(["txt", "srt", "vtt", "json"]), default="txt",
              show_default=True, help="txt: the text; srt/vtt: subtitles from the segments; json: as --json.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per file: file, text, language, segments [{start, end, text, ...}], ids.")
@click.option("--output-dir", type=click.Path(path_type=Path), default=None,
              help="Write each recording's transcript to DIR/NAME.FORMAT (talk.wav -> DIR/talk.srt) instead of "
                   "printing it; existing files are never replaced (checked before any work).")
@click.option("--vad", is_flag=True,
              help="Transcribe only the speech: Silero VAD finds it, its stretches are merged into chunks of up to "
                   "one window and each chunk is transcribed; times stay the recording's. Use it for recordings "
                   "with long pauses or background noise, where Whisper invents words.")
@click.option("--vad-threshold", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="With --vad: P(speech) from which a 32 ms window is speech; higher for noisy recordings "
                   "[default: 0.5].")
@click.option("--vad-min-speech-ms", type=click.IntRange(min=0), default=None,
              help="With --vad: drop stretches of speech this short or shorter [default: 0].")
@click.option("--vad-min-silence-ms", type=click.IntRange(min=0), default=None,
              help="With --vad: silence that ends a stretch of speech; shorter pauses stay inside it "
                   "[default: 2000].")
@click.option("--vad-pad-ms", type=click.IntRange(min=0), default=None,
              help="With --vad: audio kept on both sides of each stretch of speech [default: 400].")
@click.option("--vad-max-speech-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --vad: cut longer stretches of speech, at their longest pause [default: no limit].")
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Whisper: decode this many windows together: --vad's chunks, and the files given (their "
                   "encoder in one batch, the decoder's rows together); the same text as 1, faster.")
@click.option("--temperature", "temperatures", default=None, metavar="T[,T...]",
              help="Whisper: 0 greedy, above 0 sampling; several (0,0.2,0.4,0.6,0.8,1) the temperature fallback: a "
                   "window that fails a threshold is decoded again at the next one [default: 0].")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=None,
              help="Whisper: the seed of the sampled tries (the same seed, the same text; Node draws the same) "
                   "[default: 0].")
@click.option("--compression-ratio-threshold", type=float, default=None,
              help="Whisper: fall back when a window's token ids compress better than this (repetition; "
                   "openai-whisper: 2.4) [default: the folder's].")
@click.option("--logprob-threshold", type=float, default=None,
              help="Whisper: fall back when a window's average log-probability is below this (openai-whisper: -1.0) "
                   "[default: the folder's].")
@click.option("--no-speech-threshold", type=float, default=None,
              help="Whisper: with --logprob-threshold, skip a window as silence when P(<|nospeech|>) is above this "
                   "(openai-whisper: 0.6) [default: the folder's].")
@click.option("--condition-on-prev-tokens/--no-condition-on-prev-tokens", default=None,
              help="Whisper: decode each window after the text before it [default: the folder's].")
@click.option("--prompt-condition-type", type=click.Choice(["first-segment", "all-segments"]), default=None,
              help="Whisper: all-segments keeps --prompt before every window's previous text (transformers'; needs "
                   "--condition-on-prev-tokens) [default: first-segment, the first window's].")
@click.option("--hotwords", default=None,
              help="Whisper: words to expect (names, terms), put before every window's text (faster-whisper's).")
@click.option("--prefix", default=None,
              help="Whisper: the first window's first words, forced (faster-whisper's prefix).")
@click.option("--prompt-lookup", "prompt_lookup_num_tokens", type=click.IntRange(min=1), default=None,
              help="Whisper, greedy windows: speculative decoding, up to this many ids drafted a step from n-grams of "
                   "the window's prompt (the same transcript, in fewer decoder calls).")
@click.option("--assistant", "assistant_folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Whisper, greedy windows: speculative decoding with this draft export (a smaller "
                                 "Whisper of the same tokenizer, or the model's int8 variant; the same transcript).")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@ort_thread_options
@library_errors
def transcribe_command(folder: Path, audio: tuple[Path, ...], language: str | None, task: str, timestamps: bool,
                       word_timestamps: bool,
                       num_beams: int, prompt: str | None, max_new_tokens: int | None, max_seconds: float,
                       out_format: str, as_json: bool, output_dir: Path | None, vad: bool, batch_size: int,
                       device: str, threads: int | None, spin: bool, temperatures: str | None,
                       assistant_folder: Path | None, **options: Any) -> None:
    """Transcribe (or translate) each AUDIO file (WAV, FLAC, MP3, OGG; - reads one from standard input) with the
    speech export in FOLDER: Whisper, or a frames model whose manifest names its filterbank (Whisper-only options
    are refused for it)."""
    from ..files import output_files, write_file_atomically
    from ..runtime import RuntimeOptions, open_export
    from ..audio import check_files
    from ..runtime.speech.subtitles import TRANSCRIPT_FORMATS

    if as_json and out_format not in ("txt", "json"):  # --json is --format json: the other would be ignored
        raise click.UsageError(f"--json is --format json; pick it or --format {out_format}")
    fmt = "json" if as_json else out_format
    if word_timestamps and fmt != "json":  # the words would be computed and not shown
        raise click.UsageError(f"--word-timestamps shows in --json (or --format json), not in --format {fmt}")
    _check_stdin(audio, output_dir)
    vad_parameters = _vad_parameters(vad, {name: options.pop(name) for name in VAD_FIELDS})
    decoding = _decoding_options(temperatures, options)
    check_files([path for path in audio if str(path) != "-"])  # every input before the first transcript is written
    targets = output_files(audio, output_dir, fmt) if output_dir is not None else [None] * len(audio)
    spin = spin_beside(spin, assistant_folder)
    model = open_export(folder, device, RuntimeOptions(intra_op_threads=threads, spin_wait=spin))
    if assistant_folder is not None:  # speculative decoding (runtime.speech.assisted), on the model's device
        decoding["assistant"] = open_export(assistant_folder, device,
                                            RuntimeOptions(intra_op_threads=threads, spin_wait=spin))
    sources = [sys.stdin.buffer.read() if str(path) == "-" else str(path) for path in audio]  # - : piped in
    options = dict(language=language, task=task, timestamps=timestamps, word_timestamps=word_timestamps,
                   num_beams=num_beams, prompt=prompt, max_seconds=max_seconds, max_new_tokens=max_new_tokens,
                   vad=vad, vad_parameters=vad_parameters, batch_size=batch_size, **decoding)
    # one file at a time, each written when done; with --batch-size, all files' windows together
    results = model.transcribe(sources, **options) if batch_size > 1 else (
        model.transcribe(source, **options) for source in sources)
    for path, target, result in zip(audio, targets, results):
        text = TRANSCRIPT_FORMATS[fmt](result, str(path))
        if target is None:
            click.echo(text, nl=False)
            continue
        write_file_atomically(target, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        click.echo(f"wrote {target}", err=True)


def _check_stdin(audio: tuple[Path, ...], output_dir: Path | None) -> None:
    """`-` (a recording on standard input, e.g. from ffmpeg) is read once, and has no name to write a file by."""
    piped = sum(str(path) == "-" for path in audio)
    if piped > 1:
        raise click.UsageError("- (standard input) is given more than once; it holds one recording")
    if piped and output_dir is not None:
        raise click.UsageError("--output-dir names each transcript after its recording, and - (standard input) has "
                               "no name; redirect the output instead (> talk.srt)")


def _decoding_options(temperatures: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The Whisper decoding options given (transcribe's keyword arguments; those left out are not passed, so a
    frames model takes the command without them)."""
    given = {name: value for name, value in options.items() if value is not None}
    if temperatures is not None:
        try:
            values = tuple(float(t) for t in temperatures.split(","))
        except ValueError:
            raise click.UsageError(f"--temperature takes numbers separated by commas (0,0.2,0.4), got "
                                   f"{temperatures!r}") from None
        given["temperature"] = values if len(values) > 1 else values[0]
    return given


# --vad-* -> runtime.speech.vad.VadParameters' field
VAD_FIELDS = {"vad_threshold": "threshold", "vad_min_speech_ms": "min_speech_duration_ms",
              "vad_min_silence_ms": "min_silence_duration_ms", "vad_pad_ms": "speech_pad_ms",
              "vad_max_speech_s": "max_speech_duration_s"}


def _vad_parameters(vad: bool, options: dict[str, float | int | None]) -> object | None:
    """The --vad-* options as the VAD's parameters (None: the defaults); each needs --vad, and together they
    must make sense (a maximum longer than the padding), checked before any work."""
    from ..errors import InputError
    from ..runtime.speech.vad import VadParameters

    given = {name: value for name, value in options.items() if value is not None}
    if given and not vad:
        raise click.UsageError(f"{_flag(next(iter(given)))} sets the VAD; add --vad")
    if not given:
        return None
    try:
        return VadParameters(**{VAD_FIELDS[name]: value for name, value in given.items()})
    except InputError as exc:  # named by the library's fields: say the flags
        message = str(exc)
        for name, field in VAD_FIELDS.items():
            message = message.replace(field, _flag(name))
        raise click.UsageError(message) from None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
