"""Several strategies side by side over one decoder state, as one strategy of runtime.decode.loop. Torch-free.

`Together(strategies)` gives strategy i the rows i*w .. i*w + w-1 of each step (w: every strategy's rows): it
reads its rows of the step (a `StepView`), forces its own prompt, ends on its own, and its beams move within
its rows. The state's step is read once however many strategies read it (`_Step`). A strategy that ended
idles on its last ids until all have. So the windows of several transcriptions decode in one state of batch
n through the one loop (runtime.speech.batch_rounds), each window's ids those of the window decoded alone.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .loop import StepView, Strategy, moved
from .processors import BiasKey


class Together:
    """A Strategy of len(strategies) * w rows: each strategy's rows in order (see the module docstring)."""

    def __init__(self, strategies: Sequence[Strategy]):
        widths = {strategy.rows for strategy in strategies}
        if len(widths) != 1:
            raise ValueError(f"Together: strategies of one width (rows per source) only, not {sorted(widths)}")
        self.strategies, self.width = list(strategies), widths.pop()
        self.rows = self.width * len(self.strategies)
        # every row's first input, each strategy its own (loop.decode fills the rows with it)
        self.bos_id = np.repeat(np.array([s.bos_id for s in self.strategies], dtype=np.int64), self.width)
        self._tokens = self.bos_id.copy()  # (rows,): an ended strategy's rows keep their last ids

    @property
    def finished(self) -> bool:
        return all(strategy.finished for strategy in self.strategies)

    def advance(self, view: StepView) -> tuple[np.ndarray, np.ndarray | None]:
        step, order, width = _Step(view), None, self.width
        for i, strategy in enumerate(self.strategies):
            if strategy.finished:
                continue
            start = i * width
            chosen, beam_idx = strategy.advance(_Rows(step, start, start + width))
            self._tokens[start:start + width] = chosen
            if not strategy.finished and moved(beam_idx):
                order = np.arange(self.rows) if order is None else order
                order[start:start + width] = np.asarray(beam_idx) + start
        return self._tokens.copy(), order

    def results(self) -> list[Any]:
        return [strategy.results() for strategy in self.strategies]


class _Step:
    """One decoder step of the state, read once however many strategies read it."""

    def __init__(self, state: StepView):
        self.state, self.device_top = state, state.device_top
        self._ids: np.ndarray | None = None
        self._logits: np.ndarray | None = None
        self._tops: dict[tuple[Any, int, bool], tuple[np.ndarray, np.ndarray]] = {}

    def next_ids(self) -> np.ndarray:
        if self._ids is None:
            self._ids = self.state.next_ids()
        return self._ids

    def logits(self) -> np.ndarray:
        if self._logits is None:
            self._logits = self.state.logits()
        return self._logits

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        key = (bias, width, renormalize)
        if key not in self._tops:
            self._tops[key] = self.state.top(bias, width, renormalize)
        return self._tops[key]


class _Rows:
    """A StepView of one strategy's rows [start, end) of a step."""

    def __init__(self, step: _Step, start: int, end: int):
        self.step, self.rows, self.device_top = step, slice(start, end), step.device_top

    def next_ids(self) -> np.ndarray:
        return self.step.next_ids()[self.rows]

    def logits(self) -> np.ndarray:
        return self.step.logits()[self.rows]

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
        logp, ids = self.step.top(bias, width, renormalize)
        return logp[self.rows], ids[self.rows]
