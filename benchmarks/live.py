"""Live transcription (#61): latency from a word's end to its confirmed text, and each session's real-time factor,
at 1, 4 and 8 concurrent sessions of the Realtime WebSocket server on this CPU.

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

The sides (1, 4, 8 sessions) take turns, round by round (tfm_export.bench.harness.interleave).
whisper_streaming's published figure, for comparison: 3.3 s average latency (large-v2 on an NVIDIA A40, English
ESIC, --min-chunk-size 1 s; Macháček et al. 2023, Table 3); a model 4000 times smaller on a CPU is not that one.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tfm_export.bench import fixtures
from benchmarks.speech_served import served_exported
from tfm_export.bench.serving import free_port
from tfm_export.bench import harness

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "models" / "whisper-digits"
CLIENT_RATE = 24000
CHUNK_S = 0.1
PAUSE_S = 0.6
PUBLISHED_S = 3.3  # whisper_streaming, large-v2 on an A40 (Table 3)


def speech():
    return fixtures.whisper_digits_speech()  # models/whisper-digits/speech.py


def exported(work: Path) -> Path:
    """The fixture exported once into `work`, with its static decoder for all 64 target positions (in flight)."""
    return served_exported(FIXTURE, work / "digits-onnx", slots=64)


def recordings(model: Any, sessions: int, utterances: int) -> list[dict[str, Any]]:
    """Per session: its 24 kHz PCM16 bytes, the words said and where each ends (seconds from the start)."""
    import soxr

    spoken = speech()
    rows = [spoken.Spoken.from_row(r) for r in (FIXTURE / "heldout.tsv").read_text().splitlines()]
    english = [s for s in rows if s.language == "en"]
    out = []
    for n in range(sessions):
        parts, said, ends, at = [np.zeros(int(0.25 * spoken.RATE), np.float32)], [], [], 0.25
        for s in english[(n * utterances) % len(english):][:utterances]:
            samples = s.samples()
            timed = model.transcribe(samples, language="en", word_timestamps=True)["words"]
            said += [w["word"].strip() for w in timed]
            ends += [at + w["end"] for w in timed]
            parts += [samples, np.zeros(int(PAUSE_S * spoken.RATE), np.float32)]
            at += (len(samples) + int(PAUSE_S * spoken.RATE)) / spoken.RATE
        audio = soxr.resample(np.concatenate(parts), spoken.RATE, CLIENT_RATE)
        pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
        out.append({"pcm": pcm, "words": said, "ends": ends, "seconds": at})
    return out


class Busy:
    """The seconds each live stream's steps took on the server (StreamTranscriber.step / finish, timed)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_stream: dict[int, tuple[float, float]] = {}  # id -> (seconds busy, seconds of audio)

    def install(self, realtime_session: Any) -> None:
        base, busy = realtime_session.StreamTranscriber, self

        class Timed(base):
            def step(self):
                return busy.timed(self, super().step)

            def finish(self):
                return busy.timed(self, super().finish)

        realtime_session.StreamTranscriber = Timed

    def timed(self, stream: Any, fn: Any) -> Any:
        return harness.summing(fn, lambda seconds: self.spent(stream, seconds))()

    def spent(self, stream: Any, seconds: float) -> None:
        """`stream` took `seconds` more, and has that much audio now."""
        with self.lock:
            spent = self.by_stream.get(id(stream), (0.0, 0.0))[0] + seconds
            self.by_stream[id(stream)] = (spent, stream.offset + stream.buffered)

    def take(self) -> list[float]:
        """Each stream's real-time factor since the last take."""
        with self.lock:
            values, self.by_stream = list(self.by_stream.values()), {}
        return [spent / audio for spent, audio in values if audio]


def session(url: str, rec: dict[str, Any]) -> dict[str, Any]:
    """One client: the recording sent in real time; each confirmed word's latency."""
    from websockets.sync.client import connect

    events: list[tuple[float, dict]] = []
    with connect(url + "/v1/realtime?intent=transcription", max_size=None) as ws:
        json.loads(ws.recv())  # session.created
        ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": CLIENT_RATE}, "turn_detection": None}}}}))
        done = threading.Event()

        def read():
            for message in ws:
                event = json.loads(message)
                events.append((time.monotonic(), event))
                if event["type"] in ("conversation.item.input_audio_transcription.completed", "error"):
                    done.set()
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        pcm, step = rec["pcm"], int(2 * CLIENT_RATE * CHUNK_S)
        start = time.monotonic()
        for k, at in enumerate(range(0, len(pcm), step)):
            time.sleep(max(0.0, start + (k + 1) * CHUNK_S - time.monotonic()))  # its 100 ms have passed
            ws.send(json.dumps({"type": "input_audio_buffer.append",
                                "audio": base64.b64encode(pcm[at:at + step]).decode()}))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        if not done.wait(600):
            raise SystemExit("a session got no transcript within 600 s")
    return latencies(events, start, rec)


def latencies(events: list[tuple[float, dict]], start: float, rec: dict[str, Any]) -> dict[str, Any]:
    errors = [e for _, e in events if e["type"] == "error"]
    if errors:
        raise SystemExit(f"the server sent an error: {errors[0]}")
    confirmed: list[tuple[str, float]] = []  # each confirmed word and when it arrived
    for at, event in events:
        if event["type"].endswith(".delta"):
            confirmed += [(w, at) for w in event["delta"].split()]
    transcript = [e for _, e in events if e["type"].endswith(".completed")][0]["transcript"].split()
    final_at = [at for at, e in events if e["type"].endswith(".completed")][0]
    confirmed += [(w, final_at) for w in transcript[len(confirmed):]]  # finish()'s delta came before completed
    said, got = rec["words"], [w for w, _ in confirmed]
    matcher = difflib.SequenceMatcher(a=said, b=got, autojunk=False)
    late = [confirmed[j][1] - (start + rec["ends"][i]) for block in matcher.get_matching_blocks()
            for i, j in zip(range(block.a, block.a + block.size), range(block.b, block.b + block.size))]
    edits = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")
    return {"latency": late, "errors": edits, "words": len(said), "seconds": rec["seconds"]}


def run_sessions(url: str, recs: list[dict[str, Any]], busy: Busy) -> dict[str, Any]:
    busy.take()
    with ThreadPoolExecutor(len(recs)) as pool:
        results = list(pool.map(lambda r: session(url, r), recs))
    return {"latency": [x for r in results for x in r["latency"]], "rtf": busy.take(),
            "errors": sum(r["errors"] for r in results), "words": sum(r["words"] for r in results)}


def serve(export: Path, threads: int, step: float):
    """The server's app in this process (uvicorn in a thread: its live sessions' steps timed by a Busy)."""
    import uvicorn

    from tfm_export.runtime.speech.streaming import StreamOptions
    from tfm_export.serve import realtime_session
    from tfm_export.serve.app import create_app
    from tfm_export.serve.engine import ServeSettings, open_engine

    realtime_session.STREAM_OPTIONS = StreamOptions(step_seconds=step, prompt_chars=0)  # never trained with prompts
    busy = Busy()
    busy.install(realtime_session)
    settings = ServeSettings(folder=str(export), threads=threads)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, open_engine(settings)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"ws://127.0.0.1:{port}", busy


def markdown(report: harness.Report) -> str:
    cols = [harness.Column("sessions"), harness.Column("latency_median_s", "word end -> confirmed, median s", "{:.2f}"),
            harness.Column("latency_p90_s", "p90 s", "{:.2f}"), harness.Column("rtf_median", "RTF/session, median",
                                                                                "{:.3f}"),
            harness.Column("rtf_max", "RTF/session, max", "{:.3f}"), harness.Column("wer", "WER", "{:.1%}"),
            harness.Column("words", "words")]
    return (harness.markdown_table(report.rows, cols) + f"\n\n{report.machine_line()}\n"
            f"whisper_streaming (large-v2, A40 GPU): {PUBLISHED_S} s average latency\n")


def live_speech_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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

    export = exported(args.work)
    counts = [int(n) for n in args.sessions.split(",")]
    recs = recordings(open_export(export, device="cpu"), max(counts), args.utterances)
    server, url, busy = serve(export, args.threads, args.step)
    try:
        run_sessions(url, recs[:1], busy)  # warm-up
        sides = {str(n): (lambda n=n: run_sessions(url, recs[:n], busy)) for n in counts}
        samples = harness.interleave(sides, harness.Plan(rounds=args.rounds, warmup=0),
                                     progress=lambda line: print(line, file=sys.stderr))
    finally:
        server.should_exit = True
    report = harness.Report("live-speech", {k: str(v) for k, v in vars(args).items()})
    for n in counts:
        latency = [x for run in samples[str(n)] for x in run["latency"]]
        rtf = [x for run in samples[str(n)] for x in run["rtf"]]
        words = sum(run["words"] for run in samples[str(n)])
        report.rows.append({"sessions": n, "latency_median_s": harness.median(latency),
                            "latency_p90_s": harness.quantile(latency, 0.9), "latency_n": len(latency),
                            "rtf_median": harness.median(rtf), "rtf_max": max(rtf, default=float("nan")),
                            "wer": sum(run["errors"] for run in samples[str(n)]) / max(1, words), "words": words,
                            "audio_s_per_session": recs[0]["seconds"]})
    if args.json:
        report.write(args.json)
    print(markdown(report))
    print(json.dumps(report.as_dict()))
