"""Validation of a user's own module export (export.module_export): ONNX Runtime against the callables in
eager mode, every output over a grid of shapes, then greedy and beam tokens through the one decode driver
(`EagerModule` is the callables as a runner, a no-cache decoder state)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..errors import ValidationError
from ..manifest import Manifest
from ..runtime.api import GenerateMixin
from ..runtime.options.generation import GenerationConfig
from ..runtime.states.nocache import GRAPH_NAME, MEMORY, SOURCE_MASK
from ..runtime.sources import source_batch
from .module_graphs import Decode, DecoderGraph, Encode, EncoderGraph, Graphs

# (batch, src_len) and decoder prefix lengths (None: max_len, capped), beams compared.
GRID = ((1, 1), (2, 7), (3, None))
TGT_LENS = (1, 4, None)
MAX_GRID_LEN = 64
VALIDATION_BEAMS = 3


class EagerModule(GenerateMixin):
    """The callables in eager mode as a runner: `generate_ids` etc. through the one decode driver and the
    same strategies as the ONNX runtime (a no-cache state: the whole prefix each step)."""

    def __init__(self, module: nn.Module, encode: Encode, decode: Decode, config: TransformerConfig):
        self.module, self.encode_fn, self.decode_fn, self.config = module, encode, decode, config
        self.generation = GenerationConfig()
        self.draft_lengths = {}  # GenerateMixin's; unused: no checking cache

    def source_input(self, sources: Sequence[Sequence[int]]) -> np.ndarray:
        return source_batch(sources, self.config)

    def cache_for(self, config: GenerationConfig, steps: int) -> "EagerModule":
        return self

    lock = nullcontext()

    @torch.no_grad()
    def start(self, src: np.ndarray, expand: int = 1) -> "_EagerState":
        ids = torch.from_numpy(src)
        mask = ids != self.config.src_pad_id
        memory = EncoderGraph(self.module, self.encode_fn)(ids, mask)[0]
        return _EagerState(self, memory.repeat_interleave(expand, 0), mask.repeat_interleave(expand, 0))


class _EagerState:
    device_top = False

    def __init__(self, runner: EagerModule, memory: Tensor, mask: Tensor):
        self.runner, self.memory, self.mask = runner, memory, mask
        self.prefix = torch.zeros((memory.shape[0], 0), dtype=torch.int64)
        self.out: np.ndarray | None = None

    @torch.no_grad()
    def step(self, tokens: np.ndarray) -> None:
        self.prefix = torch.cat([self.prefix, torch.from_numpy(tokens.reshape(-1, 1).astype(np.int64))], dim=1)
        graph = DecoderGraph(self.runner.module, self.runner.decode_fn)
        self.out = graph(self.prefix, self.memory, self.mask).numpy()

    def next_ids(self) -> np.ndarray:
        return self.out.argmax(axis=1).astype(np.int64)

    def logits(self) -> np.ndarray:
        return self.out

    def top(self, bias: Any, width: int, renormalize: bool) -> Any:
        raise NotImplementedError("eager: strategies take the logits")

    def reorder(self, beam_idx: np.ndarray) -> None:
        index = torch.from_numpy(beam_idx)
        self.prefix, self.memory, self.mask = self.prefix[index], self.memory[index], self.mask[index]


def validate_module(folder: Path, manifest: Manifest, graphs: Graphs, atol: float,
                    sources: Sequence[Sequence[int]] | None, max_new_tokens: int) -> dict[str, Any]:
    """ORT against the callables: every output over GRID (and TGT_LENS for the decoder), then greedy and
    beam tokens; the report, or a ValidationError carrying it."""
    import onnxruntime as ort

    from ..runtime import open_export

    config, gen = manifest.config, torch.Generator().manual_seed(0)
    sessions = {name: ort.InferenceSession(str(folder / entry.file), providers=["CPUExecutionProvider"])
                for name, entry in manifest.graphs.items()}
    worst: dict[str, float] = {}
    for batch, src_len in GRID:
        src_len = src_len or min(config.max_len, MAX_GRID_LEN)
        src, mask = graphs.example_source(batch, src_len, gen, config.src_vocab_size)
        with torch.no_grad():
            expected = graphs.encoder(src, mask)
        got = sessions["encoder"].run(None, {"src_ids": src.numpy(), SOURCE_MASK: mask.numpy()})
        for spec, want, have in zip(manifest.graphs["encoder"].spec.outputs, expected, got):
            _record(worst, f"encoder.{spec.name}", have, want.numpy())
        if graphs.decoder is None:
            continue
        for tgt_len in TGT_LENS:
            tgt_len = tgt_len or min(config.max_len, MAX_GRID_LEN)
            tgt = torch.randint(0, config.tgt_vocab_size, (batch, tgt_len), generator=gen)
            tgt[:, 0] = config.bos_id
            with torch.no_grad():
                want = graphs.decoder(tgt, expected[0], mask).numpy()
            have = sessions[GRAPH_NAME].run(None, {"tgt_ids": tgt.numpy(), MEMORY: expected[0].numpy(),
                                                   SOURCE_MASK: mask.numpy()})[0]
            _record(worst, f"{GRAPH_NAME}.logits", have, want)
    report: dict[str, Any] = {"atol": atol, "mode": "module", "outputs": {k: {"max_abs": v, "ok": v <= atol}
                                                                          for k, v in worst.items()}}
    failed = [k for k, v in worst.items() if not v <= atol]
    if graphs.decoder is not None and not failed:
        runner = open_export(folder, device="cpu", manifest=manifest, verify=False)
        eager = EagerModule(graphs.module, graphs.encoder.encode, graphs.decoder.decode, config)
        sources = [list(s) for s in sources] if sources else _random_sources(graphs, config, gen)
        steps = min(max_new_tokens, config.max_len)
        for name, beams in (("greedy", 1), ("beam", VALIDATION_BEAMS)):
            along = _AlongThePaths(eager, sources, beams)
            ours = [h[0].ids for h in runner.generate(sources, max_new_tokens=steps, num_beams=beams, observer=along)]
            theirs = [h[0].ids for h in eager.generate(sources, max_new_tokens=steps, num_beams=beams)]
            equal = sum(a == b for a, b in zip(ours, theirs))
            report[name] = {"sources": len(sources), "equal": equal, "path_max_abs": along.worst}
            # Tokens that part at a near-tie are no failure when ORT's logits equal eager's along ORT's paths.
            if along.worst > atol or (equal != len(sources) and not np.isfinite(along.worst)):
                failed.append(f"{name} tokens ({len(sources) - equal} of {len(sources)} sources differ; logits along "
                              f"the decoded prefixes differ by up to {along.worst:.2e})")
    if failed:
        raise ValidationError(f"ONNX Runtime differs from your module's callables: {', '.join(failed)} "
                              f"(atol {atol})", report)
    return report


class _AlongThePaths:
    """A runtime.decode.loop.Observer of the ONNX decode: each step, the callables' logits for the same prefixes
    (row r of source r // beams) against ORT's; `worst` is the largest difference."""

    def __init__(self, eager: EagerModule, sources: Sequence[Sequence[int]], beams: int):
        self.eager, self.beams, self.worst = eager, beams, 0.0
        self.start = eager.start(eager.source_input(sources), beams)  # the eager memory, rows as ORT's

    def step(self, tokens: np.ndarray, state: Any) -> None:
        graph = DecoderGraph(self.eager.module, self.eager.decode_fn)
        with torch.no_grad():
            want = graph(torch.from_numpy(state.prefix), self.start.memory, self.start.mask).numpy()
        worst: dict[str, float] = {}
        _record(worst, "logits", state.logits(), want)
        self.worst = max(self.worst, worst["logits"])

    def reorder(self, beam_idx: np.ndarray) -> None:
        pass  # rows stay with their source: the eager memory needs no reordering


def _record(worst: dict[str, float], key: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape:
        worst[key] = float("inf")
        return
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst[key] = max(worst.get(key, 0.0), float(diff.max()) if diff.size else 0.0)


def _random_sources(graphs: Graphs, config: TransformerConfig, gen: torch.Generator) -> list[list[int]]:
    src, mask = graphs.example_source(4, max(2, min(8, config.max_len)), gen, config.src_vocab_size)
    return [[int(t) for t, m in zip(row, keep) if m] for row, keep in zip(src, mask)]
