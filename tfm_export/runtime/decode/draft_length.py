"""How many ids a speculative step drafts, and whether it drafts at all (runtime.decode.speculative). Torch-free.

- The length follows transformers' "heuristic" `num_assistant_tokens_schedule`: +2 after a step that accepted
  every drafted id, -1 (at least 1) otherwise, here at most `cap`.
- The switch-off. Drafting costs time (a draft model's own steps) and so does checking: a decoder call over
  k + 1 positions costs about one step where a step only reads its weights (a GPU at batch 1), more where the
  arithmetic shows (a 2-core CPU: 1.2x a plain step for k = 1, 2x for k = 10 at the base size, BENCHMARKS.md).
  So the policy times the steps online, in seconds per emitted id over the last WINDOW steps of each kind:
  plain steps (nothing drafted) and speculative ones (drafting included). Once TRIAL speculative steps have
  been timed, speculation that costs more per id than plain steps is switched off: `pause` plain steps follow
  (which refresh the plain figure), then it tries again. A retry that does not pay doubles the pause (at most
  MAX_PAUSE) and halves the draft length; one that pays resets the pause. The first PLAIN_FIRST steps are
  plain (the figure to beat: their median, as the very first calls warm ONNX Runtime up), then every other
  step until WINDOW plain steps are timed, then one after every REFRESH speculative ones (a draft model never
  leaves a plain step otherwise). A proposer
  that never pays thus costs TRIAL speculative steps every pause: a few percent of the plain decode once the
  pause has grown.

One policy lives as long as its runner and proposer (runtime.api keeps it across calls, as transformers keeps
`num_assistant_tokens` under the "heuristic" schedule). The ids never depend on it: every step emits the model's
own greedy ids, whatever was drafted.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

TRIAL = 2  # speculative steps timed before they are judged
FIRST_PAUSE = 8  # plain steps after the first switch-off
MAX_PAUSE = 512
WINDOW = 16  # the steps of each kind that the cost per id is taken over
SPIKE = 3.0  # a step's seconds count at most SPIKE x the window's median (a step that lost the CPU)
PLAIN_FIRST = 3  # plain steps timed before the first draft (their median: the first call warms ORT up)
REFRESH = 32  # while speculating, one plain step in REFRESH + 1 keeps the plain figure current


@dataclass
class Recent:
    """The last WINDOW steps of one kind, (seconds, ids emitted); `per_id`: their seconds over their ids, each
    step's seconds clipped at SPIKE x their median, so that a step another process preempted (a shared machine)
    counts as a slow step rather than as ten."""

    steps: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, seconds: float, ids: int) -> None:
        self.steps.append((seconds, ids))

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def median(self) -> float:
        """The median step's seconds per id (plain steps: one id each)."""
        return statistics.median(s / i for s, i in self.steps) if self.steps else float("inf")

    @property
    def per_id(self) -> float:
        ids = sum(i for _, i in self.steps)
        if not ids:
            return float("inf")
        bound = SPIKE * statistics.median(s for s, _ in self.steps)
        return sum(min(s, bound) for s, _ in self.steps) / ids


@dataclass
class DraftLength:
    """The draft length `k` (from `start`, at most `cap`) and the switch-off (see the module docstring).
    `switch_off=False` keeps transformers' schedule alone."""

    start: int
    cap: int | None = None
    switch_off: bool = True
    k: int = field(init=False)
    plain: Recent = field(default_factory=Recent, init=False)
    speculative: Recent = field(default_factory=Recent, init=False)
    off: int = field(default=0, init=False)  # plain steps left in the current pause
    pause: int = field(default=FIRST_PAUSE, init=False)  # the next pause's length
    pauses: int = field(default=0, init=False)  # how many times speculation was switched off
    since_plain: int = field(default=0, init=False)  # speculative steps since the last plain one

    def __post_init__(self) -> None:
        self.k = self.start

    @property
    def drafting(self) -> bool:
        """Whether the next step drafts: with the switch-off, not in a pause, PLAIN_FIRST plain steps timed,
        and not the plain step that follows REFRESH speculative ones (every one, until WINDOW plain steps are
        timed: the first steps of a runner are ORT's warm-up, which a draft must not be measured against)."""
        every = REFRESH if self.plain.count >= WINDOW else 1  # plain and speculative alternate until WINDOW plain
        return not self.switch_off or (self.off == 0 and self.plain.count >= PLAIN_FIRST and self.since_plain < every)

    def length(self, room: int) -> int:
        """How many ids to draft now, at most `room`; 0: a plain step."""
        return max(0, min(self.k, room)) if self.drafting else 0

    def record(self, drafted: int, accepted: int, emitted: int, seconds: float) -> None:
        """A step drafted `drafted` ids, `accepted` of them, emitted `emitted` ids (the accepted ones and the
        model's next, cut at EOS) and took `seconds`, drafting included."""
        if drafted == 0:  # a plain step: a pause, a forced id, or nothing proposed (no evidence on the draft)
            self.plain.add(seconds, emitted)
            self.since_plain = 0
            if self.off:
                self.off -= 1
            return
        self.since_plain += 1
        grown = self.k + 2 if accepted == drafted else max(1, self.k - 1)
        self.k = grown if self.cap is None else min(grown, self.cap)
        if self.switch_off:
            self.speculative.add(seconds, emitted)
            self._judge()

    def _judge(self) -> None:
        """After TRIAL speculative steps, switch off when they cost more per id than plain ones (the median plain
        step: the figure to beat is a typical step, not the warm-up's)."""
        if self.speculative.count < TRIAL:
            return
        if self.speculative.per_id <= self.plain.median:
            self.pause = FIRST_PAUSE
            return
        self.off, self.pauses = self.pause, self.pauses + 1
        self.pause = min(2 * self.pause, MAX_PAUSE)
        self.k = max(1, self.k // 2)
        self.speculative = Recent()  # the retry is judged on its own steps
