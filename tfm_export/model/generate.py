"""Reference greedy decoding in eager PyTorch (batched, KV cache, per-row EOS)."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch
from torch import Tensor

from ..runtime.decode.loop import DecodeTimings, run
from ..runtime.sources import resolve_max_new_tokens, trim
from ..runtime.decode.strategies import Greedy
from ..errors import InputError
from .transformer import Transformer


def check_ids(ids: Tensor, vocab_size: int, what: str) -> None:
    """Raise InputError when any id falls outside [0, vocab_size)."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)][0].item()
        raise InputError(f"{what} id {bad} is out of range for a vocabulary of {vocab_size} ids")


class EagerCache:
    """The eager model's growing KV cache as a runtime.decode.loop.DecoderCache (on the model's device)."""

    lock = nullcontext()  # each call keeps its own cache

    def __init__(self, model: Transformer):
        self.model = model

    @torch.no_grad()
    def start(self, source: Tensor, expand: int = 1) -> "EagerState":
        """Each source's encoder outputs repeated `expand` times (beams, samples)."""
        return EagerState(self.model, source, expand)


class EagerState:
    """A runtime.decode.loop.DecoderState on PyTorch: the strategies read the logits on the host (no device head)."""

    device_top = False

    def __init__(self, model: Transformer, source: Tensor, expand: int = 1):
        self.model, self.device = model, source.device
        memory, self.src_mask = model.encode(source)
        memory, self.src_mask = memory.repeat_interleave(expand, 0), self.src_mask.repeat_interleave(expand, 0)
        self.cross = model.cross_kv(memory)
        self.past = model.empty_cache(memory.shape[0], source.device, memory.dtype)
        self.out: Tensor | None = None  # the last step's logits (rows, tgt_vocab), on the model's device
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # CUDA runs async: the queued encoder work belongs to encoder_s

    @torch.no_grad()
    def step(self, tokens: np.ndarray) -> None:
        ids = torch.from_numpy(tokens.reshape(-1, 1)).to(self.device)  # (rows, 1)
        self.out, self.past = self.model.decode(ids, self.src_mask, self.cross, self.past, last_only=True)

    @torch.no_grad()
    def next_ids(self) -> np.ndarray:
        return self.model.pick(self.out).cpu().numpy()  # (rows,): waits for the step on CUDA

    def logits(self) -> np.ndarray:
        """The step's logits (rows, tgt_vocab) as float32 numpy."""
        return self.out.float().cpu().numpy()

    def top(self, bias, width: int, renormalize: bool):
        raise NotImplementedError("the eager state has no device head: strategies take its logits")

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Cache row r becomes row beam_idx[r] (rows,), on the model's device."""
        index = torch.from_numpy(beam_idx).to(self.device)
        self.past = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.past]


@torch.no_grad()
def greedy_decode(model: Transformer, source: Tensor, max_new_tokens: int | None = None,
                  stop_at_eos: bool = True, timings: DecodeTimings | None = None) -> list[list[int]]:
    """Greedy decoding of a padded (batch, src_len) id tensor (or, with a features or frames source, the float
    tensor of export.specs.encoder_input's shape); returns each row's ids without BOS/EOS.

    Rows stop at EOS (`stop_at_eos`); the batch stops when every row has. With
    `stop_at_eos=False` every row gets exactly `max_new_tokens` ids (benchmarks, which pass `timings`).
    The loop and its bookkeeping are the ONNX runtime's (runtime.decode.loop.decode with its Greedy strategy).
    """
    cfg = model.config
    if not cfg.source_kind.ids:  # float features or frames, checked by the runners (runtime.sources)
        return _greedy(model, source, max_new_tokens, stop_at_eos, timings)
    check_ids(source, cfg.src_vocab_size, "source")
    if source.shape[1] > cfg.max_len:
        raise InputError(f"source length {source.shape[1]} exceeds the model's max_len ({cfg.max_len}); "
                         f"shorten or split the input")
    return _greedy(model, source, max_new_tokens, stop_at_eos, timings)


def _greedy(model: Transformer, source: Tensor, max_new_tokens: int | None, stop_at_eos: bool,
            timings: DecodeTimings | None) -> list[list[int]]:
    cfg = model.config
    steps = resolve_max_new_tokens(max_new_tokens, 1, cfg.max_len)
    greedy = Greedy(source.shape[0], steps, cfg, stop_at_eos)
    run(EagerCache(model), source, greedy, timings)
    return [trim(row, cfg.eos_id) if stop_at_eos else row for row in greedy.generated()]
