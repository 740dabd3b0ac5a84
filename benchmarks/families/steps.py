"""The time per decoding step of several backends on one batch: (t(N tokens) - t(1 token)) / (N - 1), so the
encoder and set-up cancel; interleaved rounds and medians by the harness (`families`, `big-models --speed` and
`exports`)."""

from __future__ import annotations

from typing import Any
import argparse

from tfm_export.bench import harness


def measure(backends: Any, src: list[list[int]], beams: int, args: argparse.Namespace,
            reference: str = "transformers") -> dict[str, Any]:
    """Warm-up (output lengths checked), then --repeat rounds of every backend in turn. `backends`: anything
    with Backends' `family`, `runs` and `seconds`; each backend's rows are compared with `reference`'s."""
    n, outputs = args.new_tokens, {}
    for name, run in backends.runs.items():
        for k in (1, n):
            outputs[name] = run(src, k, beams)
            lengths = {len(row) for row in outputs[name]}
            assert lengths == {k}, f"{backends.family} {name}: asked for {k} new tokens per row, got {lengths}"
    sides = {name: (lambda name=name: (backends.seconds(name, src, n, beams), backends.seconds(name, src, 1, beams)))
             for name in backends.runs}
    runs = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=0))
    samples = {name: {"total_s": [t for t, _ in r], "first_s": [f for _, f in r]} for name, r in runs.items()}
    result: dict[str, Any] = {}
    for name, s in samples.items():
        step_ms = [1e3 * (t - f) / (n - 1) for t, f in zip(s["total_s"], s["first_s"])]
        result[name] = {"step_ms": step_ms, "step_ms_p50": harness.median(step_ms),
                        "total_ms_p50": 1e3 * harness.median(s["total_s"]),
                        "first_ms_p50": 1e3 * harness.median(s["first_s"]),
                        "ms_per_generated_token_p50": harness.median(step_ms) / len(src),
                        # rows equal to the reference's (random weights: near ties may differ at float precision)
                        f"same_as_{reference}": sum(a == b for a, b in zip(outputs[name], outputs[reference]))
                        / len(src)}
    return result

