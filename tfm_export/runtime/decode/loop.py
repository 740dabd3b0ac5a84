"""The one decode driver and the decoder-state protocol every cache implements. Torch-free.

As onnxruntime-genai's `State::Run` under its `Search`, and CTranslate2's `DecoderState` under one
`decode()`: a `DecoderCache` encodes a batch into a `DecoderState`; each step the state runs the
decoder for all its rows, and a strategy (runtime.decode.strategies: `Greedy` on the graph's own argmax,
`TokenPicker` for sampling and processors, runtime.decode.beam.`BeamSearch`) reads what it needs of the step
(`next_ids`, `logits`, or each row's best candidates picked on the device with `top`) and says which
row each next row continues; beam search then has the state `reorder` its rows on the device.

The states are siblings: the growing cache (runtime.states.growing), the static cache and the in-flight rows
(runtime.states.rows, runtime.states.host_rows: a call's rows are all bound at once, the server's join and leave),
and the eager model (model.generate). `decode` is the loop of every direct call (generate,
generate_ids, stream); the server's in-flight scheduler (runtime.inflight) steps the same states and
strategies, its rows grouped by job.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Iterator, Protocol

import numpy as np

from .processors import BiasKey


class StepView(Protocol):
    """What a strategy reads of one decoder step, for its rows."""

    device_top: bool  # `top` picks on the device (ONNX Runtime); False: the strategy takes the logits

    def next_ids(self) -> np.ndarray:
        """(rows,) int64: the decoder's own argmax (greedy); the logits stay where they are."""
        ...

    def logits(self) -> np.ndarray:
        """(rows, tgt_vocab): the step's logits on the host."""
        ...

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        """Each row's `width` best log-probabilities under `bias` (float64) and their ids (rows, width),
        picked where the logits are (runtime.states.head): only these cross to the host."""
        ...


class DecoderState(StepView, Protocol):
    """The decoder rows of one decode, after their sources were encoded."""

    def step(self, tokens: np.ndarray) -> None:
        """Feed each row's next input id (rows,) int64 and run one decoder step."""
        ...

    def reorder(self, beam_idx: np.ndarray) -> None:
        """Beam search: row r continues the cache of row beam_idx[r] (rows,), gathered on the device."""
        ...


class DecoderCache(Protocol):
    """A decoder with its cache policy: `start` encodes a batch; `lock` guards shared buffers."""

    lock: AbstractContextManager[Any]

    def start(self, src: Any, expand: int = 1) -> DecoderState:
        """Encode (batch, src_len) sources into a state of batch * expand rows (source i's rows are
        i*expand .. i*expand + expand-1: its beams or samples)."""
        ...


class Strategy(Protocol):
    """How the next ids of some rows are chosen (runtime.decode.strategies, runtime.decode.beam)."""

    rows: int  # decoder rows it decides for
    bos_id: int  # every row's first input (runtime.decode.together's: (rows,) ids, each strategy its own)
    finished: bool

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows' next ids (rows,) and, for beam search, the row each continues (None: itself)."""
        ...

    def results(self) -> Any:
        ...


class Observer(Protocol):
    """Watches a decode (export validation records each row's logits by its prefix)."""

    def step(self, tokens: np.ndarray, state: DecoderState) -> None:
        ...

    def reorder(self, beam_idx: np.ndarray) -> None:
        ...


class DecodeTimings:
    """Wall-clock times of one generate call (benchmarks pass one in; normal calls do not)."""

    def __init__(self) -> None:
        self.encoder_s = 0.0
        self.steps_s: list[float] = []
        self.drafted = self.accepted = 0  # speculative decoding: ids drafted, and accepted (runtime.decode.speculative)


def moved(beam_idx: np.ndarray | None) -> bool:
    """Whether a beam step moved any row (else the caches stay as they are)."""
    return beam_idx is not None and bool(np.any(beam_idx != np.arange(len(beam_idx))))


def decode(cache: DecoderCache, src: Any, strategy: Strategy, timings: DecodeTimings | None = None,
           observer: Observer | None = None) -> Iterator[Any]:
    """Decode `src` (batch, src_len) with `strategy`; yields it after each step (its ids grow), and it
    holds the results when the iterator ends. `timings` gets the encoder's time and each step's."""
    with cache.lock:
        start = time.perf_counter()
        state = cache.start(src, strategy.rows // src.shape[0])
        if timings is not None:
            timings.encoder_s = time.perf_counter() - start
        tokens = np.full(strategy.rows, strategy.bos_id, dtype=np.int64)  # (rows,)
        while not strategy.finished:
            start = time.perf_counter()
            state.step(tokens)
            if observer is not None:
                observer.step(tokens, state)
            tokens, beam_idx = strategy.advance(state)
            if not strategy.finished and moved(beam_idx):
                state.reorder(beam_idx)
                if observer is not None:
                    observer.reorder(beam_idx)
            if timings is not None:
                timings.steps_s.append(time.perf_counter() - start)
            yield strategy


def run(cache: DecoderCache, src: Any, strategy: Strategy, timings: DecodeTimings | None = None,
        observer: Observer | None = None) -> Any:
    """`decode` to the end: the strategy's results."""
    for _ in decode(cache, src, strategy, timings, observer):
        pass
    return strategy.results()
