r"""Where an ORT beam-search step goes: decoder, device head, row gather, merge; head vs host path.

    .venv/bin/python -m benchmarks profile-beam EXPORT_DIR [--batch 16] [--num-beams 4] [--new-tokens 32]
        [--threads 2] [--repeat 3]

Decodes random sources of 32 tokens (EOS banned until the last step, as `tfm-export bench`) with the
candidates picked on the device (runtime.states.head) and, interleaved in the same process, on the host
(the logits cross; what runtimes without the head do), and prints the median ms per step of each
part ("host advance" includes its merge; the step includes the encoder's share). Figures in
BENCHMARKS.md ("Beam search").
"""
from __future__ import annotations

import argparse
import collections
import random

from tfm_export.bench import harness
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export
from tfm_export.runtime.decode import beam
from tfm_export.runtime.states import growing, reorder
from tfm_export.runtime.states import head as beam_head

PARTS = {"decoder": (growing.GrowingState, "step"), "head": (beam_head.BeamHead, "__call__"),
         "gather": (reorder.RowGather, "__call__"), "host advance": (beam.BeamSearch, "advance_logits"),
         "merge": (beam.BeamSearch, "_select")}


def timers(spent: dict[str, float]) -> None:
    """Wrap each part so that its calls add their wall time to `spent`."""
    for name, (owner, attr) in PARTS.items():
        original = getattr(owner, attr)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            out = []
            spent[_name] += harness.timed(lambda: out.append(_original(*args, **kwargs)))
            return out[0]

        setattr(owner, attr, wrapped)


def profile_beam_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dir")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model = open_export(args.export_dir, "cpu", RuntimeOptions(intra_op_threads=args.threads, cuda_graph=False),
                        verify=False)
    rng = random.Random(0)
    sources = [[rng.randrange(4, model.config.src_vocab_size) for _ in range(32)] for _ in range(args.batch)]
    spent: dict[str, float] = collections.defaultdict(float)
    timers(spent)
    runs: dict[str, list[dict[str, float]]] = {"device head": [], "host": []}
    for i in range(args.repeat + 1):  # the first round warms up
        for mode in runs:
            # Without the device head the strategy takes the logits to the host (runtime.decode.beam.BeamSearch.advance).
            growing.GrowingState.device_top = mode == "device head"
            spent.clear()
            seconds = harness.timed(lambda: model.generate_ids(sources, args.new_tokens, stop_at_eos=False,
                                                               config=GREEDY.replace(num_beams=args.num_beams)))
            if i:
                runs[mode].append({"step": seconds, **spent})
    print(f"{args.export_dir}: batch {args.batch} x {args.num_beams} beams, {args.new_tokens} tokens, "
          f"{args.threads} threads; median ms per step")
    for mode, records in runs.items():
        parts = {k: 1e3 * harness.median([r.get(k, 0.0) for r in records]) / args.new_tokens
                 for k in ("step", *PARTS)}
        print(f"{mode:>12}: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items() if v))

