"""A 10-minute recording with pauses: ours with VAD + batching against faster-whisper's BatchedInferencePipeline
(issue #60), same weights, same precision, CPU, one interleaved run; time and WER.

    .venv/bin/python -m benchmarks speech-batched [--fixture models/whisper-digits] [--seconds 600] \
        [--rounds 3] [--threads 2] [--batch-size 8] [--precisions float32,int8] [--work DIR] [--json OUT.json]
    .venv/bin/python -m benchmarks speech-batched --wer-only --seeds 0-9 [...]   (WER over many recordings, untimed)

faster-whisper is a benchmark-only dependency, installed without its dependencies (it asks for the CPU
`onnxruntime` wheel, which must never sit beside this venv's onnxruntime-gpu: both are the `onnxruntime`
package; the GPU wheel runs its Silero VAD as well): `.venv/bin/pip install -c constraints.txt --no-deps
faster-whisper av` (constraints.txt pins both).

The recording: --seconds of held-out English digit strings (the fixture's speech.py: espeak-ng, random voice,
speed and pitch, strings never trained on), separated by pauses of 1-12 s, over faint noise (std 0.003); the
spoken words are the reference. The same float32 16 kHz samples go to every side. Cached in --work.

Sides (each per precision: float32, and int8 with `--precisions float32,int8`), all greedy, language "en"
given, task transcribe, no timestamps (the batched pipeline's default), no temperature fallback and no
compression-ratio / log-prob / no-speech thresholds, --threads threads, batches of --batch-size:
  ours              `tfm-export FOLDER -o OUT` (int8: `--quantize int8`), open_export(OUT, "cpu",
                    RuntimeOptions(intra_op_threads=--threads)).transcribe(samples, vad=True,
                    batch_size=B, vad_parameters=the batched pipeline's): its VAD is silero 6.2.3's model
                    (runtime.speech.vad), and the parameters are those faster-whisper's batched pipeline
                    sets (max_speech_duration_s = the model's window, min_silence_duration_ms 160), so both
                    cut the recording into chunks of at most one window
  ours-default-vad  the same call with the default VadParameters (faster-whisper's non-batched VadOptions:
                    2 s of silence end a span, no length limit: a span over a window is transcribed long-form)
  faster-whisper    faster_whisper.BatchedInferencePipeline(WhisperModel(CT2, "cpu", compute_type,
                    cpu_threads=--threads)).transcribe(samples, vad_filter=True, batch_size=B, ...) on the
                    folder converted by ctranslate2's TransformersConverter (int8: quantization "int8"); its
                    own Silero VAD (silero_vad_v6.onnx)
Each side runs once as a warm-up, then --rounds rounds, every side once per round in rotated order
(harness.interleave). The table: median wall seconds, RTF (median / audio seconds), the median of the
per-round ratio to ours of the same precision, the WER of the text against the spoken words (jiwer; both
texts lower-cased, punctuation removed), and the chunks each side's VAD made (counted apart, untimed).
Where the time goes: each side's VAD alone over the recording and the features of the chunks it leads to
(median of 3, on the main thread), the rest being the median run less those; and cProfile of one ours run,
its worker threads included, top 15 functions by own time (the threads overlap: their times add up to more
than the run's).

Known differences, reported rather than hidden:
- CTranslate2 calls a Whisper model multilingual only with 51,865 ids or more; the fixture (532 ids, English
  and German) then reads as English-only, and faster-whisper prompts <|startoftranscript|><|notimestamps|>
  without the language and task it was trained with (WER 0.74 on a 90 s try, most chunks cut after one word).
  So the side's CTranslate2 model is wrapped to say it is multilingual (Multilingual) when the folder's
  generation_config does; nothing else changes.
- faster-whisper's default suppress_tokens [-1] bans the folder's suppress_tokens and "non-speech" tokens,
  each symbol's first token after a space: with Whisper's vocabulary " -" is one token, but the fixture's
  small BPE spells " -" and " zero" alike as "Ġ" + the rest, so the default bans "Ġ" and with it every
  " zero" (WER 0.107 on this recording, the zeros' share of the words). So the side passes the folder's
  suppress_tokens, as ours applies them (faster-whisper adds the task and start tokens, which the model never
  writes there anyway).
- faster-whisper pads every chunk's features to 3000 frames (pad_or_trim's default); the fixture's window is
  400 (4 s), which CTranslate2 refuses otherwise: pad_or_trim is made to pad to the model's window, as
  whisper-speed does. It pads the log-mel features with zeros where Whisper (and ours) pad the audio with
  silence (features = the chunk's maximum - 2); padding with that value instead gave the same text.
- CTranslate2 decodes at most max_length // 2 new tokens and the pipeline passes max_length = prompt +
  max_new_tokens: max_new_tokens is set so that both may write the model's max_target_positions - 4.
- the VADs differ: ours runs silero 6.2.3's 16 kHz model rewritten to take up to 10,000 windows a run
  (models/silero-vad/silero_vad_16k_op15_batched.onnx, tools/vad_batched.py; the state carried between runs),
  faster-whisper its own silero_vad_v6.onnx, as many; the chunk counts show whether they cut the recording alike.
--wer-only: no timing; each side transcribes the recordings of --seeds once, and the table gives each side's
errors and WER per seed and over all, with a paired bootstrap by recording (BOOTSTRAP resamples of the seeds, seed
12345) of each side's WER minus ours' of the same precision: its 95 % interval (covering 0: no difference shown).
Before each timed run the script rests 0.3 s (the last side's spinning threads go idle). The machine's load
average is in the JSON: these 2-core machines are shared, so quote ratios within one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
import argparse
import cProfile
import io
import json
import pstats
import sys
import time

import numpy as np

from tfm_export.bench import fixtures, harness
from tfm_export.bench.fixtures import long_recording
from tfm_export.bench.quality import BOOTSTRAP
from tfm_export.bench.whisper import normalized, versions, wer
from tfm_export.bench.whisper_batched import Faster, Multilingual, Ours, open_sides  # noqa: F401 (the sides)

ROOT = Path(__file__).resolve().parent.parent
RATE = 16000
PAUSES = (1.0, 12.0)  # seconds between utterances
NOISE = 0.003  # std of the noise under the whole recording
PAUSE = 0.3  # seconds of rest before each timed run: the last side's spinning threads (OpenMP, ORT) go idle


def recording(fixture: Path, seconds: float, seed: int, work: Path) -> tuple[np.ndarray, str]:
    """(samples, the spoken words): held-out English digit strings with pauses of 1-12 s over faint noise,
    `seconds` long; cached in `work` (a wav and its words)."""
    return long_recording(fixture, seconds, seed, work, pauses=PAUSES, noise=NOISE, stem="pauses")


# ---- measures ------------------------------------------------------------------------------------

def measure(sides: dict[str, Any], samples: np.ndarray, reference: str, rounds: int, window_s: float) -> list[dict]:
    texts: dict[str, str] = {}

    def timed(name: str) -> Callable[[], float]:
        def run() -> float:
            time.sleep(PAUSE)
            return harness.timed(lambda: texts.__setitem__(name, sides[name](samples)))
        return run

    runs = harness.interleave({name: timed(name) for name in sides}, harness.Plan(rounds=rounds, warmup=1),
                              lambda line: print(line, file=sys.stderr, flush=True))
    seconds, rows = len(samples) / RATE, []
    for name, times in runs.items():
        base = runs["ours " + name.rsplit(" ", 1)[1]]
        rows.append({"side": name, "runs_s": times, "median_s": harness.median(times),
                     "rtf": harness.median(times) / seconds,
                     "x_ours": harness.median(t / b for t, b in zip(times, base)),
                     "wer": wer(reference, texts[name]), "words": len(normalized(texts[name]).split()),
                     "chunks": len(sides[name].chunks(samples, window_s)), "text": texts[name]})
    return rows


def parts(sides: dict[str, Any], samples: np.ndarray, window_s: float, precision: str) -> dict[str, dict]:
    """Where ours' and faster-whisper's time goes, each part alone on the main thread (median of 3): the VAD
    over the recording (speech probabilities and spans) and the features of every chunk it leads to."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps
    from tfm_export.runtime.speech.vad import VadParameters, speech_timestamps

    ours, faster = sides[f"ours {precision}"], sides[f"faster-whisper {precision}"]
    vads = {"ours": lambda: speech_timestamps(samples, VadParameters.of(ours.vad_parameters)),
            "faster-whisper": lambda: get_speech_timestamps(samples, VadOptions(
                max_speech_duration_s=window_s, min_silence_duration_ms=160))}
    out = {}
    for name, side in (("ours", ours), ("faster-whisper", faster)):
        chunks = side.chunks(samples, window_s)
        out[name] = {"vad_s": harness.median(harness.timed(vads[name]) for _ in range(3)),
                     "features_s": harness.median(harness.timed(lambda: side.features(chunks)) for _ in range(3)),
                     "chunks": len(chunks)}
    return out


def profiled(side: Any, samples: np.ndarray, top: int = 15) -> str:
    """cProfile of one run of `side`, its worker threads included (each thread started during the run gets a
    profiler of its own, merged after): the `top` functions by own time."""
    import threading

    profiles = [cProfile.Profile()]

    def start_in_thread(*_: Any) -> None:  # the thread's first event: its own profiler replaces this hook
        profiles.append(cProfile.Profile())
        profiles[-1].enable()

    threading.setprofile(start_in_thread)
    try:
        profiles[0].runcall(side, samples)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    out = io.StringIO()
    pstats.Stats(*profiles, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return f"{len(profiles) - 1} worker threads profiled with the main one\n" + out.getvalue()


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [f"{s['seconds']:g} s, {report['words']} words, {s['threads']} threads, batch {s['batch_size']}, "
             f"median of {s['rounds']} interleaved rounds; load average before {report['load_before']}, after "
             f"{report['machine']['load']}", "",
             "| side | median s | RTF | x ours | WER | words | chunks |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['side']} | {r['median_s']:.2f} | {r['rtf']:.4f} | {r['x_ours']:.2f} | {r['wer']:.3f} "
              f"| {r['words']} | {r['chunks']} |" for r in report["rows"]]
    medians = {r["side"]: r["median_s"] for r in report["rows"]}
    precision = s["precisions"].split(",")[0]
    lines += ["", f"Where the time goes ({precision}; each part alone, median of 3; the rest: encoder, decoder, "
              "search and joining, the median run less the parts):", "",
              "| part | ours s | faster-whisper s |", "|---|---:|---:|"]
    split = report["parts"]
    rest = {n: medians[f"{n} {precision}"] - p["vad_s"] - p["features_s"] for n, p in split.items()}
    for key, title in (("vad_s", "VAD over the recording"), ("features_s", "features of the chunks")):
        lines.append(f"| {title} | {split['ours'][key]:.2f} | {split['faster-whisper'][key]:.2f} |")
    lines.append(f"| the rest | {rest['ours']:.2f} | {rest['faster-whisper']:.2f} |")
    if report.get("profile"):
        lines += ["", f"cProfile of one `ours {precision}` run, top 15 by own time:", "```",
                  report["profile"].strip(), "```"]
    return "\n".join(lines)


def errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word errors, reference words) of `hypothesis`, both normalized as `wer` does."""
    import jiwer

    w = jiwer.process_words(normalized(reference), normalized(hypothesis) or "<empty>")
    return w.substitutions + w.deletions + w.insertions, w.hits + w.substitutions + w.deletions


def bootstrap_interval(side: np.ndarray, ours: np.ndarray) -> list[float]:
    """95 % interval of WER(side) - WER(ours), recordings resampled with replacement; rows (errors, words)."""
    rng = np.random.default_rng(12345)
    idx = rng.choice(len(ours), size=(BOOTSTRAP, len(ours)), replace=True)
    wer_of = lambda s: s[idx, 0].sum(-1) / s[idx, 1].sum(-1)  # noqa: E731
    return [float(q) for q in np.percentile(wer_of(side) - wer_of(ours), [2.5, 97.5])]


def wer_only(sides: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each side once over each seed's recording, untimed: errors per seed, WER over all, the paired interval."""
    counts: dict[str, list[tuple[int, int]]] = {name: [] for name in sides}
    for seed in args.seeds:
        samples, reference = recording(args.fixture, args.seconds, seed, args.work)
        for name, side in sides.items():
            counts[name].append(errors(reference, side(samples)))
        print(f"seed {seed}: " + ", ".join(f"{n} {c[-1][0]}" for n, c in counts.items()), file=sys.stderr, flush=True)
    rows = []
    for name, per_seed in counts.items():
        stats, base = np.array(per_seed, np.float64), np.array(counts["ours " + name.rsplit(" ", 1)[1]], np.float64)
        rows.append({"side": name, "errors": [e for e, _ in per_seed], "words": int(stats[:, 1].sum()),
                     "wer": float(stats[:, 0].sum() / stats[:, 1].sum()),
                     "minus_ours_95": bootstrap_interval(stats, base)})
    return {"seeds": args.seeds, "rows": rows}


def wer_markdown(report: dict[str, Any]) -> str:
    lines = [f"seeds {report['seeds'][0]}-{report['seeds'][-1]}, {report['rows'][0]['words']} words", "",
             "| side | errors per seed | errors | WER | WER - ours' (95 %, by recording) |", "|---|---|---:|---:|---|"]
    lines += [f"| {r['side']} | {' '.join(map(str, r['errors']))} | {sum(r['errors'])} | {r['wer']:.4f} | "
              f"[{r['minus_ours_95'][0]:+.4f}, {r['minus_ours_95'][1]:+.4f}] |" for r in report["rows"]]
    return "\n".join(lines)


def seed_range(text: str) -> list[int]:
    """"0-9" or "3" or "0,2,5" -> the seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixture", type=Path, default=fixtures.WHISPER_DIGITS, help="the trained Whisper folder")
    p.add_argument("--seconds", type=float, default=600.0, help="length of the recording")
    p.add_argument("--seed", type=int, default=0, help="the recording's digits, voices and pauses")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (after one warm-up run of each side)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of ours, cpu_threads of faster-whisper")
    p.add_argument("--batch-size", type=int, default=8, help="chunks decoded together, on both")
    p.add_argument("--precisions", default="float32", help="float32 and/or int8, comma-separated")
    p.add_argument("--wer-only", action="store_true", help="untimed: WER over the recordings of --seeds")
    p.add_argument("--seeds", type=seed_range, default=[0], help="--wer-only's recordings: 0-9, 0,3,5")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile of ours")
    p.add_argument("--work", type=Path, default=Path("/tmp/speech-batched"), help="exports, conversions, recording")
    p.add_argument("--json", type=Path, help="write the report here")
    return p.parse_args()


def timed_report(sides: dict[str, Any], args: argparse.Namespace, window_s: float) -> tuple[dict[str, Any], str]:
    """The timed run on --seed's recording: the table, the parts and (unless --no-profile) ours' profile."""
    samples, reference = recording(args.fixture, args.seconds, args.seed, args.work)
    print(f"recording: {len(samples) / RATE:.1f} s, {len(reference.split())} words", file=sys.stderr, flush=True)
    load_before = harness.machine_info()["load"]
    rows = measure(sides, samples, reference, args.rounds, window_s)
    report = {"machine": {**harness.machine_info(args.threads), **versions(None)}, "words": len(reference.split()),
              "load_before": load_before, "rows": rows,
              "parts": parts(sides, samples, window_s, args.precisions.split(",")[0])}
    if not args.no_profile:
        report["profile"] = profiled(sides[f"ours {args.precisions.split(',')[0]}"], samples)
    return report, markdown({**report, "settings": vars(args)})


def speech_batched_main() -> None:
    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    preprocessor = json.loads((args.fixture / "preprocessor_config.json").read_text())
    window_s = float(preprocessor["chunk_length"])
    sides: dict[str, Any] = {}
    for precision in args.precisions.split(","):
        sides |= open_sides(args.fixture, precision, args, window_s)
    if args.wer_only:
        report = wer_only(sides, args)
        text = wer_markdown(report)
    else:
        report, text = timed_report(sides, args, window_s)
    tool = "tfm-export `benchmarks speech-batched" + (" --wer-only`" if args.wer_only else "`")
    report = {"tool": tool, "settings": {**vars(args), "fixture": str(args.fixture), "work": str(args.work),
              "json": str(args.json)}, **report}
    print(text)
    if args.json:
        harness.write_text(args.json, json.dumps(report, indent=2) + "\n")
