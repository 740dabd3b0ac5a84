"""Whisper: speed against faster-whisper, transformers and Optimum; what word timestamps cost; serve's in-flight windows."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator
import argparse
import contextlib
import functools
import gc
import json
import numpy as np
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import tfm_export.runtime.speech.alignment as alignment
import tfm_export.runtime.speech.words as whisper_words
import time

from benchmarks import fixtures
from tfm_export.bench import harness
from tfm_export.runtime import RuntimeOptions, open_export


# --- whisper_speed --------------------------------------------------------------------------------

WHISPER_SPEED_DOC = r"""Whisper on CPU: tfm-export's ONNX Runtime export vs faster-whisper (CTranslate2) vs transformers (vs Optimum) (#39).

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
                         optimum_whisper_worker.py under that python: Optimum's ONNX export needs
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

ROOT = Path(__file__).resolve().parent.parent

TOOL = "tfm-export `benchmarks whisper-speed`"
RATE = 16000
BACKENDS = ("ours-f32", "ours-int8", "faster-whisper-f32", "faster-whisper-int8", "transformers")
OPTIMUM = "optimum"  # a backend only with --optimum-python
OPTIMUM_WORKER = Path(__file__).resolve().parent / "optimum_worker.py"  # its whisper mode
N_SHORT = 4  # new tokens of the short decode of the step measure
WARMUP_SECONDS = 8.0
PAUSE = 0.3  # seconds of rest before each timed backend: the last one's spinning threads (OpenMP, ORT) go idle


# ---- inputs --------------------------------------------------------------------------------------

def long_recording(fixture: Path, seconds: float, seed: int, work: Path) -> tuple[np.ndarray, str]:
    """(samples, the spoken words): held-out English digit strings with pauses, `seconds` long; cached in
    `work` (a wav and its words) per (seconds, seed)."""
    import soundfile

    wav, txt = work / f"digits_{seconds:g}s_{seed}.wav", work / f"digits_{seconds:g}s_{seed}.txt"
    if wav.exists() and txt.exists():
        return soundfile.read(wav, dtype="float32")[0], txt.read_text()
    # the fixture's speech: espeak-ng, as the model was trained and tested
    speech = fixtures._load("whisper_digits_speech", fixture / "speech.py")

    rng, target = random.Random(seed), int(seconds * RATE)
    parts, words, total = [], [], 0
    while True:
        spoken = speech.draw(rng, "en", heldout=True)
        pause, said = np.zeros(int(rng.uniform(0.4, 1.2) * RATE), np.float32), spoken.samples()
        if total + len(pause) + len(said) > target:
            break
        parts += [pause, said]
        words.append(spoken.text())
        total += len(pause) + len(said)
    parts.append(np.zeros(target - total, np.float32))
    noise = 0.003 * np.random.default_rng(seed).standard_normal(target)
    samples = (np.concatenate(parts) + noise).astype(np.float32)
    soundfile.write(wav, samples, RATE, subtype="FLOAT")
    txt.write_text(" ".join(words))
    return samples, " ".join(words)


def normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalized(reference), normalized(hypothesis) or "<empty>"))


# ---- folders -------------------------------------------------------------------------------------

def random_layouts() -> dict[str, tuple[Any, int, int]]:
    """name -> (whisper_fixtures.Layout, d_model, heads): published layouts at full width."""
    Layout = fixtures.whisper().Layout

    return {"tiny": (Layout(4, 4, 80, True, 1500), 384, 6),   # openai/whisper-tiny
            "base": (Layout(6, 6, 80, True, 1500), 512, 8),   # openai/whisper-base
            "smoke": (Layout(2, 2, 80, True, 200), 64, 4)}    # 4 s windows: for smoke tests only


def random_folder(name: str, folder: Path, vocab: int) -> Path:
    """A random Whisper folder of layout `name` with `vocab` ids and 448 target positions (the fixtures'
    tokenizer and preprocessor_config; transformers' initialisation, seeded)."""
    import torch
    import transformers
    whisper_folder = fixtures.whisper().whisper_folder

    if (folder / "model.safetensors").exists():
        return folder
    layout, d_model, heads = random_layouts()[name]
    whisper_folder(layout, folder, d_model=d_model, heads=heads)
    config = transformers.WhisperConfig.from_pretrained(folder)
    config.vocab_size, config.max_target_positions = max(vocab, config.vocab_size), 448
    config.init_std = 0.02  # transformers' default: the fixtures' 0.2 grows a 384-wide encoder's outputs so
    # large that float32 rounding alone fails the export's validation (6e-4 on the cross keys)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig.from_pretrained(folder)
    model.generation_config.max_length = 448
    model.save_pretrained(folder)
    return folder


def exported(folder: Path, out: Path, quantize: str | None) -> Path:
    """`tfm-export FOLDER -o OUT [--quantize int8]` (validation included), unless `out` holds an export."""
    if not (out / "manifest.json").exists():
        extra = ["--quantize", quantize] if quantize else []
        done = subprocess.run([sys.executable, "-m", "tfm_export", str(folder), "-o", str(out), *extra],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"tfm-export {folder} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return out


def converted(folder: Path, out: Path, quantization: str | None) -> Path:
    """CTranslate2's TransformersConverter, as faster-whisper's docs convert a Whisper folder."""
    if not (out / "model.bin").exists():
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(folder), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
            str(out), quantization=quantization, force=True)
    return out


# ---- backends ------------------------------------------------------------------------------------

class Folder:
    """What every backend needs to know of the Hugging Face folder."""

    def __init__(self, path: Path):
        config = json.loads((path / "config.json").read_text())
        gen = json.loads((path / "generation_config.json").read_text())
        self.path, self.max_positions = path, config["max_target_positions"]
        self.window_frames, self.n_mels = 2 * config["max_source_positions"], config["num_mel_bins"]
        self.sot, self.eos = config["decoder_start_token_id"], gen["eos_token_id"]
        self.no_timestamps = gen["no_timestamps_token_id"]


class Ours:
    """The export on ONNX Runtime; the encoder session's time is summed (the profile)."""

    def __init__(self, export: Path, folder: Folder, threads: int):
        from tfm_export.runtime import RuntimeOptions, open_export

        self.model = open_export(export, "cpu", RuntimeOptions(intra_op_threads=threads))
        self.encoder_s, self.encoder_calls = 0.0, 0
        encoder = self.model.encoder
        run = encoder.run_with_iobinding

        def timed_run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                self.encoder_s += time.perf_counter() - start
                self.encoder_calls += 1

        encoder.run_with_iobinding = timed_run

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        return self.model.transcribe(samples, language=language, task="transcribe", timestamps=True,
                                     num_beams=1)["text"]

    def steps(self, features: np.ndarray, n: int) -> int:
        from tfm_export.runtime import GREEDY

        ids = self.model.generate_ids(features, max_new_tokens=n, stop_at_eos=False, config=GREEDY)
        return min(len(row) for row in ids)


@contextlib.contextmanager
def window_padding(frames: int):
    """faster-whisper pads each window to 3000 frames (pad_or_trim's default) whatever chunk_length says:
    pad to the model's own window while it runs (nothing changes for 30 s models)."""
    import faster_whisper.transcribe as fwt

    original = fwt.pad_or_trim
    if frames != 3000:
        fwt.pad_or_trim = functools.partial(original, length=frames)
    try:
        yield
    finally:
        fwt.pad_or_trim = original


class Faster:
    """faster-whisper's WhisperModel on a CTranslate2 conversion; its ctranslate2 model for the steps."""

    def __init__(self, ct2: Path, folder: Folder, threads: int, compute_type: str):
        from faster_whisper import WhisperModel

        self.folder = folder
        self.model = WhisperModel(str(ct2), device="cpu", compute_type=compute_type, cpu_threads=threads,
                                  num_workers=1)
        frames = self.model.feature_extractor.nb_max_frames
        if frames != folder.window_frames:
            raise SystemExit(f"faster-whisper read a window of {frames} frames from {ct2}/preprocessor_config.json,"
                             f" the model's is {folder.window_frames}")

    @property
    def max_new_tokens(self) -> int:
        """Up to max_target_positions - 4 new tokens a window, as ours and transformers: CTranslate2's
        Whisper.generate decodes at most max_length // 2 new tokens (OpenAI's sample_len, n_text_ctx // 2) and
        faster-whisper passes max_length = len(prompt) + max_new_tokens (3 ids here), capped at 448."""
        return min(2 * (self.folder.max_positions - 4) - 3, 448 - 3)

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        with window_padding(self.folder.window_frames):
            segments, _ = self.model.transcribe(
                samples, language=language, task="transcribe", beam_size=1, best_of=1, temperature=0.0,
                condition_on_previous_text=False, vad_filter=False, without_timestamps=False,
                word_timestamps=False, compression_ratio_threshold=None, log_prob_threshold=None,
                no_speech_threshold=None, max_new_tokens=self.max_new_tokens)
            return "".join(segment.text for segment in segments)  # a generator: decoding happens here

    def steps(self, features: np.ndarray, n: int) -> int:
        import ctranslate2

        f = self.folder
        prompt = [f.sot, f.no_timestamps]
        out = self.model.model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(features)),
                                        [prompt] * len(features), beam_size=1, max_length=2 * n,  # n new ids
                                        suppress_tokens=[f.eos], suppress_blank=False)
        return min(len(r.sequences_ids[0]) for r in out)


class Eager:
    """transformers' WhisperForConditionalGeneration, eager attention, float32."""

    def __init__(self, folder: Folder, threads: int):
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.folder = folder
        self.model = transformers.WhisperForConditionalGeneration.from_pretrained(
            str(folder.path), attn_implementation="eager").eval()
        self.extractor = transformers.WhisperFeatureExtractor.from_pretrained(str(folder.path))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder.path))

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        import torch

        long = len(samples) > self.extractor.n_samples  # long-form: all frames, unpadded, and a mask
        inputs = self.extractor(samples, sampling_rate=RATE, return_tensors="pt", truncation=not long,
                                padding="longest" if long else "max_length", return_attention_mask=True)
        with torch.inference_mode():
            ids = self.model.generate(
                inputs.input_features, attention_mask=inputs.attention_mask, language=language, task="transcribe",
                return_timestamps=True, condition_on_prev_tokens=False, num_beams=1, do_sample=False,
                compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)[0]

    def steps(self, features: np.ndarray, n: int) -> int:
        import torch
        import transformers
        from transformers.generation.utils import GenerationMixin

        f = self.folder
        config = transformers.GenerationConfig(
            decoder_start_token_id=f.sot, eos_token_id=f.eos, pad_token_id=f.eos, bos_token_id=f.eos,
            max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1, use_cache=True)
        prompt = torch.tensor([[f.sot, f.no_timestamps]] * len(features))
        with torch.inference_mode():
            out = GenerationMixin.generate(self.model, input_features=torch.from_numpy(features),
                                           decoder_input_ids=prompt, generation_config=config)
        return out.shape[1] - prompt.shape[1]


class OptimumWhisper:
    """optimum_whisper_worker.py under Optimum's venv's python: exports (or reuses) `work`/optimum, then times
    each call itself: `seconds` is the last call's time as the worker measured it, which the measures take
    instead of their own (own_time)."""

    def __init__(self, python: Path, folder: Folder, work: Path, threads: int):
        work.mkdir(parents=True, exist_ok=True)
        # stderr is this process's: Optimum's export messages, and why the worker failed if it does
        self.process = subprocess.Popen(
            [str(python), str(OPTIMUM_WORKER), "whisper", str(folder.path), str(work / "optimum"), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin and self.process.stdout
        self.requests, self.replies, self.work = self.process.stdin, self.process.stdout, work
        self.sent: dict[str, tuple[np.ndarray, Path]] = {}  # kind -> (the array last written, its file)
        self.seconds = 0.0
        self.export_s: float | None = self.ask(None)["export_s"]

    def ask(self, request: dict[str, Any] | None) -> dict[str, Any]:
        """Send `request` (None: only read, the ready line) and read the reply; its seconds kept."""
        if request is not None:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"{OPTIMUM_WORKER.name} exited with status {self.process.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{OPTIMUM_WORKER.name}: {reply['error']}")
        self.seconds = reply.get("seconds", 0.0)
        return reply

    def npy(self, kind: str, array: np.ndarray) -> str:
        """`array` as a .npy file in the work folder, written when it is not the array last sent as `kind`."""
        held = self.sent.get(kind)
        if held is None or held[0] is not array:
            path = self.work / f"optimum-{kind}.npy"
            np.save(path, np.ascontiguousarray(array, dtype=np.float32))
            self.sent[kind] = (array, path)  # the array is held, so its identity is not reused
        return str(self.sent[kind][1])

    def transcribe(self, samples: np.ndarray, language: str) -> str:
        return self.ask({"transcribe": self.npy("samples", samples), "language": language})["text"]

    def steps(self, features: np.ndarray, n: int) -> int:
        return self.ask({"steps": self.npy("features", features), "new_tokens": n})["new_tokens"]

    def close(self) -> None:
        self.requests.close()  # end of input ends the worker
        self.process.wait(timeout=60)


def own_time(backend: Any, outside: float) -> float:
    """A call's seconds: `outside` (its wall time, taken here), or Optimum's as its worker measured it."""
    return backend.seconds if isinstance(backend, OptimumWhisper) else outside


def open_backends(names: list[str], folder: Folder, work: Path, threads: int, optimum_python: Path | None = None,
                  skipped: list[str] | None = None) -> dict[str, Any]:
    """The backends by name, each on `folder` (exports and conversions made in `work` when missing). A folder
    that Optimum refuses leaves it out, with the reason printed and added to `skipped`."""
    made: dict[str, Any] = {}
    for name in names:
        if name.startswith("ours-"):
            quantize = None if name == "ours-f32" else "int8"
            made[name] = Ours(exported(folder.path, work / name, quantize), folder, threads)
        elif name.startswith("faster-whisper-"):
            int8 = name.endswith("int8")
            ct2 = converted(folder.path, work / f"ct2-{'int8' if int8 else 'f32'}", "int8" if int8 else None)
            made[name] = Faster(ct2, folder, threads, "int8" if int8 else "float32")
        elif name == "transformers":
            made[name] = Eager(folder, threads)
        elif name == OPTIMUM and optimum_python:
            try:
                made[name] = OptimumWhisper(optimum_python, folder, work, threads)
            except Exception as exc:  # no such python, or a folder Optimum refuses (its stderr above says more)
                reason = f"Optimum skipped on {folder.path.name}: {type(exc).__name__}: {exc}"
                print(reason, file=sys.stderr, flush=True)
                if skipped is not None:
                    skipped.append(reason)
        else:
            raise SystemExit(f"unknown backend {name}; choose from {', '.join(BACKENDS)}, {OPTIMUM} (with "
                             "--optimum-python)")
    return made


# ---- measures ------------------------------------------------------------------------------------

def rotated(names: list[str], r: int) -> list[str]:
    """The order of round `r` (the harness's rotation: A, B / B, A for two)."""
    return harness.rotation(names, r + 1)[r]


def paired_ratio(times: dict[str, list[float]], name: str, base: str = "ours-f32") -> float | None:
    """Median over repeats of name's figure / base's figure in the same repeat."""
    if base not in times:
        return None
    return harness.median(a / b for a, b in zip(times[name], times[base]))


def measure_rtf(backends: dict[str, Any], samples: np.ndarray, reference: str, repeats: int) -> list[dict]:
    """Every backend transcribes the recording once per repeat (after a warm-up on its first 8 s)."""
    for backend in backends.values():
        backend.transcribe(samples[:int(WARMUP_SECONDS * RATE)], "en")
    times: dict[str, list[float]] = {name: [] for name in backends}
    texts, encoder = {}, {name: [] for name in backends if isinstance(backends[name], Ours)}
    for r in range(repeats):
        for name in rotated(list(backends), r):
            backend = backends[name]
            if isinstance(backend, Ours):
                backend.encoder_s, backend.encoder_calls = 0.0, 0
            time.sleep(PAUSE)
            start = time.perf_counter()
            texts[name] = backend.transcribe(samples, "en")
            times[name].append(own_time(backend, time.perf_counter() - start))
            if isinstance(backend, Ours):
                encoder[name].append((backend.encoder_s, backend.encoder_calls))
            print(f"  repeat {r + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr)
    features_s = features_seconds(backends, samples, repeats)
    seconds = len(samples) / RATE
    rows = []
    for name, runs in times.items():
        row = {"backend": name, "audio_s": seconds, "runs_s": runs, "median_s": harness.median(runs),
               "rtf": harness.median(runs) / seconds, "ratio_to_ours_f32": paired_ratio(times, name),
               "wer": wer(reference, texts[name]), "words": len(normalized(texts[name]).split()),
               "text_head": texts[name][:120]}
        if name in encoder:
            row["encoder_share"] = harness.median(e / t for (e, _), t in zip(encoder[name], runs))
            row["encoder_windows"] = encoder[name][-1][1]
            row["features_share"] = features_s / row["median_s"] if features_s else None
        rows.append(row)
    return rows


def features_seconds(backends: dict[str, Any], samples: np.ndarray, repeats: int) -> float | None:
    """The export's log-mel features of the whole recording, timed alone (median of `repeats`)."""
    from tfm_export.audio.features import log_mel_spectrogram
    from tfm_export.runtime.speech.whisper import speech_settings

    ours = next((b for b in backends.values() if isinstance(b, Ours)), None)
    if ours is None:
        return None
    config = speech_settings(ours.model)[1]
    return harness.median(harness.timed(lambda: log_mel_spectrogram(samples, config)) for _ in range(repeats))


def step_ms(backend: Any, features: np.ndarray, n_long: int, min_seconds: float) -> float:
    """(t(n_long) - t(N_SHORT)) / (n_long - N_SHORT) in ms, over as many (short, long) pairs as fill
    `min_seconds` (at least one); t as own_time gives it."""
    short = long = 0.0
    pairs, begin = 0, time.perf_counter()
    while pairs == 0 or time.perf_counter() - begin < min_seconds:
        start = time.perf_counter()
        backend.steps(features, N_SHORT)
        middle = time.perf_counter()
        short += own_time(backend, middle - start)
        backend.steps(features, n_long)
        long, pairs = long + own_time(backend, time.perf_counter() - middle), pairs + 1
    return (long - short) / pairs / (n_long - N_SHORT) * 1000


def measure_steps(backends: dict[str, Any], features: np.ndarray, n_long: int, repeats: int,
                  model: str, min_seconds: float) -> list[dict]:
    """ms per decoding step at this batch (step_ms), each repeat running every backend in turn."""
    for name, backend in backends.items():  # warm-up, and the lengths checked
        for n in (N_SHORT, n_long):
            got = backend.steps(features, n)
            if got != n:
                raise SystemExit(f"{name} generated {got} tokens, not {n}, on {model}")
    times: dict[str, list[float]] = {name: [] for name in backends}
    for r in range(repeats):
        for name in rotated(list(backends), r):
            time.sleep(PAUSE)
            times[name].append(step_ms(backends[name], features, n_long, min_seconds))
    return [{"model": model, "batch": len(features), "backend": name, "new_tokens": [N_SHORT, n_long],
             "runs_ms": runs, "ms_per_step": harness.median(runs), "ratio_to_ours_f32": paired_ratio(times, name)}
            for name, runs in times.items()]


def step_features(folder: Folder, batch: int, samples: np.ndarray | None) -> np.ndarray:
    """(batch, n_mels, window frames): the recording's first windows (trained fixture), else noise."""
    if samples is None:
        rng = np.random.default_rng(0)
        return rng.uniform(-0.8, 1.2, (batch, folder.n_mels, folder.window_frames)).astype(np.float32)
    from tfm_export.audio.features import FeatureConfig, log_mel_spectrogram

    config = FeatureConfig.from_preprocessor_config(json.loads((folder.path / "preprocessor_config.json").read_text()))
    mel = log_mel_spectrogram(samples, config)
    windows = [mel[:, i:i + folder.window_frames] for i in range(0, mel.shape[1], folder.window_frames)]
    windows = [w for w in windows if w.shape[1] == folder.window_frames] or [np.pad(
        mel, ((0, 0), (0, folder.window_frames - mel.shape[1])))]
    return np.ascontiguousarray(np.stack([windows[i % len(windows)] for i in range(batch)]))


# ---- report --------------------------------------------------------------------------------------

def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    s, lines = report["settings"], []
    if report["rtf"]:
        lines += [f"## Long-form real-time factor: {s['seconds']:g} s of espeak-ng digits, whisper-digits (trained), "
                  f"{s['threads']} threads, median of {s['repeat']}", "",
                  "| backend | median s | RTF | x ours-f32 | WER | encoder share | features share |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["rtf"]:
        lines.append(f"| {r['backend']} | {r['median_s']:.2f} | {r['rtf']:.4f} | {fmt(r['ratio_to_ours_f32'], '.2f')}"
                     f" | {r['wer']:.3f} | {fmt(r.get('encoder_share'), '.1%')}"
                     f" | {fmt(r.get('features_share'), '.1%')} |")
    lines += ["", f"## Decoder ms per step (one new token for every row; (t(n_long) - t({N_SHORT})) / "
              f"(n_long - {N_SHORT}), EOS banned), median of {s['repeat']}", "",
              "| model | batch | backend | ms/step | x ours-f32 |", "|---|---:|---|---:|---:|"]
    for r in report["steps"]:
        lines.append(f"| {r['model']} | {r['batch']} | {r['backend']} | {r['ms_per_step']:.2f} "
                     f"| {fmt(r['ratio_to_ours_f32'], '.2f')} |")
    lines += ["", *(f"- {note}" for note in report["notes"])]
    return "\n".join(lines)


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


def versions(optimum_python: Path | None) -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("faster-whisper", "ctranslate2", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    if optimum_python:
        from benchmarks.families import optimum_versions  # the Optimum venv's optimum, transformers and onnxruntime

        out |= optimum_versions(optimum_python)
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


# --- word_timestamps ------------------------------------------------------------------------------

WORD_TIMESTAMPS_DOC = r"""What Whisper's word timestamps cost: transcribe with and without word_timestamps, interleaved.

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

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start
        setattr(module, name, timed)


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
            start = time.perf_counter()
            result = model.transcribe(samples, word_timestamps=kind == "words", **options)
            times[kind].append(time.perf_counter() - start)
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


# --- served_speech --------------------------------------------------------------------------------

SERVED_SPEECH_DOC = r"""Served Whisper throughput: in-flight windows vs one recording at a time vs faster-whisper's
BatchedInferencePipeline, on the same weights and recordings (#43).

    .venv/bin/python -m benchmarks served-speech [--layout base] [--recordings 16] [--clients 16] \
        [--max-batch 8] [--max-length 128] [--repeat 3] [--threads 2] [--work DIR] [--json OUT.json]

faster-whisper is a benchmark-only dependency (`benchmarks whisper-speed`'s docstring says how to install it).

Weights: random weights of a published layout (whisper_speed.random_folder: base is d_model 512, 6 + 6
layers, 80 mels, 30 s windows, 51,865 ids, transformers' initialisation), its generation_config's
max_length set to --max-length: random weights never say EOS, so every window decodes max_length - 4
tokens (<|startoftranscript|>, language, task, <|notimestamps|> come first); 124 is about what 30 s of
speech takes. Recordings: --recordings of tones in noise, 10 to 30 s each (seeded), each one window, as
16 kHz WAV files; language "en" given, json answers (no timestamps), greedy.

Modes, each on --threads ONNX Runtime / CTranslate2 threads, taking turns within each repeat (order rotated):
  inflight   `tfm-export serve OUT --max-batch B` on an export with --static-slots 448 (Whisper's
             max_target_positions: a window's prompt and budget always fit; made with --no-validate): every
             window a job of the in-flight batch (serve.windows), B recordings at once (--audio-workers'
             default); --clients clients post every recording over HTTP
  single     the same export served with `--batching single --audio-workers 1`: one recording at a time
  faster-whisper-batched  faster_whisper.BatchedInferencePipeline(batch_size=B) on the CTranslate2 conversion
             of the same folder, float32, in this process: the recordings one after the other in one array,
             each its own clip (clip_timestamps; no VAD), so its batches hold B recordings' windows, as ours
Figure: audio seconds transcribed per wall second (all recordings, first request sent to last answer),
median over repeats, and the median ratio to `single` within a repeat. The in-flight answers must equal
the one-at-a-time ones. Profile: one window's encoder run and one decoder step at batch 1 and at batch B
(the export's own sessions, timed alone) bound what batching the decoder can gain while every window
still runs the encoder once.
"""

PROMPT = 4  # <|startoftranscript|>, <|en|>, <|transcribe|>, <|notimestamps|>


def folder_of(layout: str, max_length: int, work: Path) -> Path:
    """The random folder of `layout` with its generation_config's max_length set (a copy of the benchmark's own)."""
    folder = random_folder(layout, work / f"{layout}-folder", 51865)
    gen_path = folder / "generation_config.json"
    gen = json.loads(gen_path.read_text())
    if gen.get("max_length") != max_length:
        gen["max_length"] = max_length
        gen_path.write_text(json.dumps(gen, indent=2) + "\n")
    return folder


def served_exported(folder: Path, out: Path, slots: int = 448) -> Path:
    """`folder` exported to `out` (unless done already) with its static decoder for `slots` target positions (448:
    all of Whisper's; served, its windows are batched in flight; the served answers are checked against the
    one-at-a-time server's, which decodes on decoder.onnx)."""
    if not (out / "manifest.json").exists():
        done = subprocess.run([sys.executable, "-m", "tfm_export", str(folder), "-o", str(out), "--static-slots",
                               str(slots), "--no-validate"], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the export failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return out


def recordings(count: int, work: Path, seed: int = 0) -> list[tuple[Path, float]]:
    """`count` WAV files of 10-30 s: tones gliding in noise."""
    import soundfile

    rng, made = np.random.default_rng(seed), []
    for n in range(count):
        seconds = float(rng.uniform(10, 30))
        path = work / f"rec{n:02d}_{seconds:.1f}s.wav"
        if not path.exists():
            t = np.arange(int(seconds * RATE)) / RATE
            tone = 0.3 * np.sin(2 * np.pi * (200 + 30 * n + 60 * np.sin(0.5 * t)) * t)
            soundfile.write(path, (tone + 0.02 * rng.standard_normal(len(t))).astype(np.float32), RATE,
                            subtype="PCM_16")
        made.append((path, seconds))
    return made


def free_port() -> int:
    """A loopback port that nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(export: Path, threads: int, *options: str) -> Iterator[str]:
    """`tfm-export serve` in a subprocess until the block ends; yields its URL once /healthz answers."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tfm_export", "serve", str(export), "--port", str(port),
                             "--threads", str(threads), "--max-queue", "256", *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None:
                raise SystemExit(f"serve {' '.join(options)} stopped: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)


def served(url: str, recs: list[tuple[Path, float]], clients: int) -> tuple[float, list[str]]:
    """Every recording posted by `clients` clients at once: (wall seconds, the texts in order)."""
    import httpx

    def post(rec: tuple[Path, float]) -> str:
        reply = httpx.post(f"{url}/v1/audio/transcriptions", timeout=3600,
                           data={"model": "whisper-1", "language": "en", "response_format": "json"},
                           files={"file": (rec[0].name, rec[0].read_bytes())})
        reply.raise_for_status()
        return reply.json()["text"]

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        texts = list(pool.map(post, recs))
    return time.perf_counter() - start, texts


class FasterBatched:
    """faster-whisper's BatchedInferencePipeline over the recordings as clips of one array."""

    def __init__(self, ct2: Path, threads: int, batch: int, max_length: int):
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        model = WhisperModel(str(ct2), device="cpu", compute_type="float32", cpu_threads=threads, num_workers=1)
        self.pipeline, self.batch = BatchedInferencePipeline(model), batch
        # CTranslate2 decodes at most max_length // 2 new ids, and faster-whisper passes it
        # len(prompt) + max_new_tokens: ask twice the budget so that the budget binds (whisper_speed.Faster)
        self.max_new_tokens = 2 * (max_length - PROMPT) - 3
        self.tokens = 0

    def run(self, recs: list[tuple[Path, float]]) -> float:
        import soundfile

        audio = [soundfile.read(path, dtype="float32")[0] for path, _ in recs]
        clips, at = [], 0
        for samples in audio:
            clips.append({"start": at / RATE, "end": (at + len(samples)) / RATE})
            at += len(samples)
        start = time.perf_counter()
        with window_padding(self.pipeline.model.feature_extractor.nb_max_frames):  # the smoke layout's 4 s
            return self._transcribe(audio, clips, start)

    def _transcribe(self, audio: list[np.ndarray], clips: list[dict[str, float]], start: float) -> float:
        segments, _ = self.pipeline.transcribe(
            np.concatenate(audio), language="en", task="transcribe", beam_size=1, best_of=1, temperature=0.0,
            condition_on_previous_text=False, vad_filter=False, clip_timestamps=clips, without_timestamps=True,
            compression_ratio_threshold=None, log_prob_threshold=None, no_speech_threshold=None,
            max_new_tokens=self.max_new_tokens, batch_size=self.batch)
        self.tokens = sum(len(segment.tokens) for segment in segments)  # a generator: decoding happens here
        return time.perf_counter() - start


def profile(export: Path, threads: int, batch: int, rec: Path) -> dict[str, float]:
    """One window's encoder run, and one decoder step at batch 1 and `batch` (ms), the export's sessions alone;
    the ids a window of `rec` decodes."""
    from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
    from tfm_export.runtime.decode.loop import DecodeTimings

    model = open_export(export, "cpu", RuntimeOptions(intra_op_threads=threads))
    x = np.random.default_rng(0).standard_normal((batch, model.config.n_mels, model.config.n_frames), np.float32)
    out = {}
    for rows in (1, batch):
        timings = DecodeTimings()
        for _ in range(2):
            timings = DecodeTimings()
            model.generate_ids(x[:rows], max_new_tokens=64, stop_at_eos=False, config=GREEDY, timings=timings)
        out[f"encoder_s_batch{rows}"] = timings.encoder_s
        out[f"step_ms_batch{rows}"] = 1000 * harness.median(timings.steps_s[1:])
    out["ours_ids_per_window"] = len(model.transcribe(str(rec), language="en")["ids"])
    return out


def served_speech_main() -> None:
    parser = argparse.ArgumentParser(description=SERVED_SPEECH_DOC.split("\n\n")[0])
    parser.add_argument("--layout", default="base")
    parser.add_argument("--recordings", type=int, default=16)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="inflight,single,faster-whisper-batched")
    parser.add_argument("--work", type=Path, default=Path("/tmp/served-speech"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    folder = folder_of(args.layout, args.max_length, args.work)
    export = served_exported(folder, args.work / f"{args.layout}-len{args.max_length}-s448-onnx")
    recs = recordings(args.recordings, args.work)
    audio_s = sum(seconds for _, seconds in recs)
    modes = args.modes.split(",")
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    texts: dict[str, list[str]] = {}
    faster = None
    if "faster-whisper-batched" in modes:
        ct2 = converted(folder, args.work / f"{args.layout}-len{args.max_length}-ct2", None)
        faster = FasterBatched(ct2, args.threads, args.max_batch, args.max_length)
    servers = {"inflight": ("--max-batch", str(args.max_batch)), "single": ("--batching", "single",
                                                                             "--audio-workers", "1")}
    with contextlib.ExitStack() as stack:
        urls = {mode: stack.enter_context(server(export, args.threads, *servers[mode]))
                for mode in modes if mode in servers}
        for mode, url in urls.items():  # warm-up: sessions, first runs
            served(url, recs[:2], 2)
        if faster is not None:
            faster.run(recs[:2])
        for r in range(args.repeat):
            for mode in rotated(modes, r):
                if mode in urls:
                    wall, texts[mode] = served(urls[mode], recs, args.clients)
                else:
                    wall = faster.run(recs)
                times[mode].append(wall)
                print(f"repeat {r} {mode}: {wall:.1f} s, {audio_s / wall:.2f} audio s/s", file=sys.stderr, flush=True)
    if "inflight" in texts and "single" in texts:
        assert texts["inflight"] == texts["single"], "the in-flight answers differ from one at a time"
    report = {"layout": args.layout, "recordings": len(recs), "audio_s": audio_s, "max_batch": args.max_batch,
              "clients": args.clients, "threads": args.threads, "max_length": args.max_length,
              "load_average": os.getloadavg(), "modes": {}}
    for mode in modes:
        ratios = [t_single / t for t, t_single in zip(times[mode], times.get("single", times[mode]))]
        report["modes"][mode] = {"median_s": harness.median(times[mode]), "times_s": times[mode],
                                 "audio_s_per_s": audio_s / harness.median(times[mode]),
                                 "x_single": harness.median(ratios)}
    if faster is not None:
        report["faster_whisper_tokens"] = faster.tokens
    report["profile"] = profile(export, args.threads, args.max_batch, recs[0][0])
    print(json.dumps(report, indent=2))
    if args.json:
        harness.write_text(args.json, json.dumps(report, indent=2) + "\n")
