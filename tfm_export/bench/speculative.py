"""Speculative decoding's measures (`speculative`, `speculative-served`): sides that decode every source at batch 1
with a proposer (prompt lookup, a draft export) under the draft-length policy as it ships or the schedule alone,
the cost of a decoder call over 1 + k positions, rows of median ms/token, acceptance and switch-offs; the same for
transcription (runtime.speech.assisted) and for the in-flight engine's rows (serve.batcher, no HTTP). The cases
(which models, which sources) are benchmarks/speculative.py's.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable

import numpy as np

from ..runtime import GREEDY
from ..runtime.decode import speculative
from ..runtime.decode.draft_length import DraftLength
from ..runtime.decode.loop import DecodeTimings
from ..serve.batcher import Job
from .harness import Column, Plan, interleave, median


POSITIONS = (1, 2, 3, 5, 9, 11)  # the call-cost table: 1 + k positions


class Policy:
    """While in force, new draft-length policies are made by `made` (None: as the library makes them)."""

    def __init__(self, made: Callable[..., DraftLength] | None):
        self.made = made

    def __enter__(self) -> None:
        self.shipped = speculative.DraftLength
        speculative.DraftLength = self.made or self.shipped

    def __exit__(self, *exc: Any) -> None:
        speculative.DraftLength = self.shipped


class FixedLength(DraftLength):
    """transformers' "constant" schedule: `start` ids drafted every step, never switched off."""

    def __init__(self, start: int, cap: int | None = None):
        super().__init__(start, cap, switch_off=False)

    def record(self, drafted: int, accepted: int, emitted: int, seconds: float) -> None:
        pass  # k stays `start`


SCHEDULE_ONLY = functools.partial(DraftLength, switch_off=False)  # the schedule without the switch-off


def decode_side(model: Any, sources: list[list[int]], steps: int, schedule_only: bool = False, repeat: int = 1,
                policy: Callable[..., DraftLength] | None = None, config: Any = GREEDY,
                **options: Any) -> Callable[[], dict[str, Any]]:
    """One run: every source alone (batch 1), greedy, `repeat` times; ms per generated id (EOS counted), what was
    accepted and how often the policy switched speculation off. `schedule_only`: `model` is an opening of its
    own, whose policies (made on its first run, kept by the runner) have no switch-off; `policy`: what makes
    them instead (its own opening too, or options that key a policy of their own: num_assistant_tokens)."""
    policy = SCHEDULE_ONLY if schedule_only else policy

    def run() -> dict[str, Any]:
        timings, ids = DecodeTimings(), []
        pauses = sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values())
        with Policy(policy):
            start = time.perf_counter()
            for src in sources * repeat:
                ids += model.generate_ids([src], max_new_tokens=steps, config=config, timings=timings, **options)
            seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        pauses = sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values()) - pauses
        return {"ms": 1000 * seconds / tokens, "ids": ids, "calls": len(timings.steps_s), "tokens": tokens,
                "drafted": timings.drafted, "accepted": timings.accepted, "pauses": pauses}

    return run


def decode_sides(model: Any, again: Any, sources: list[list[int]], steps: int,
                 proposers: dict[str, dict[str, Any]], repeat: int = 1) -> dict[str, Callable[[], dict[str, Any]]]:
    """Plain greedy, then each proposer (name -> its generate_ids options) with the policy as it ships on
    `model` and with the schedule alone on `again` (another opening of the same export)."""
    sides = {"plain": decode_side(model, sources, steps, repeat=repeat)}
    for name, options in proposers.items():
        sides[name] = decode_side(model, sources, steps, repeat=repeat, **options)
        sides[f"{name}, schedule only"] = decode_side(again, sources, steps, schedule_only=True, repeat=repeat,
                                                       **options)
    return sides


def call_costs(case: str, model: Any, src: list[int], rounds: int) -> list[dict[str, Any]]:
    """ms of a decoder call feeding 1 + k positions after a 20-position past, with the speculative step's
    pick of every position and its cache trim (runtime.states.positions), against a plain step's."""
    cache, cfg = model.checking_cache(), model.config
    bias = np.zeros(cfg.tgt_vocab_size, np.float32)

    def call(n: int) -> Callable[[], float]:
        def run() -> float:
            state = cache.start(model.source_input([src]))
            state.feed(np.array([[cfg.bos_id] + [5] * 19]))
            start = time.perf_counter()
            for _ in range(10):
                state.feed(np.full((1, n), 5, np.int64))
                if n == 1:  # a plain step: its id, the past grown by one
                    state.next_ids()
                else:  # a check: every position's id, the past cut back to 20 + the kept (here 0)
                    state.position_ids(bias)
                    state.truncate(20)
            return 100 * (time.perf_counter() - start)  # ms a call

        return run

    samples = interleave({n: call(n) for n in POSITIONS}, Plan(rounds=rounds))
    one = median(samples[1])
    return [{"case": case, "positions": n, "ms_per_call": round(median(samples[n]), 3),
             "x_plain_step": round(median(samples[n]) / one, 2)} for n in POSITIONS]


def timing_rows(case: str, sides: dict[str, Callable[[], dict[str, Any]]], rounds: int) -> list[dict[str, Any]]:
    """One row per side: median ms/token, x plain, and the last run's calls, acceptance and switch-offs."""
    samples = interleave(sides, Plan(rounds=rounds))
    plain = median(s["ms"] for s in samples["plain"])
    reference = samples["plain"][0]["ids"]
    rows = []
    for name, runs in samples.items():
        ms, last = median(r["ms"] for r in runs), runs[-1]
        rows.append({"case": case, "side": name, "ms_per_token": round(ms, 3), "speedup": round(plain / ms, 2),
                     "calls_per_token": round(last["calls"] / last["tokens"], 3) if last["calls"] else None,
                     "acceptance": round(last["accepted"] / last["drafted"], 3) if last["drafted"] else None,
                     "switch_offs": last["pauses"], "same_ids": all(r["ids"] == reference for r in runs),
                     "distinct": len({i for row in last["ids"] for i in row}),  # 1: a degenerate output
                     "ms_rounds": [round(r["ms"], 3) for r in runs]})
    return rows


COLUMNS = [Column("case"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "decoder calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("switch_offs", "switch-offs (last run)"),
           Column("same_ids", "same ids"), Column("distinct", "distinct ids out")]
COST_COLUMNS = [Column("case"), Column("positions", "positions fed (1 + k)"),
                Column("ms_per_call", "ms/call", "{:.3f}"), Column("x_plain_step", "x plain step", "{:.2f}")]


Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (timing rows, call-cost rows)


# --- transcription


class Counted:
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


def switch_offs(model: Any) -> int:
    return sum(p.pauses for p in model.__dict__.get("draft_lengths", {}).values())


def transcribed(model: Any, recordings: list[np.ndarray], schedule_only: bool = False,
                **options: Any) -> Callable[[], dict[str, Any]]:
    """`decode_side` for transcription: one run transcribes every recording; ms per id of the
    transcripts (timestamps included, the windows' EOS not); decoder calls, drafts and acceptance summed over
    the speculative windows (plain greedy's calls are not counted: None)."""

    def run() -> dict[str, Any]:
        seen: list[speculative.Speculation] = []
        pauses = switch_offs(model)
        with Policy(SCHEDULE_ONLY if schedule_only else None), Counted(seen):
            start = time.perf_counter()
            ids = [model.transcribe(r, language="en", timestamps=True, **options)["ids"] for r in recordings]
            seconds = time.perf_counter() - start
        tokens = sum(map(len, ids))
        return {"ms": 1000 * seconds / tokens, "ids": ids, "calls": sum(s.calls for s in seen) or None,
                "tokens": tokens, "drafted": sum(s.drafted for s in seen),
                "accepted": sum(s.accepted for s in seen), "pauses": switch_offs(model) - pauses}

    return run


# --- the in-flight engine's rows


def answer(engine: Any, sources: list[list[int]], steps: int, config: Any, together: int) -> list[list[int]]:
    """Every source's ids through `engine`, `together` queued at once, the next ones once those are answered."""
    ids: list[list[int]] = [[] for _ in sources]
    done = threading.Semaphore(0)

    def job(n: int) -> Job:
        def emit(kind: str, value: Any) -> None:
            if kind == "token":
                ids[n].append(value)
            else:  # done or error: each job ends with exactly one
                done.release()
        return Job(sources[n], steps, emit, config)

    batches = [list(range(n, min(n + together, len(sources)))) for n in range(0, len(sources), together)]
    for batch in batches:
        engine.submit([job(n) for n in batch])
        for _ in batch:
            done.acquire()
    return ids


def served_side(engine: Any, sources: list[list[int]], steps: int, lookup: int, together: int
                ) -> Callable[[], dict[str, Any]]:
    """One run of the in-flight engine: every source answered, `together` at a time, prompt lookup `lookup` (0:
    plain); ms per generated id and the speculating requests' calls, drafts, acceptance and declines."""
    config = GREEDY.replace(prompt_lookup_num_tokens=lookup)

    def run() -> dict[str, Any]:
        spec = engine.batch.speculation
        before = (spec.calls, spec.drafted, spec.accepted, engine.declined)
        start = time.perf_counter()
        ids = answer(engine, sources, steps, config, together)
        seconds = time.perf_counter() - start
        tokens = sum(len(r) + (len(r) < steps) for r in ids)
        counts = (spec.calls, spec.drafted, spec.accepted, engine.declined)
        calls, drafted, accepted, declined = (now - was for now, was in zip(counts, before))
        return {"ms": 1000 * seconds / tokens, "ids": ids, "tokens": tokens, "calls": calls, "drafted": drafted,
                "accepted": accepted, "declined": declined}

    return run


def served_rows(workload: str, samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per side of a served workload: median ms/token, x plain, the last run's calls and declines."""
    plain = median(r["ms"] for r in samples["plain"])
    reference = samples["plain"][0]["ids"]
    rows = []
    for side, runs in samples.items():
        ms, last = median(r["ms"] for r in runs), runs[-1]
        rows.append({"workload": workload, "side": side, "ms_per_token": round(ms, 3),
                     "speedup": round(plain / ms, 2),
                     "calls_per_token": round(last["calls"] / last["tokens"], 3) if last["calls"] else None,
                     "acceptance": round(last["accepted"] / last["drafted"], 3) if last["drafted"] else None,
                     "declined": last["declined"], "same_ids": all(r["ids"] == reference for r in runs),
                     "ms_rounds": [round(r["ms"], 3) for r in runs]})
    return rows


SERVED_COLUMNS = [Column("workload"), Column("side"), Column("ms_per_token", "ms/token", "{:.3f}"),
           Column("speedup", "x plain", "{:.2f}"), Column("calls_per_token", "speculating calls/token", "{:.3f}"),
           Column("acceptance", "drafts accepted", "{:.0%}"), Column("declined", "declined for load"),
           Column("same_ids", "same ids")]
