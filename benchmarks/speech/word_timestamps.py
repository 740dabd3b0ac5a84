from __future__ import annotations

import argparse
from pathlib import Path

from tfm_export.bench import harness
from tfm_export.runtime import RuntimeOptions, open_export
import tfm_export.runtime.speech.alignment as alignment
import tfm_export.runtime.speech.words as whisper_words

from .inputs import ROOT, exported, long_recording, random_folder

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
