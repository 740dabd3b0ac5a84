"""benchmarks.speculative's `whisper-digits` case: speculative greedy transcription at batch 1
(runtime.speech.assisted), ms per transcript id with and without it, interleaved, the ids checked equal.

    python -m benchmarks speculative --case whisper-digits [--rounds 5] [--threads 2]

The trained Whisper fixture (models/whisper-digits: d_model 128, 2 + 2 layers) transcribes long held-out English
recordings (espeak-ng, benchmarks.speech.inputs.long_recording; the language given, timestamps on), drafted by
its draft (models/whisper-digits/draft: 2 + 1 layers, the same tokenizer; its encoder runs once per window) and
by prompt lookup. The time is the whole `transcribe` (features, encoders and decoders), what a caller waits for;
the call-cost table gives the model's decoder step and the draft's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks import fixtures
from benchmarks.speculative import LOOKUP, SCHEDULE_ONLY, Rows, _call_costs, _Policy, _rows, _trained
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.decode import speculative

SECONDS, RECORDINGS = 20.0, 3  # three recordings of 20 s (five 4-s windows or more each)


class _Counted:
    """While in force, every speculative decode's Speculation (one per window transcribed) joins `seen`."""

    def __init__(self, seen: list[speculative.Speculation]):
        self.seen = seen

    def __enter__(self) -> None:
        self.real = real = speculative.speculate

        def speculate(*args: Any, **kwargs: Any) -> list[int]:
            kwargs["stats"] = kwargs.get("stats") or speculative.Speculation()
            self.seen.append(kwargs["stats"])
            return real(*args, **kwargs)

        speculative.speculate = speculate

    def __exit__(self, *exc: Any) -> None:
        speculative.speculate = self.real


def _pauses(model: Any) -> int:
    return sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values())


def _transcribed(model: Any, recordings: list[np.ndarray], schedule_only: bool = False,
                 **options: Any) -> Callable[[], dict[str, Any]]:
    """benchmarks.speculative._side for transcription: one run transcribes every recording; ms per id of the
    transcripts (timestamps included, the windows' EOS not); decoder calls, drafts and acceptance summed over
    the speculative windows (plain greedy's calls are not counted: None)."""

    def run() -> dict[str, Any]:
        seen: list[speculative.Speculation] = []
        pauses = _pauses(model)
        with _Policy(SCHEDULE_ONLY if schedule_only else None), _Counted(seen):
            start = time.perf_counter()
            ids = [model.transcribe(r, language="en", timestamps=True, **options)["ids"] for r in recordings]
            seconds = time.perf_counter() - start
        tokens = sum(map(len, ids))
        return {"ms": 1000 * seconds / tokens, "ids": ids, "calls": sum(s.calls for s in seen) or None,
                "tokens": tokens, "drafted": sum(s.drafted for s in seen),
                "accepted": sum(s.accepted for s in seen), "pauses": _pauses(model) - pauses}

    return run


def whisper_digits(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The case: plain greedy, the draft and prompt lookup (each with the shipped policy and with the schedule
    alone, on a second opening), and the call costs of the model's decoder and of the draft's."""
    from benchmarks.speech.inputs import long_recording

    folder = _trained("whisper-digits", tmp, fixtures.WHISPER_DIGITS)
    model, again = open_export(folder, args.device, options), open_export(folder, args.device, options)
    draft = open_export(_trained("whisper-digits-draft", tmp, fixtures.WHISPER_DIGITS / "draft"), args.device,
                        options)
    recordings = [long_recording(fixtures.WHISPER_DIGITS, SECONDS, seed, tmp)[0] for seed in range(RECORDINGS)]
    window = np.zeros((model.config.n_mels, 400), np.float32)  # one 4-s window of features
    costs = [*_call_costs("whisper-digits", model, window, args.rounds),
             *_call_costs("whisper-digits draft", draft, window, args.rounds)]
    sides = {"plain": _transcribed(model, recordings)}
    for name, proposer in {"draft (2 + 1 layers)": {"assistant": draft},
                           f"prompt lookup {LOOKUP}": {"prompt_lookup_num_tokens": LOOKUP}}.items():
        sides[name] = _transcribed(model, recordings, **proposer)
        sides[f"{name}, schedule only"] = _transcribed(again, recordings, schedule_only=True, **proposer)
    rows = _rows("whisper-digits", sides, args.rounds)
    assert all(r["same_ids"] for r in rows), "speculation changed the transcripts' ids"
    return rows, costs
