"""Prometheus metrics of one server (`GET /metrics`): requests, queue, batch occupancy, tokens, latency,
audio seconds transcribed and the real-time factor.

Each app has its own registry, so several apps in one process (tests, benchmarks) do not collide.
Gauges that the decode thread owns (queue depth, occupancy, tokens) are read at scrape time from the
engine instead of being pushed from the hot loop.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: from a few decoder steps on the tiny model to a long base-model translation under load.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Processing seconds per second of audio: below 1 is faster than real time (a GPU: 0.01; a small CPU: ~1).
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
# The in-flight rows' prompt lookup (serve.batcher.InflightBatcher.speculation_counts): counter -> its help.
SPECULATION_COUNTERS = {
    "drafted": "Ids drafted by prompt lookup in the rows.",
    "accepted": "Drafted ids the model accepted.",
    "declined": "Prompt lookup requests decoded as plain rows because the rows were busy (--speculate-below).",
}


class EngineCollector:
    """Reads the engine's state when Prometheus scrapes; tokens/s over the time since the last scrape."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._last = (time.perf_counter(), 0)  # (time, tokens_total) at the previous scrape

    def collect(self) -> Iterator[Any]:
        engine = self.engine
        now, tokens = time.perf_counter(), engine.tokens_total
        then, before = self._last
        self._last = (now, tokens)
        yield GaugeMetricFamily("tfm_export_queue_depth", "Sources waiting for a batch row.", engine.queue_depth)
        yield GaugeMetricFamily("tfm_export_batch_occupancy", "Rows decoding now / max_batch.",
                                engine.active / engine.config.max_batch)
        yield CounterMetricFamily("tfm_export_tokens", "Tokens generated since start.", tokens)
        yield GaugeMetricFamily("tfm_export_tokens_per_second", "Tokens generated per second since the last scrape.",
                                (tokens - before) / max(now - then, 1e-9))
        counts_of = getattr(engine, "speculation_counts", None)  # in-flight rows (prompt lookup), else none
        counts = counts_of() if counts_of is not None else None
        if counts is not None:
            for key, help_text in SPECULATION_COUNTERS.items():
                yield CounterMetricFamily(f"tfm_export_speculative_{key}", help_text, counts[key])


class ServerMetrics:
    """The registry of one app and the instruments its handlers update."""

    def __init__(self, engine: Any):
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(engine))
        self.requests = Counter("tfm_export_requests", "Translate requests by HTTP status.", ["status"],
                                registry=self.registry)
        self.latency = Histogram("tfm_export_request_seconds", "Time from request to last token.",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.first_token = Histogram("tfm_export_first_token_seconds", "Time from request to first token.",
                                     buckets=LATENCY_BUCKETS, registry=self.registry)
        # speech (serve.audio): what was transcribed, and how fast for its length
        self.audio_seconds = Counter("tfm_export_audio_seconds", "Seconds of audio transcribed.",
                                     registry=self.registry)
        self.real_time_factor = Histogram("tfm_export_real_time_factor", "Seconds taken per second of audio, "
                                          "per recording (reading the file included).", buckets=RTF_BUCKETS,
                                          registry=self.registry)
        # Realtime transcription (serve.realtime): sessions open now, and why each one ended; a client that
        # stops reading (client_not_reading) costs the server nothing once stopped, but an operator wants to know
        self.realtime_sessions = Gauge("tfm_export_realtime_sessions", "Realtime transcription sessions open.",
                                       registry=self.registry)
        self.realtime_ended = Counter("tfm_export_realtime_sessions_ended", "Realtime sessions ended, by why: "
                                      "client_closed, client_not_reading or refused.", ["reason"],
                                      registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
