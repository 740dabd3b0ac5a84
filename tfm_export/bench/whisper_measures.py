"""whisper-speed's measures and its report's Markdown: the long-form real-time factor of every backend (and the
share of it the encoder and the features take in ours), and the decoder's ms per step at a batch; the backends take
turns in the harness's rotation, each after a rest."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np

from ..errors import TfmExportError
from . import harness
from .whisper import RATE, Folder, Ours, normalized, own_time, wer

log = logging.getLogger(__name__)
N_SHORT = 4  # new tokens of the short decode of the step measure
WARMUP_SECONDS = 8.0
PAUSE = 0.3  # seconds of rest before each timed backend: the last one's spinning threads (OpenMP, ORT) go idle


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
            seconds = harness.timed(lambda: texts.__setitem__(name, backend.transcribe(samples, "en")))
            times[name].append(own_time(backend, seconds))
            if isinstance(backend, Ours):
                encoder[name].append((backend.encoder_s, backend.encoder_calls))
            log.info("  repeat %d: %s %.2f s", r + 1, name, times[name][-1])
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
    from ..audio.features import log_mel_spectrogram
    from ..runtime.speech.whisper import speech_settings

    ours = next((b for b in backends.values() if isinstance(b, Ours)), None)
    if ours is None:
        return None
    config = speech_settings(ours.model)[1]
    return harness.median(harness.timed(lambda: log_mel_spectrogram(samples, config)) for _ in range(repeats))


def step_ms(backend: Any, features: np.ndarray, n_long: int, min_seconds: float) -> float:
    """(t(n_long) - t(N_SHORT)) / (n_long - N_SHORT) in ms, over as many (short, long) pairs as fill
    `min_seconds` (at least one); t as own_time gives it."""
    short = long = elapsed = 0.0
    pairs = 0
    while pairs == 0 or elapsed < min_seconds:
        short_s = harness.timed(lambda: backend.steps(features, N_SHORT))
        short += own_time(backend, short_s)
        long_s = harness.timed(lambda: backend.steps(features, n_long))
        long, pairs = long + own_time(backend, long_s), pairs + 1
        elapsed += short_s + long_s
    return (long - short) / pairs / (n_long - N_SHORT) * 1000


def measure_steps(backends: dict[str, Any], features: np.ndarray, n_long: int, repeats: int,
                  model: str, min_seconds: float) -> list[dict]:
    """ms per decoding step at this batch (step_ms), each repeat running every backend in turn."""
    for name, backend in backends.items():  # warm-up, and the lengths checked
        for n in (N_SHORT, n_long):
            got = backend.steps(features, n)
            if got != n:
                raise TfmExportError(f"{name} generated {got} tokens, not {n}, on {model}")
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
    from ..audio.features import FeatureConfig, log_mel_spectrogram

    config = FeatureConfig.from_preprocessor_config(json.loads((folder.path / "preprocessor_config.json").read_text()))
    mel = log_mel_spectrogram(samples, config)
    windows = [mel[:, i:i + folder.window_frames] for i in range(0, mel.shape[1], folder.window_frames)]
    windows = [w for w in windows if w.shape[1] == folder.window_frames] or [np.pad(
        mel, ((0, 0), (0, folder.window_frames - mel.shape[1])))]
    return np.ascontiguousarray(np.stack([windows[i % len(windows)] for i in range(batch)]))


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    """`whisper-speed`'s report as Markdown: the real-time factor table, the step table, the notes."""
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
