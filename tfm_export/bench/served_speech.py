"""What `served-speech` measures (benchmarks/speech_served.py): Whisper served with its windows in flight, one
recording at a time, and faster-whisper's BatchedInferencePipeline, on the same weights and recordings; and the
served export that `live-speech` serves too (served_exported).

faster-whisper is a benchmark-only dependency, imported only when its side runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import TfmExportError
from ..manifest import has_manifest
from . import fixtures, harness
from .serving import serve_process
from .whisper import RATE, window_padding

log = logging.getLogger(__name__)

PROMPT = 4  # <|startoftranscript|>, <|en|>, <|transcribe|>, <|notimestamps|>


def folder_of(layout: str, max_length: int, work: Path) -> Path:
    """The random folder of `layout` (fixtures.random_folder) with its generation_config's max_length set."""
    folder = fixtures.random_folder(layout, work / f"{layout}-folder", 51865)
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
    if not has_manifest(out):
        done = subprocess.run([sys.executable, "-m", "tfm_export", str(folder), "-o", str(out), "--static-slots",
                               str(slots), "--no-validate"], capture_output=True, text=True)
        if done.returncode:
            raise TfmExportError(f"the export of {folder} failed: {(done.stdout + done.stderr)[-3000:]}")
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
    proc, url = serve_process(export, ["--threads", str(threads), "--max-queue", "256", *options],
                              " ".join(options) or "served-speech", seconds=120)
    try:
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
        # len(prompt) + max_new_tokens: ask twice the budget so that the budget binds (whisper.Faster)
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


def rounds(modes: list[str], urls: dict[str, str], faster: FasterBatched | None, recs: list[tuple[Path, float]],
           clients: int, repeat: int) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """Every mode warmed up on two recordings, then `repeat` rounds of all of them in rotated order: (mode -> wall
    seconds per round, mode -> the served texts of its last round)."""
    for url in urls.values():  # warm-up: sessions, first runs
        served(url, recs[:2], 2)
    if faster is not None:
        faster.run(recs[:2])
    audio_s = sum(seconds for _, seconds in recs)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    texts: dict[str, list[str]] = {}
    for r, order in enumerate(harness.rotation(modes, repeat)):
        for mode in order:
            if mode in urls:
                wall, texts[mode] = served(urls[mode], recs, clients)
            else:
                wall = faster.run(recs)
            times[mode].append(wall)
            log.info("repeat %d %s: %.1f s, %.2f audio s/s", r, mode, wall, audio_s / wall)
    return times, texts


def profile(export: Path, threads: int, batch: int, rec: Path) -> dict[str, float]:
    """One window's encoder run, and one decoder step at batch 1 and `batch` (ms), the export's sessions alone;
    the ids a window of `rec` decodes."""
    from ..runtime import GREEDY, RuntimeOptions, open_export
    from ..runtime.decode.loop import DecodeTimings

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
