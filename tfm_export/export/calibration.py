"""Calibration for `--int4-method gptq`: what each Linear of the model reads on the user's sources.

GPTQ (export.gptq) needs, per weight, H = 2/n * sum x x^T over the inputs x its MatMul reads. They are taken
from the eager model, which computes what the graphs compute: each calibration source is decoded greedily
(float32, the folder's own defaults otherwise), then encoded and decoded once more teacher-forced on its own
output, with a forward hook on every nn.Linear adding up x^T x. The graphs name each MatMul's module in the
scopes torch.onnx records (export.int4 reads them), so H is keyed by that name.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..model.checkpoint import Checkpoint
from ..model.transformer import Transformer

log = logging.getLogger(__name__)

# export.graphs' modules hold the Transformer as `.model`: the module scopes torch.onnx records start there.
SCOPE_PREFIX = "model."
MAX_NEW_TOKENS = 128  # a calibration output longer than this is cut: its first tokens are what GPTQ needs


def check_calibration(checkpoint: Checkpoint) -> None:
    """Refuse, before any work, a model calibration cannot read texts for."""
    if not checkpoint.config.source_kind.ids or not checkpoint.tokenizer:
        raise ConfigError("--int4-method gptq calibrates on source texts through the model's tokenizer; this "
                          "model has none (or reads audio): use --int4-method rtn or k_quant")


class Spilled(Mapping):
    """Hessians written to files, each read whole when asked for: a transform holds one at a time (memory-mapped,
    the pages of every one it had read would stay counted as the process's memory)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def __getitem__(self, name: str) -> np.ndarray:
        return np.load(self.files[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


def linear_hessians(model: Transformer, checkpoint: Checkpoint, sources: Sequence[str],
                    spill: Path | None = None, decoder_only: bool = False) -> Mapping[str, np.ndarray]:
    """Module scope name ("model.decoder_layers.0.ffn.fc2") -> H (K x K, float32) of that Linear's inputs
    over the calibration `sources` (texts; the model's tokenizer encodes them). Linears that read the same
    tensor (an attention's query, key and value; every layer's cross keys and values) share one array: float32
    and shared, an NLLB-600M's Hessians take 2.0 GB instead of 4.7 (the reference GPTQ sums in float32 too).
    With `spill` (a new folder, the caller's to remove) they are written there and read back one at a time
    (Spilled), so that the transforms hold only the one they use. `decoder_only`: none for the Linears the encoder
    graph runs (the encoder's and the cross keys and values), which `--int4-encoder int8` does not round by GPTQ."""
    check_calibration(checkpoint)
    pairs = _decoded(model, checkpoint, sources)
    skipped = _encoder_linears(model, pairs[0][0]) if decoder_only and pairs else set()
    sums: dict[str, torch.Tensor] = {}
    rows: dict[str, int] = {}
    shares: dict[str, str] = {}  # a Linear -> the one whose sum it shares
    read: dict[tuple[int, tuple[int, ...]], tuple[str, torch.Tensor]] = {}  # this forward's inputs, held

    def hook(name: str) -> Any:
        def add(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if name in shares:
                return
            key = (inputs[0].data_ptr(), tuple(inputs[0].shape))
            if key in read:  # held since it was read, so the same memory is the same tensor
                shares[name] = read[key][0]
                return
            read[key] = (name, inputs[0])
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()
            sums[name] = sums[name].addmm_(x.T, x) if name in sums else x.T @ x
            rows[name] = rows.get(name, 0) + x.shape[0]
        return add

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n not in skipped]
    try:
        with torch.inference_mode():
            for source, target in pairs:  # one at a time: no padding rows in the sums
                model(source, target)
                read.clear()
    finally:
        for handle in handles:
            handle.remove()
    log.info("calibration: %d sources, %d Linear inputs (%d shared)", len(pairs), len(sums), len(shares))
    hessians: dict[str, Any] = {}
    with torch.inference_mode():  # the sums are inference tensors: scaled in place, there
        for index, name in enumerate(list(sums)):
            hessians[name] = sums.pop(name).mul_(2.0 / rows[name]).numpy()
            if spill is not None:
                spill.mkdir(exist_ok=True)
                np.save(spill / f"{index}.npy", hessians[name])
                hessians[name] = spill / f"{index}.npy"
    hessians.update({name: hessians[first] for name, first in shares.items()})
    named = {SCOPE_PREFIX + name: h for name, h in hessians.items()}
    return named if spill is None else Spilled(named)


def _encoder_linears(model: Transformer, source: torch.Tensor) -> set[str]:
    """The Linears that encoding `source` runs: what export.graphs' EncoderGraph computes (encode, cross_kv)."""
    fired: set[str] = set()
    handles = [m.register_forward_hook(lambda *_, n=n: fired.add(n)) for n, m in model.named_modules()
               if isinstance(m, nn.Linear)]
    try:
        with torch.inference_mode():
            model.cross_kv(model.encode(source)[0])
    finally:
        for handle in handles:
            handle.remove()
    return fired


def _decoded(model: Transformer, checkpoint: Checkpoint, sources: Sequence[str]) -> list[tuple[Any, Any]]:
    """(source ids (1, src_len), decoder inputs (1, 1 + output length)) of each source, its output greedy."""
    from ..model.eager import EagerModel
    from ..runtime.options.generation import GenerationConfig

    eager = EagerModel(model, "cpu", checkpoint.tokenizer, checkpoint.meta.get("tokenizer_folder"),
                       GenerationConfig.from_dict(checkpoint.meta.get("generation_defaults")))
    ids = [eager.tokenizer.encode(text) for text in sources]
    limit = model.config.max_len
    cap = MAX_NEW_TOKENS if MAX_NEW_TOKENS < limit else None  # None: as many as the position table allows
    outputs = eager.generate_ids(ids, max_new_tokens=cap, num_beams=1)
    start = model.config.bos_id
    # The decoder reads its start and every output but the last (which is never fed back), as when decoding.
    return [(eager.source_input([src]), torch.tensor([[start, *out][:limit]], dtype=torch.int64))
            for src, out in zip(ids, outputs)]
