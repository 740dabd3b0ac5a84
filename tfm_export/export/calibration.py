"""Calibration for `--int4-method gptq`: what each Linear of the model reads on the user's sources.

GPTQ (export.gptq) needs, per weight, H = 2/n * sum x x^T over the inputs x its MatMul reads. They are taken
from the eager model, which computes what the graphs compute: each calibration source is decoded greedily
(float32, the folder's own defaults otherwise), then encoded and decoded once more teacher-forced on its own
output, with a forward hook on every nn.Linear adding up x^T x. The graphs name each MatMul's module in the
scopes torch.onnx records (export.int4 reads them), so H is keyed by that name.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

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
    if checkpoint.config.source != "tokens" or not checkpoint.tokenizer:
        raise ConfigError("--int4-method gptq calibrates on source texts through the model's tokenizer; this "
                          "model has none (or reads audio): use --int4-method rtn or k_quant")


def linear_hessians(model: Transformer, checkpoint: Checkpoint, sources: Sequence[str]) -> dict[str, np.ndarray]:
    """Module scope name ("model.decoder_layers.0.ffn.fc2") -> H (K x K, float64) of that Linear's inputs
    over the calibration `sources` (texts; the model's tokenizer encodes them)."""
    check_calibration(checkpoint)
    pairs = _decoded(model, checkpoint, sources)
    sums: dict[str, torch.Tensor] = {}
    rows: dict[str, int] = {}

    def hook(name: str) -> Any:
        def add(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).double()
            sums[name] = sums[name] + x.T @ x if name in sums else x.T @ x
            rows[name] = rows.get(name, 0) + x.shape[0]
        return add

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        with torch.inference_mode():
            for source, target in pairs:  # one at a time: no padding rows in the sums
                model(source, target)
    finally:
        for handle in handles:
            handle.remove()
    log.info("calibration: %d sources, %d Linear inputs", len(pairs), len(sums))
    return {SCOPE_PREFIX + name: (2.0 * total / rows[name]).numpy() for name, total in sums.items()}


def _decoded(model: Transformer, checkpoint: Checkpoint, sources: Sequence[str]) -> list[tuple[Any, Any]]:
    """(source ids (1, src_len), decoder inputs (1, 1 + output length)) of each source, its output greedy."""
    from ..model.eager import EagerModel
    from ..runtime.generation import GenerationConfig

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
