"""The speech served by `tfm-export serve`, one scenario each: `served-speech` (in-flight windows against one
recording at a time and faster-whisper batched, over HTTP) and `live-speech` (the Realtime WebSocket's word latency
and real-time factor at 1, 4 and 8 sessions). The measures are tfm_export.bench.served_speech's and live_speech's."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from tfm_export.bench import harness, live_speech
from tfm_export.bench.served_speech import (
    FasterBatched, folder_of, profile, recordings, rounds, served_exported, server)
from tfm_export.bench.whisper import converted

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



def served_speech_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=SERVED_SPEECH_DOC.split("\n\n")[0])
    parser.add_argument("--layout", default="base", help="the random folder's published layout (base, tiny, smoke)")
    parser.add_argument("--recordings", type=int, default=16, help="recordings of 10 to 30 s each")
    parser.add_argument("--clients", type=int, default=16, help="HTTP clients posting them at once")
    parser.add_argument("--max-batch", type=int, default=8, help="rows of the in-flight batch, faster-whisper's batch")
    parser.add_argument("--max-length", type=int, default=128, help="the folder's generation max_length")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every mode (order rotated)")
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime / CTranslate2 threads")
    parser.add_argument("--modes", default="inflight,single,faster-whisper-batched", help="comma-separated")
    parser.add_argument("--work", type=Path, default=Path("/tmp/served-speech"), help="folders, exports, recordings")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    return parser.parse_args()


def served_speech_main() -> None:
    args = served_speech_args()
    args.work.mkdir(parents=True, exist_ok=True)
    folder = folder_of(args.layout, args.max_length, args.work)
    export = served_exported(folder, args.work / f"{args.layout}-len{args.max_length}-s448-onnx")
    recs = recordings(args.recordings, args.work)
    audio_s = sum(seconds for _, seconds in recs)
    modes = args.modes.split(",")
    faster = None
    if "faster-whisper-batched" in modes:
        ct2 = converted(folder, args.work / f"{args.layout}-len{args.max_length}-ct2", None)
        faster = FasterBatched(ct2, args.threads, args.max_batch, args.max_length)
    servers = {"inflight": ("--max-batch", str(args.max_batch)),
               "single": ("--batching", "single", "--audio-workers", "1")}
    with contextlib.ExitStack() as stack:
        urls = {mode: stack.enter_context(server(export, args.threads, *servers[mode]))
                for mode in modes if mode in servers}
        times, texts = rounds(modes, urls, faster, recs, args.clients, args.repeat)
    if "inflight" in texts and "single" in texts and texts["inflight"] != texts["single"]:
        raise SystemExit("the in-flight answers differ from one at a time")
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


LIVE_SPEECH_DOC = r"""Live transcription (#61): latency from a word's end to its confirmed text, and each session's
real-time factor, at 1, 4 and 8 concurrent sessions of the Realtime WebSocket server on this CPU.

    .venv/bin/python -m benchmarks live-speech [--sessions 1,4,8] [--rounds 2] [--utterances 6] [--threads 2]
        [--step 1.0] [--work /tmp/live-speech] [--json OUT.json]

The model is the trained Whisper fixture (models/whisper-digits: 4 s windows, word timestamps from its alignment
heads), the only model here that hears real speech; the speech is espeak-ng's held-out digit strings, each session
its own `--utterances` of them 0.6 s apart (English). `tfm-export serve`'s app runs in this process (uvicorn in a
thread, as the tests serve it; in-flight windows: the sessions' steps share decoder rows) and each session is a
plain WebSocket client following OpenAI's Realtime schema: base64 PCM16 at 24 kHz in 100 ms appends, each sent
when its 100 ms have passed (as a microphone delivers them), `turn_detection` null and one commit at the end.

- **word latency**: for each word said, the wall time its confirmed text (the `delta` that carries it, or the
  `completed` event for the words finish() confirms) arrived, less the wall time the audio of the word's end was
  spoken (the stream's start + the word's end). Word ends are the model's word timestamps (alignment.onnx) of each
  utterance transcribed alone, plus the utterance's place in the recording. Words matched to the transcript by
  difflib (a word misheard has no latency; the word error rate is reported).
- **real-time factor per session**: the seconds its steps took on the server's workers (StreamTranscriber.step and
  finish, timed on the server, waits for the shared window batch included) per second of its audio. Above 1 a
  session falls behind.

The sides (1, 4, 8 sessions) take turns, round by round (tfm_export.bench.harness.interleave); the
clients, the server and the latencies are tfm_export.bench.live_speech's.
whisper_streaming's published figure, for comparison: 3.3 s average latency (large-v2 on an NVIDIA A40, English
ESIC, --min-chunk-size 1 s; Macháček et al. 2023, Table 3); a model 4000 times smaller on a CPU is not that one.
"""

PUBLISHED_S = 3.3  # whisper_streaming, large-v2 on an A40 (Table 3)


def live_markdown(report: harness.Report) -> str:
    cols = [harness.Column("sessions"), harness.Column("latency_median_s", "word end -> confirmed, median s", "{:.2f}"),
            harness.Column("latency_p90_s", "p90 s", "{:.2f}"),
            harness.Column("rtf_median", "RTF/session, median", "{:.3f}"),
            harness.Column("rtf_max", "RTF/session, max", "{:.3f}"), harness.Column("wer", "WER", "{:.1%}"),
            harness.Column("words", "words")]
    return (harness.markdown_table(report.rows, cols) + f"\n\n{report.machine_line()}\n"
            f"whisper_streaming (large-v2, A40 GPU): {PUBLISHED_S} s average latency\n")


def live_speech_main() -> None:
    parser = argparse.ArgumentParser(description=LIVE_SPEECH_DOC.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,4,8", help="concurrent session counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (each side once a round)")
    parser.add_argument("--utterances", type=int, default=6, help="held-out utterances per session's recording")
    parser.add_argument("--threads", type=int, default=2, help="the server's ORT intra-op threads")
    parser.add_argument("--step", type=float, default=1.0, help="StreamOptions.step_seconds (new audio a step)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/live-speech"), help="the export's cache folder")
    parser.add_argument("--json", type=Path, default=None, help="write the harness report here")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    from tfm_export.runtime import open_export

    export = live_speech.exported(args.work)
    counts = [int(n) for n in args.sessions.split(",")]
    recs = live_speech.recordings(open_export(export, device="cpu"), max(counts), args.utterances)
    live, url, busy = live_speech.serve(export, args.threads, args.step)
    try:
        live_speech.run_sessions(url, recs[:1], busy)  # warm-up
        sides = {str(n): (lambda n=n: live_speech.run_sessions(url, recs[:n], busy)) for n in counts}
        samples = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=0),
                                     progress=lambda line: print(line, file=sys.stderr))
    finally:
        live.should_exit = True
    report = harness.Report("live-speech", {k: str(v) for k, v in vars(args).items()})
    report.rows += [live_speech.row(n, samples[str(n)], recs[0]["seconds"]) for n in counts]
    if args.json:
        report.write(args.json)
    print(live_markdown(report))
    print(json.dumps(report.as_dict()))
