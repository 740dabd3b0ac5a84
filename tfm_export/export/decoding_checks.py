"""Validation's decoding checks: the export's tokens against eager PyTorch's on the same sources.

Two comparisons, each asking for its decoding by name (never the export's defaults by accident):
- greedy: the runtime's plain greedy ids (runtime.generation.GREEDY) against eager greedy decoding,
  and with a static-cache decoder, its rows against the growing cache's;
- default: when the export's `generation` section decodes otherwise (a Marian folder's 4 beams, say),
  the runtime's default decoding against an eager reference of the same settings: the plain beam
  search oracle (model.beam_oracle, which shares no code with runtime.beam) for beam search, the
  eager runner of the same search loop for sampling and greedy with processors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..manifest import Manifest
from ..model.beam_oracle import beam_search_oracle
from ..model.eager import EagerModel
from ..model.generate import greedy_decode
from ..model.transformer import Transformer
from ..runtime import GREEDY, GenerationConfig, RuntimeOptions, open_export
from ..runtime.static import static_slots

GREEDY_SOURCES = 16
# Hypothesis scores (sums of float32 log-probabilities) may round differently in ORT and eager.
SCORE_RTOL = 1e-4


def compare_greedy(folder: Path, manifest: Manifest, model: Transformer, sources: list[list[int]], steps: int,
                   device: str) -> dict[str, Any]:
    """Greedy tokens from the ORT runtime and from eager PyTorch on `sources`.

    With a static-cache decoder, its rows must also equal the growing-cache decoder's exactly.
    """
    # cuda_graph=False: the growing-cache decoder, whatever the device; the static one is checked against it.
    runtime = open_export(folder, device=device, options=RuntimeOptions(cuda_graph=False), manifest=manifest)
    got = runtime.generate_ids(sources, config=GREEDY.replace(max_new_tokens=steps))
    extra = {}
    if "decoder_static" in manifest.graphs:  # the static-cache loop (CUDA-graph form) must give the growing cache's rows
        static_runtime = open_export(folder, device=device, options=RuntimeOptions(cuda_graph=True), manifest=manifest)
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
                    config: GenerationConfig, device: str) -> dict[str, Any]:
    """The runtime's default decoding (`config`) against the eager reference on `sources`: every
    returned hypothesis' ids equal, scores within SCORE_RTOL."""
    runtime = open_export(folder, device=device, options=RuntimeOptions(cuda_graph=False), manifest=manifest)
    got = runtime.generate(sources, config)
    if config.num_beams > 1:
        ref = beam_search_oracle(model, _padded(sources, model), runtime.steps_for(config), config)
        reference = "eager beam search oracle"
    else:
        ref = EagerModel(model, "cpu", generation=config).generate(sources)
        reference = "eager search loop"
    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if not _same_hypotheses(a, b)]
    return {"config": {k: v for k, v in config.to_dict().items() if v != getattr(GREEDY, k)},
            "reference": reference, "sources": len(sources), "equal": not bad, "mismatched_rows": bad[:10]}


def _same_hypotheses(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and all(
        a.ids == b.ids and abs(a.score - b.score) <= SCORE_RTOL * max(1.0, abs(b.score)) for a, b in zip(got, want))


def _padded(sources: list[list[int]], model: Transformer) -> torch.Tensor:
    pad, width = model.config.src_pad_id, max(len(s) for s in sources)
    return torch.tensor([s + [pad] * (width - len(s)) for s in sources])  # (batch, src_len)


def decoding_sources(runtime_manifest: Manifest, folder: Path, cfg: Any, gen: torch.Generator) -> list[list[int]]:
    """The export's sample texts encoded (when it has both), else GREEDY_SOURCES random sources."""
    if runtime_manifest.samples and runtime_manifest.tokenizer:
        from ..text.tokenizer import tokenizer_from_dict

        tokenizer = tokenizer_from_dict(runtime_manifest.tokenizer, folder)
        return [tokenizer.encode(text) for text in runtime_manifest.samples]
    lengths = torch.randint(1, min(cfg.max_len, 12) + 1, (GREEDY_SOURCES,), generator=gen).tolist()
    rows = [torch.randint(0, cfg.src_vocab_size, (n,), generator=gen).tolist() for n in lengths]
    return [[t if t != cfg.src_pad_id else (t + 1) % cfg.src_vocab_size for t in row] for row in rows]
