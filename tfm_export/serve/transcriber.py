"""Whole transcriptions off the event loop: a bounded pool of worker threads beside the decode engine.

A recording is transcribed window by window, each window's start depending on the last one's timestamps
(runtime.speech.longform), so a recording runs on a worker thread here from start to end
(runtime.speech.whisper.transcribe), `workers` recordings at once, `max_queue` more waiting; beyond that a 429
(QueueFull). Its windows are decoded by the server's in-flight window batch when the export has its
static-cache decoder (serve.windows: the windows of all running recordings share each decoder step),
else each alone on the worker (the growing cache's calls share nothing). Each window's text can be handed
to the event loop as it is decoded (streaming). Torch-free; no web framework here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from .jobs import Cancelled, Closed, QueueFull

log = logging.getLogger(__name__)

CHUNK_BATCH = 8  # a recording's VAD chunks (chunking_strategy) transcribed together, as faster-whisper's batch

__all__ = ["Cancelled", "Done", "Recording", "Transcriber"]


@dataclass(frozen=True)
class Recording:
    """One recording to transcribe: runtime.speech.whisper.transcribe's arguments."""

    path: str  # the spooled upload
    name: str  # what errors call it (the client's file name, not the spool's)
    language: str | None
    task: str
    timestamps: bool
    prompt: str | None
    word_timestamps: bool = False  # timestamp_granularities[]=word
    vad: Any = None  # runtime.speech.vad.VadParameters: only the speech (chunking_strategy); None: all of it
    temperature: float | None = 0.0  # OpenAI's (fallback.openai_fallback; 0, its default: the fallback); None: greedy
    logprobs: bool = False  # include[]=logprobs: the text tokens' log-probabilities
    seed: int = 0  # the sampled tries' (transcribe's seed; the form's, this server's field)


@dataclass
class Done:
    """A finished transcription: transcribe's result, the audio's length and the time it took."""

    result: dict[str, Any]
    seconds: float  # of audio
    elapsed: float  # wall time on the worker, reading the file included


class Transcriber:
    """The worker pool of one server; `close` finishes what was admitted."""

    def __init__(self, model: Any, workers: int, max_queue: int, max_seconds: float, windows: Any = None):
        """`windows`: the server's serve.windows.WindowBatcher (None: each window decodes on its worker)."""
        self.model, self.workers, self.max_queue, self.max_seconds = model, workers, max_queue, max_seconds
        self.windows = windows
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="tfm-export-audio")
        self._lock = threading.Lock()
        self.admitted = 0  # recordings waiting or being transcribed
        self._accepting = True

    def _admit(self) -> None:
        with self._lock:
            if not self._accepting:
                raise Closed("the server is shutting down; send the request to another replica")
            if self.admitted >= self.workers + self.max_queue:
                raise QueueFull(f"{self.admitted} recordings are being transcribed or waiting ({{max_queue}} = "
                                f"{self.max_queue} waiting); retry later", options={"max_queue": None})
            self.admitted += 1

    def _leave(self, _: Any = None) -> None:
        with self._lock:
            self.admitted -= 1

    def submit(self, request: Recording, on_text: Callable[[str], None] | None = None,
               cancelled: Callable[[], bool] = lambda: False) -> "asyncio.Future[Done]":
        """The transcription, queued: QueueFull (429) or Closed (503) when it is refused; the future's
        exception is the library's error for a recording it cannot transcribe. `on_text(text so far)` runs
        on the worker after each window; `cancelled()` True stops it there (Cancelled)."""
        self._admit()
        try:
            future = self._pool.submit(self._run, request, on_text, cancelled)
        except RuntimeError:  # the pool shut down between the check and now
            self._leave()
            raise Closed("the server is shutting down; send the request to another replica") from None
        future.add_done_callback(self._leave)
        return asyncio.wrap_future(future)

    def submit_call(self, work: Callable[[], Any]) -> "asyncio.Future[Any]":
        """Other transcription work on the same workers, admitted like a recording (serve.realtime: one step of a
        live stream, which re-transcribes its buffer through the same window batch)."""
        self._admit()
        try:
            future = self._pool.submit(work)
        except RuntimeError:
            self._leave()
            raise Closed("the server is shutting down; send the request to another replica") from None
        future.add_done_callback(self._leave)
        return asyncio.wrap_future(future)

    def _run(self, request: Recording, on_text: Callable[[str], None] | None, cancelled: Callable[[], bool]) -> Done:
        from ..audio import load_audio
        from ..runtime.speech.fallback import openai_fallback
        from ..runtime.speech.whisper import speech_settings

        if cancelled():  # gone while it waited for a worker
            raise Cancelled("the client went away")
        started = time.perf_counter()
        settings, features = speech_settings(self.model)
        samples = load_audio(request.path, features.sampling_rate, max_seconds=self.max_seconds, name=request.name)

        def each_window(text: str) -> None:
            if cancelled():
                raise Cancelled("the client went away")
            if on_text is not None:
                on_text(text)

        runner = None if self.windows is None else self.windows.runner(cancelled)
        decoding = {} if request.temperature is None else openai_fallback(settings, request.temperature)
        result = self.model.transcribe(samples, language=request.language, task=request.task,
                                       timestamps=request.timestamps, prompt=request.prompt, max_seconds=None,
                                       on_text=each_window, runner=runner, word_timestamps=request.word_timestamps,
                                       vad=request.vad is not None, vad_parameters=request.vad,
                                       batch_size=CHUNK_BATCH if request.vad is not None else 1,
                                       logprobs=request.logprobs, seed=request.seed, **decoding)
        seconds = len(samples) / features.sampling_rate
        elapsed = time.perf_counter() - started
        log.debug("transcribed %.1f s of audio in %.2f s", seconds, elapsed)
        return Done(result, seconds, elapsed)

    def close(self) -> None:
        """Refuse new recordings, finish the admitted ones."""
        with self._lock:
            self._accepting = False
        self._pool.shutdown(wait=True)
