"""Whisper on CPU, one scenario each: `whisper-speed` (ours vs faster-whisper vs transformers vs Optimum, short and
long form) and `word-timestamps` (what word timestamps cost on long-form transcription). The backends and the
measures are tfm_export.bench.whisper's and whisper_measures'; the recordings and random folders
tfm_export.bench.fixtures'."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import tfm_export.runtime.speech.alignment as alignment
import tfm_export.runtime.speech.words as whisper_words
from tfm_export.bench.fixtures import ROOT, long_recording, random_folder
from tfm_export.bench import harness
from tfm_export.bench.whisper import (
    BACKENDS, Folder, OPTIMUM, OPTIMUM_WORKER, OptimumWhisper, RATE, exported, open_backends, versions)
from tfm_export.bench.whisper_measures import N_SHORT, PAUSE, markdown, measure_rtf, measure_steps, step_features
from tfm_export.runtime import RuntimeOptions, open_export


WHISPER_SPEED_DOC = r"""Whisper on CPU: tfm-export's ONNX Runtime export vs faster-whisper (CTranslate2) vs
transformers (vs Optimum) (#39).

    .venv/bin/python -m benchmarks whisper-speed [--fixture models/whisper-digits] [--seconds 600] \
        [--repeat 3] [--threads 2] [--layouts tiny,base] [--vocab 51865] [--batches 1,8] [--steps 96] \
        [--min-time 1] [--backends ours-f32,ours-int8,faster-whisper-f32,faster-whisper-int8,transformers] \
        [--optimum-python /work/optimum-venv/bin/python] [--work DIR] [--json OUT.json]

faster-whisper is a benchmark-only dependency (not in pyproject's extras). Install it into the venv
without letting it replace onnxruntime-gpu with onnxruntime (its only use of ONNX Runtime is the Silero
VAD, which is off here):

    .venv/bin/pip install -c constraints.txt --no-deps faster-whisper av

Backends (each on --threads threads, CPU, one process; all from the same Hugging Face folder):
  ours-f32 / ours-int8   `tfm-export FOLDER -o OUT` (and `--quantize int8`), opened with
                         open_export(OUT, "cpu", RuntimeOptions(intra_op_threads=--threads))
  faster-whisper-f32/-int8  the folder converted by ctranslate2's TransformersConverter
                         (copy_files tokenizer.json, preprocessor_config.json; quantization None / "int8"),
                         faster_whisper.WhisperModel(compute_type "float32" / "int8", cpu_threads=--threads)
  transformers           WhisperForConditionalGeneration (attn_implementation "eager", float32,
                         torch.set_num_threads(--threads)) on WhisperFeatureExtractor's features
  optimum                (only with --optimum-python) Hugging Face Optimum's ORTModelForSpeechSeq2Seq on
                         Optimum's own export of the folder (encoder, decoder and decoder-with-past, not
                         merged), ONNX Runtime with --threads intra-op threads and torch with as many, in
                         optimum_worker.py's whisper mode under that python: Optimum's ONNX export needs
                         transformers < 4.58 and this venv has transformers 5, so it lives in a venv of its
                         own (how to build it: optimum_worker.py's docstring) and answers over a pipe. It
                         runs the transformers backend's calls (below) with transformers 4.57's generate.

Figures:
1. Real-time factor (RTF = processing seconds / audio seconds; below 1 is faster than real time) of
   one long recording (--seconds, default 600): digit strings of 2-5 digits, held out from training,
   spoken in English by espeak-ng through the fixture's speech.py (random voice, speed, pitch), with
   pauses of 0.4-1.2 s and faint noise. Every backend decodes the whole recording long-form, window by
   window (the fixture's 4 s windows), with the same settings: language "en" given, task transcribe,
   timestamps on, greedy (beam 1), no VAD, no condition on previous text, no temperature fallback and no
   compression-ratio / log-prob / no-speech thresholds (the fixture's generation_config sets none, so
   the export applies none either), at most the model's max_target_positions per window. The time
   includes the log-mel features (each backend computes its own). Each backend runs once as a warm-up
   (on the first 8 s), then each repeat runs every backend once, in an order rotated per repeat. The
   table gives the median seconds, the RTF, the median over repeats of the ratio to ours-f32 in the same
   repeat (below 1: faster than ours-f32), and the word error rate of the text against the spoken words
   (jiwer, lower-cased, punctuation removed), so that speed is not bought with wrong text.
   Profile of ours: the share of the export's time spent in the encoder session (its
   run_with_iobinding calls, timed from outside; the encoder graph also computes the cross-attention
   keys and values) and in the log-mel features (timed alone); the rest is the decoder steps, the
   logits processors, the search and seeking.
2. Milliseconds per decoding step of the decoder, at batch 1 and batch 8 (--batches), on the trained
   fixture and on random-weight folders of the published layouts (--layouts): tiny (d_model 384, 6
   heads, 4 + 4 layers) and base (d_model 512, 8 heads, 6 + 6), both 80 mels, 3000 frames (30 s),
   max_target_positions 448, transformers' initialisation (std 0.02) and a vocabulary of --vocab ids
   (51865, multilingual Whisper's: the output projection is a large part of a step) over the test
   fixtures' small tokenizer (the ids above it are unnamed; CTranslate2's converter names them as
   timestamps). A step is one new token for every row of the batch. Each backend decodes n_short = 4
   and then n_long = 4 + --steps (at most max_target_positions - 8) new tokens from the same features
   with EOS banned (greedy, no timestamp rules), in pairs until --min-time seconds have passed:
   ms/step = (t(n_long) - t(n_short)) / (n_long - n_short), summed over the pairs, so the encoder, the
   first step and set-up cancel. The table gives the median over repeats and the median ratio to
   ours-f32 in the same repeat. How each backend decodes a fixed number of tokens:
     ours          generate_ids(features, max_new_tokens=n, stop_at_eos=False) from <|startoftranscript|>
     CTranslate2   Whisper.generate (the model faster-whisper wraps; faster-whisper itself has no
                   fixed-length mode) on [<|startoftranscript|>, <|notimestamps|>], EOS in
                   suppress_tokens, max_length = 2 n (it decodes max_length // 2 new tokens)
     transformers  GenerationMixin.generate (the plain loop under WhisperForConditionalGeneration.generate,
     and Optimum   without its Whisper processors), the same prompt, min_new_tokens = max_new_tokens = n
Optimum's times, in both figures, are measured inside its worker around the same work as the others'
(features, generate and the text's decoding; generate for a step), after it has read the .npy file of
samples or features that this script wrote once into the work folder: the file, the pipe and the JSON are
not timed.

Known differences, reported rather than hidden:
- faster-whisper pads every window's features to 3000 frames (audio.pad_or_trim's default) whatever the
  preprocessor_config's chunk_length, which it does read (nb_max_frames, seeking); a model whose window
  is not 30 s (the fixture's 4 s) then fails in CTranslate2 ("expected an input with shape (1, 80,
  400)"), so the script pads to the model's window instead (patched while it runs) and says so.
- CTranslate2 decodes at most max_length // 2 new tokens (OpenAI's sample_len) and faster-whisper passes
  max_length = prompt + max_new_tokens (at most 448): max_new_tokens is set so that every backend may
  write up to max_target_positions - 4 tokens a window.
- faster-whisper keeps its default suppress_blank (blank and EOS banned at a window's first step;
  transformers and the export ban the folder's begin_suppress_tokens) and applies its own timestamp
  rules, so its text can differ from the others' (which agree); the WER column shows by how much.
- Optimum's export traces the encoder on a dummy input of 3000 frames (nb_max_frames), which a model whose
  window is not 30 s rejects (transformers' Whisper encoder checks the length): the worker passes the
  folder's window as nb_max_frames (optimum-cli's --nb_max_frames) and says so; nothing changes for 30 s
  models. Should Optimum still refuse a folder, its backend is skipped for that model with the reason.
- Optimum's ORTModelForWhisper generates with transformers 4.57's WhisperGenerationMixin (the transformers
  backend runs transformers 5's), so its text should equal the transformers backend's; it runs the ONNX
  sessions without I/O binding on the CPU (Optimum's default there): every step's inputs and outputs, the
  past keys and values included, go between torch tensors and numpy arrays around session.run.
Before each timed backend the script rests 0.3 s, so that the previous backend's spinning threads
(CTranslate2's and torch's OpenMP, ONNX Runtime's intra-op pool) are idle. These 2-core machines are
noisy, and any other load on them (a training job) makes single figures meaningless: run it on an idle
machine and quote ratios within one run. With --work the exports, conversions and
the recording are kept and reused by a rerun.
"""

TOOL = "tfm-export `benchmarks whisper-speed`"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=WHISPER_SPEED_DOC.splitlines()[0])
    p.add_argument("--fixture", type=Path, default=ROOT / "models" / "whisper-digits", help="the trained Whisper")
    p.add_argument("--seconds", type=float, default=600.0, help="length of the long recording")
    p.add_argument("--seed", type=int, default=0, help="the recording's digits, voices and pauses")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of every backend (after a warm-up)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of every backend")
    p.add_argument("--layouts", default="tiny,base", help="random-weight layouts for the step figure "
                   "(tiny, base; smoke: 64 wide, 2 + 2 layers, 4 s windows); empty: none")
    p.add_argument("--vocab", type=int, default=51865, help="vocabulary size of the random folders")
    p.add_argument("--batches", default="1,8", help="batch sizes of the step figure")
    p.add_argument("--steps", type=int, default=96, help="n_long - n_short of the step figure (capped by the "
                   "model's max_target_positions)")
    p.add_argument("--min-time", type=float, default=1.0, help="step figure: seconds of (short, long) decode "
                   "pairs per backend and repeat (at least one pair)")
    p.add_argument("--backends", help=f"which backends, comma-separated (default: {','.join(BACKENDS)}, and "
                   f"{OPTIMUM} with --optimum-python)")
    p.add_argument("--optimum-python", type=Path, default=None,
                   help="python of a venv with optimum-onnx[onnxruntime] (it needs transformers < 4.58), e.g. "
                        "/work/optimum-venv/bin/python: adds Optimum's ORTModelForSpeechSeq2Seq as the backend "
                        f"{OPTIMUM}, run by {OPTIMUM_WORKER.name} (default: none, Optimum left out)")
    p.add_argument("--no-rtf", action="store_true", help="skip the long recording (step figure only)")
    p.add_argument("--work", type=Path, help="keep exports, conversions and the recording here (reused)")
    p.add_argument("--json", type=Path, help="write the report here")
    return p.parse_args()


def run_model(label: str, path: Path, args: argparse.Namespace, work: Path, names: list[str],
              recording: tuple[np.ndarray, str] | None, rtf: bool = False,
              skipped: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """One folder's figures: the RTF (with `rtf`) and the step figure per batch (on the recording's
    windows when one is given, else on noise). Backends refused for this folder go to `skipped`."""
    folder = Folder(path)
    backends = open_backends(names, folder, work, args.threads, args.optimum_python, skipped)
    rtf_rows = measure_rtf(backends, *recording, args.repeat) if rtf and recording else []
    n_long = N_SHORT + min(args.steps, folder.max_positions - N_SHORT - 4)  # the prompts take up to 2
    steps = []
    for batch in [int(b) for b in args.batches.split(",") if b]:
        print(f"{label}: steps at batch {batch}", file=sys.stderr)
        features = step_features(folder, batch, recording[0] if recording else None)
        steps += measure_steps(backends, features, n_long, args.repeat, label, args.min_time)
    for backend in backends.values():
        if isinstance(backend, OptimumWhisper):
            backend.close()
    del backends
    gc.collect()
    return rtf_rows, steps


def notes(args: argparse.Namespace, names: list[str]) -> list[str]:
    out = ["RTF and ms/step are medians over the repeats; x ours-f32 is the median of the per-repeat ratios to "
           "ours-f32 (below 1: faster than ours-f32)"]
    frames = Folder(args.fixture).window_frames
    if any(n.startswith("faster-whisper") for n in names):
        if frames != 3000:
            out.append(f"faster-whisper pads every window to 3000 frames (audio.pad_or_trim's default), which a "
                       f"{frames}-frame model rejects: it was made to pad to the model's window")
        out.append("faster-whisper: max_new_tokens is set so that CTranslate2 (which decodes max_length // 2 new "
                   "tokens) allows max_target_positions - 4 a window, as the others")
    if OPTIMUM in names:
        out.append("optimum: timed inside its worker process (features, generate and the text's decoding; generate "
                   "for a step), the .npy file, the pipe and the JSON not timed")
        if frames != 3000:
            out.append(f"optimum: its export traces a 3000-frame dummy input, which a {frames}-frame model rejects: "
                       f"it was given nb_max_frames {frames} (optimum-cli's --nb_max_frames)")
    return out


def whisper_speed_main() -> None:
    args = parse_args()
    machine_info = harness.machine_info

    default = [*BACKENDS, OPTIMUM] if args.optimum_python else list(BACKENDS)
    names = [n for n in args.backends.split(",") if n] if args.backends else default
    if OPTIMUM in names and not args.optimum_python:
        raise SystemExit(f"the backend {OPTIMUM} needs --optimum-python")
    skipped: list[str] = []
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="whisper_speed_")))
        work.mkdir(parents=True, exist_ok=True)
        recording = long_recording(args.fixture, args.seconds, args.seed, work)
        print(f"recording: {len(recording[0]) / RATE:.1f} s, {len(recording[1].split())} words", file=sys.stderr)
        rtf, steps = run_model("whisper-digits (trained)", args.fixture, args, work / "fixture", names, recording,
                               not args.no_rtf, skipped)
        for layout in [n for n in args.layouts.split(",") if n]:
            folder = random_folder(layout, work / f"random-{layout}", args.vocab)
            steps += run_model(f"random {layout}", folder, args, work / f"random-{layout}-out", names, None,
                               skipped=skipped)[1]
    settings = {**vars(args), "fixture": str(args.fixture), "work": str(args.work), "json": str(args.json),
                "optimum_python": str(args.optimum_python), "backends": ",".join(names), "n_short": N_SHORT,
                "pause_s": PAUSE}
    report = {"tool": TOOL, "machine": {**machine_info(args.threads), **versions(args.optimum_python)},
              "settings": settings, "rtf": rtf, "steps": steps, "notes": notes(args, names) + skipped}
    print(markdown(report))
    if args.json:
        harness.write_text(args.json, json.dumps(report, indent=2) + "\n")


WORD_TIMESTAMPS_DOC = r"""What Whisper's word timestamps cost: transcribe with and without word_timestamps,
interleaved.

    .venv/bin/python -m benchmarks word-timestamps [--seconds 120] [--repeat 3] [--threads 2] \
        [--layouts digits,base] [--work DIR]

One long recording (whisper_speed.long_recording: held-out English digit strings spoken by espeak-ng, with
pauses) is transcribed long-form (language en, timestamps) by each export on CPU, every repeat once plainly and
once with word_timestamps=True, in an order that alternates per repeat. Layouts: `digits` (the trained fixture,
models/whisper-digits: 4 s windows, its real decoding) and `base` (a random-weight folder of openai/whisper-base's
layout, 30 s windows, whisper_speed.random_folder; at most 32 new tokens a window so that its random tokens
decode as long in both runs). The extra time is the alignment (runtime.speech.words.window_times: each window
encoded again, its tokens through alignment.onnx, and the dynamic time warping, timed apart); the table gives the
median seconds of each and the median of the paired ratios words / plain.
"""

FIXTURE = ROOT / "models" / "whisper-digits"

MAX_NEW = {"digits": None, "base": 32}


class Timer:
    """Seconds spent in a module function, summed (wrapped in place)."""

    def __init__(self, module, name: str):
        self.total, self.module, self.name, self.inner = 0.0, module, name, getattr(module, name)
        setattr(module, name, harness.summing(self.inner, self.add))

    def add(self, seconds: float) -> None:
        self.total += seconds


def folder_for(layout: str, work: Path) -> Path:
    return FIXTURE if layout == "digits" else random_folder(layout, work / f"{layout}-hf", 51865)


def measure(layout: str, samples, repeats: int, threads: int, work: Path) -> dict:
    model = open_export(exported(folder_for(layout, work), work / f"{layout}-onnx", None), "cpu",
                        RuntimeOptions(intra_op_threads=threads))
    options = dict(language="en", timestamps=True, max_new_tokens=MAX_NEW[layout])
    align, dtw = Timer(whisper_words, "window_times"), Timer(alignment, "dtw")
    model.transcribe(samples[:8 * 16000], word_timestamps=True, **options)  # warm-up (sessions, caches)
    times = {"plain": [], "words": []}
    aligned, warped, words = [], [], 0
    for r in range(repeats):
        for kind in (("plain", "words") if r % 2 == 0 else ("words", "plain")):
            align.total = dtw.total = 0.0
            seconds, result = harness.timed_call(
                lambda: model.transcribe(samples, word_timestamps=kind == "words", **options))
            times[kind].append(seconds)
            if kind == "words":
                aligned.append(align.total)
                warped.append(dtw.total)
                words = len(result["words"])
    ratios = [w / p for w, p in zip(times["words"], times["plain"])]
    return {"layout": layout, "plain": harness.median(times["plain"]), "words": harness.median(times["words"]),
            "ratio": harness.median(ratios), "alignment": harness.median(aligned),
            "dtw": harness.median(warped), "word_count": words}


def word_timestamps_main() -> None:
    p = argparse.ArgumentParser(description=WORD_TIMESTAMPS_DOC.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layouts", default="digits,base")
    p.add_argument("--work", type=Path, default=Path("/tmp/word_timestamps"))
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    samples, _ = long_recording(FIXTURE, args.seconds, 0, args.work)
    print(f"| layout | plain (s) | with words (s) | words / plain | alignment (s) | of which DTW (s) | words |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for layout in args.layouts.split(","):
        r = measure(layout, samples, args.repeat, args.threads, args.work)
        print(f"| {r['layout']} | {r['plain']:.2f} | {r['words']:.2f} | {r['ratio']:.3f} | {r['alignment']:.2f} | "
              f"{r['dtw']:.3f} | {r['word_count']} |", flush=True)
