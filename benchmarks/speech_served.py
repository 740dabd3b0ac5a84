"""`served-speech`: serve's in-flight windows against one recording at a time and faster-whisper batched
(SERVED_SPEECH_DOC); its served export and server are what `live-speech` (benchmarks/live.py) serves too."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np

from tfm_export.bench.fixtures import random_folder
from tfm_export.bench import harness
from tfm_export.bench.serving import free_port
from tfm_export.bench.whisper import RATE, converted, window_padding
from tfm_export.bench.whisper_measures import rotated
from tfm_export.runtime import RuntimeOptions, open_export

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

    def post_all() -> list[str]:
        with ThreadPoolExecutor(clients) as pool:
            return list(pool.map(post, recs))

    return harness.timed_call(post_all)


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
        with window_padding(self.pipeline.model.feature_extractor.nb_max_frames):  # the smoke layout's 4 s
            return harness.timed(lambda: self._transcribe(audio, clips))

    def _transcribe(self, audio: list[np.ndarray], clips: list[dict[str, float]]) -> None:
        segments, _ = self.pipeline.transcribe(
            np.concatenate(audio), language="en", task="transcribe", beam_size=1, best_of=1, temperature=0.0,
            condition_on_previous_text=False, vad_filter=False, clip_timestamps=clips, without_timestamps=True,
            compression_ratio_threshold=None, log_prob_threshold=None, no_speech_threshold=None,
            max_new_tokens=self.max_new_tokens, batch_size=self.batch)
        self.tokens = sum(len(segment.tokens) for segment in segments)  # a generator: decoding happens here


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
