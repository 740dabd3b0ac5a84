"""Validation's decoding checks: the export's tokens against eager PyTorch's on the same sources.

Two comparisons, each asking for its decoding by name (never the export's defaults by accident):
- greedy: the runtime's plain greedy ids (runtime.options.generation.GREEDY) against eager greedy decoding,
  and with a static-cache decoder, its rows against the growing cache's;
- default: when the export's `generation` section decodes otherwise (a Marian folder's 4 beams, say),
  the runtime's default decoding against an eager reference of the same settings: the plain beam
  search oracle (model.beam_oracle, which shares no code with runtime.decode.beam) for beam search, the
  eager runner of the same search loop for sampling and greedy with processors.

Beam search compares in two halves, because it is chaotic where hypotheses score alike (a random
model's reorderings of its few repeated tokens), and float32 noise between two runners then picks
other beams: the oracle decides on the logits the runtime recorded for each prefix, so that the
bookkeeping (processors, candidates, finished slots, the cache rows following their beams) must give
the same hypotheses exactly; and those recorded logits are checked against the eager model's for
the same prefixes within the validation's tolerance, which proves the graphs and the cache.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..manifest import Manifest
from ..model.beam_oracle import beam_search_oracle
from ..model.eager import EagerModel
from ..model.generate import greedy_decode
from ..model.transformer import Transformer
from ..runtime import GREEDY, GenerationConfig, RuntimeOptions, open_export
from ..runtime.sources import example_sources, float_source
from ..runtime.states.static import static_slots
from .specs import encoder_input

GREEDY_SOURCES = 16
# Random feature windows for a features source: each is a whole window (Whisper: 1500 encoder positions).
FEATURE_SOURCES = 4
# The growing-cache decoder (the static one is checked against it), with no spinning threads: these
# checks run PyTorch and ORT in turn, and spinning ORT threads would take PyTorch's cores. No huge pages:
# collapsing the weights' memory costs time at each session's start, and these sessions run few steps.
QUIET = RuntimeOptions(cuda_graph=False, spin_wait=False, huge_pages=False)
# Hypothesis scores (sums of float32 log-probabilities) may round differently in ORT and eager.
SCORE_RTOL = 1e-4


def checking_options(manifest: Manifest, base: RuntimeOptions = QUIET) -> RuntimeOptions:
    """`base` for a check of this export: without ORT's packed weight copies and memory arena when the graphs
    keep their weights in external data (a model over 2 GB), so that the checks fit beside the eager model."""
    big = any(graph.external_data for graph in manifest.graphs.values())
    return dataclasses.replace(base, prepack=False, cpu_arena=False) if big else base


def compare_greedy(folder: Path, manifest: Manifest, model: Transformer, sources: list[list[int]], steps: int,
                   device: str) -> dict[str, Any]:
    """Greedy tokens from the ORT runtime and from eager PyTorch on `sources`.

    With a static-cache decoder, its rows must also equal the growing-cache decoder's exactly.
    """
    # cuda_graph=False: the growing-cache decoder, whatever the device; the static one is checked against it.
    options = checking_options(manifest)
    got = open_export(folder, device=device, options=options, manifest=manifest).generate_ids(
        sources, config=GREEDY.replace(max_new_tokens=steps))  # its sessions close before the next open
    extra = {}
    if "decoder_static" in manifest.graphs:  # the static-cache loop (CUDA-graph form) must give the growing cache's rows
        static_runtime = open_export(folder, device=device, options=dataclasses.replace(options, cuda_graph=True),
                                     manifest=manifest)
        limit = min(steps, static_slots(manifest))  # fewer slots than steps: compare the first `limit` tokens
        rows = static_runtime.generate_ids(sources, config=GREEDY.replace(max_new_tokens=limit))
        extra["static_cache_mismatched_rows"] = [i for i, (a, b) in enumerate(zip(rows, got)) if a != b[:limit]][:10]
    ref = greedy_decode(model, _padded(sources, model), steps)
    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
    same = sum(x == y for a, b in zip(got, ref) for x, y in zip(a, b))
    total = sum(max(len(a), len(b)) for a, b in zip(got, ref)) or 1
    return {"sources": len(sources), "max_new_tokens": steps, "equal": not bad, "mismatched_rows": bad[:10],
            "row_agreement": 1 - len(bad) / len(sources), "token_agreement": same / total,
            "from": "sample" if manifest.samples and manifest.tokenizer else "random", **extra}


def default_decoding(manifest: Manifest, steps: int) -> GenerationConfig | None:
    """The export's default decoding when it is not plain greedy (None: greedy covers it), at most
    `steps` tokens long (validation's budget)."""
    config = GenerationConfig.from_dict(manifest.generation)
    if config.is_greedy:
        return None
    return config.replace(max_new_tokens=min(steps, config.max_new_tokens or steps))


def compare_default(folder: Path, manifest: Manifest, model: Transformer, sources: list[list[int]],
                    config: GenerationConfig, device: str, tol: tuple[float, float] = (1e-4, 1e-5)) -> dict[str, Any]:
    """The runtime's default decoding (`config`) against the eager reference on `sources`: every
    returned hypothesis' ids equal, scores within SCORE_RTOL. Rows whose hypotheses differ but score
    the same (within SCORE_RTOL) are tied, not failed: sequences of one probability, which a random
    model makes of every reordering of its few repeated tokens, leave the pick to float rounding."""
    runtime = open_export(folder, device=device, options=checking_options(manifest), manifest=manifest)
    numeric: dict[str, Any] = {}
    if config.num_beams > 1:
        recording = _Recording(config.num_beams)
        got = runtime.generate(sources, config, observer=recording)
        ref = beam_search_oracle(model, _padded(sources, model), runtime.steps_for(config), config,
                                 lambda b, prefix: recording.records.get((b, prefix)), numeric)
        reference = "eager beam search oracle (on the runtime's logits)"
    else:
        got = runtime.generate(sources, config)
        ref = EagerModel(model, "cpu", generation=config).generate(sources)
        reference = "eager search loop"
    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if not _same_hypotheses(a, b)]
    if numeric:  # the recorded logits against eager's (`tol`: atol, rtol of the largest magnitude)
        numeric["ok"] = numeric["max_abs"] <= tol[0] + tol[1] * numeric["max_ref"] and not numeric["missing"]
    return {"config": {k: v for k, v in config.to_dict().items() if v != getattr(GREEDY, k)},
            "reference": reference, "sources": len(sources), "equal": not bad and numeric.get("ok", True),
            "mismatched_rows": bad[:10], **({"logits": numeric} if numeric else {})}


def _same_hypotheses(got: list[Any], want: list[Any]) -> bool:
    """Equal ids and scores (within SCORE_RTOL) for every returned hypothesis."""
    return len(got) == len(want) and all(
        a.ids == b.ids and abs(a.score - b.score) <= SCORE_RTOL * max(1.0, abs(b.score)) for a, b in zip(got, want))


class _Recording:
    """A runtime.decode.loop.Observer recording each row's logits by (source, prefix): the oracle decides on
    them. A source's beams share their first prefixes: one copy each."""

    def __init__(self, expand: int):
        self.expand = expand  # decoder rows per source
        self.records: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        self.prefixes: list[list[int]] = []  # each row's ids fed so far

    def step(self, tokens: np.ndarray, state: Any) -> None:
        self.prefixes = [prefix + [int(t)] for prefix, t in
                         zip(self.prefixes or [[] for _ in tokens], tokens.reshape(-1))]
        out = state.logits()  # (rows, vocab)
        for row, prefix in enumerate(self.prefixes):
            self.records.setdefault((row // self.expand, tuple(prefix)), out[row].copy())

    def reorder(self, beam_idx: np.ndarray) -> None:
        self.prefixes = [self.prefixes[i] for i in beam_idx]


def _padded(sources: Any, model: Transformer) -> torch.Tensor:
    """The sources as the eager model's input: ids padded (batch, src_len), features as they are, or frames
    padded as the runtime pads them (runtime.sources.float_source)."""
    cfg = model.config
    if not cfg.source_kind.ids:  # (batch, n_mels, n_frames) or (batch, src_len, n_feats)
        return torch.from_numpy(float_source(sources, encoder_input(cfg), cfg.max_len))
    pad, width = model.config.src_pad_id, max(len(s) for s in sources)
    return torch.tensor([s + [pad] * (width - len(s)) for s in sources])  # (batch, src_len)


def decoding_sources(runtime_manifest: Manifest, folder: Path, cfg: Any, gen: torch.Generator) -> Any:
    """The sources both decodings compare on (runtime.sources.example_sources): the export's sample texts encoded
    when it has both, else GREEDY_SOURCES random sources (FEATURE_SOURCES whole windows for a features source),
    seeded from `gen`."""
    tokenizer = None
    if runtime_manifest.samples and runtime_manifest.tokenizer:
        from ..text.tokenizer import tokenizer_from_dict

        tokenizer = tokenizer_from_dict(runtime_manifest.tokenizer, folder)
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    return example_sources(runtime_manifest, tokenizer, seed, GREEDY_SOURCES, FEATURE_SOURCES)[0]
