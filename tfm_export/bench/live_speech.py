"""What `live-speech` measures (benchmarks/speech_served.py): sessions of the Realtime WebSocket server in this
process, each a plain client sending its recording in real time; per word, the latency from its end to its
confirmed text, and per session the seconds its steps took on the server per second of its audio.

The recordings are the whisper-digits fixture's held-out English utterances (espeak-ng's speech, read through
fixtures), their word ends the model's own word timestamps of each utterance transcribed alone.
"""

from __future__ import annotations

import base64
import difflib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TfmExportError
from . import fixtures, harness
from .served_speech import served_exported
from .serving import free_port

FIXTURE = fixtures.WHISPER_DIGITS
CLIENT_RATE = 24000
CHUNK_S = 0.1
PAUSE_S = 0.6
DONE = ("conversation.item.input_audio_transcription.completed", "error")


def exported(work: Path) -> Path:
    """The fixture exported once into `work`, with its static decoder for all 64 target positions (in flight)."""
    return served_exported(FIXTURE, work / "digits-onnx", slots=64)


def recordings(model: Any, sessions: int, utterances: int) -> list[dict[str, Any]]:
    """Per session: its 24 kHz PCM16 bytes, the words said and where each ends (seconds from the start)."""
    import soxr

    spoken = fixtures.whisper_digits_speech()
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


def _send_in_real_time(ws: Any, pcm: bytes) -> float:
    """The recording in 100 ms appends, each sent when its 100 ms have passed (as a microphone delivers them), then
    one commit; the monotonic time it started."""
    step, start = int(2 * CLIENT_RATE * CHUNK_S), time.monotonic()
    for k, at in enumerate(range(0, len(pcm), step)):
        time.sleep(max(0.0, start + (k + 1) * CHUNK_S - time.monotonic()))
        chunk = base64.b64encode(pcm[at:at + step]).decode()
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
    ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    return start


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
                if event["type"] in DONE:
                    done.set()
                    return

        threading.Thread(target=read, daemon=True).start()
        start = _send_in_real_time(ws, rec["pcm"])
        if not done.wait(600):
            raise TfmExportError("a live session got no transcript within 600 s")
    return latencies(events, start, rec)


def latencies(events: list[tuple[float, dict]], start: float, rec: dict[str, Any]) -> dict[str, Any]:
    """Each said word's latency (its confirmed text's arrival less its end's), matched to the transcript by
    difflib; the word edits (errors) against what was said."""
    errors = [e for _, e in events if e["type"] == "error"]
    if errors:
        raise TfmExportError(f"the server sent an error: {errors[0]}")
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
    """The recordings' sessions at once: every word's latency, every session's real-time factor, the errors."""
    busy.take()
    with ThreadPoolExecutor(len(recs)) as pool:
        results = list(pool.map(lambda r: session(url, r), recs))
    return {"latency": [x for r in results for x in r["latency"]], "rtf": busy.take(),
            "errors": sum(r["errors"] for r in results), "words": sum(r["words"] for r in results)}


def serve(export: Path, threads: int, step: float) -> tuple[Any, str, Busy]:
    """The server's app in this process (uvicorn in a thread: its live sessions' steps timed by a Busy)."""
    import uvicorn

    from ..runtime.speech.streaming import StreamOptions
    from ..serve import realtime_session
    from ..serve.app import create_app
    from ..serve.engine import ServeSettings, open_engine

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


def row(sessions: int, runs: list[dict[str, Any]], audio_s: float) -> dict[str, Any]:
    """A report row of `sessions` concurrent sessions over the rounds' runs."""
    latency = [x for run in runs for x in run["latency"]]
    rtf = [x for run in runs for x in run["rtf"]]
    words = sum(run["words"] for run in runs)
    return {"sessions": sessions, "latency_median_s": harness.median(latency),
            "latency_p90_s": harness.quantile(latency, 0.9), "latency_n": len(latency),
            "rtf_median": harness.median(rtf), "rtf_max": max(rtf, default=float("nan")),
            "wer": sum(run["errors"] for run in runs) / max(1, words), "words": words, "audio_s_per_session": audio_s}
