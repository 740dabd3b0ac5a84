"""How many ids a speculative step drafts, and whether it drafts at all (runtime.decode.speculative). Torch-free.

- The length follows transformers' "heuristic" `num_assistant_tokens_schedule`: +2 after a step that accepted
  every drafted id, -1 (at least 1) otherwise, here at most `cap`.
- The switch-off. Drafting costs time (a draft model's own steps) and so does checking: a decoder call over
  k + 1 positions costs about one step where a step is bound by reading its weights (a GPU at batch 1), but up
  to k + 1 steps where it is bound by arithmetic (a CPU at small sizes). So the policy times the steps online,
  in seconds per emitted id (running averages): plain steps (nothing drafted) and speculative ones. Once
  `TRIAL` speculative steps have been timed, speculation that costs more per id than plain steps is switched
  off: `pause` plain steps follow (which refresh the plain figure), then it tries again. A retry that does not
  pay doubles the pause (at most `MAX_PAUSE`) and halves the draft length; one that pays resets the pause. The
  very first step is plain (the figure to beat). A proposer that never pays thus costs `TRIAL` speculative
  steps every pause: a few percent of the plain decode once the pause has grown.

One policy lives as long as its runner and proposer (runtime.api keeps it across calls, as transformers keeps
`num_assistant_tokens` under the "heuristic" schedule). The ids never depend on it: every step emits the model's
own greedy ids, whatever was drafted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TRIAL = 2  # speculative steps timed before they are judged
FIRST_PAUSE = 8  # plain steps after the first switch-off
MAX_PAUSE = 512
SMOOTHING = 0.1  # the newest step's weight in the averages, once they hold 1 / SMOOTHING steps


@dataclass
class Average:
    """Seconds and ids emitted per step: their mean over the first 1 / SMOOTHING steps, then an exponential
    average (about as many steps deep, so that a change of regime shows); `per_id` their ratio."""

    seconds: float = 0.0
    ids: float = 0.0
    count: int = 0

    def add(self, seconds: float, ids: int) -> None:
        self.count += 1
        weight = max(SMOOTHING, 1 / self.count)
        self.seconds += weight * (seconds - self.seconds)
        self.ids += weight * (ids - self.ids)

    @property
    def per_id(self) -> float:
        return self.seconds / self.ids if self.ids else float("inf")


@dataclass
class DraftLength:
    """The draft length `k` (from `start`, at most `cap`) and the switch-off (see the module docstring).
    `switch_off=False` keeps transformers' schedule alone."""

    start: int
    cap: int | None = None
    switch_off: bool = True
    k: int = field(init=False)
    plain: Average = field(default_factory=Average, init=False)
    speculative: Average = field(default_factory=Average, init=False)
    off: int = field(default=0, init=False)  # plain steps left in the current pause
    pause: int = field(default=FIRST_PAUSE, init=False)  # the next pause's length
    pauses: int = field(default=0, init=False)  # how many times speculation was switched off

    def __post_init__(self) -> None:
        self.k = self.start

    @property
    def drafting(self) -> bool:
        """Whether the next step drafts: not in a pause, and (with the switch-off) a plain step timed first."""
        return not self.switch_off or (self.off == 0 and self.plain.count > 0)

    def length(self, room: int) -> int:
        """How many ids to draft now, at most `room`; 0: a plain step."""
        return max(0, min(self.k, room)) if self.drafting else 0

    def record(self, drafted: int, accepted: int, emitted: int, seconds: float) -> None:
        """A step drafted `drafted` ids, `accepted` of them, emitted `emitted` ids (the accepted ones and the
        model's next, cut at EOS) and took `seconds`, drafting included."""
        if drafted == 0:  # a plain step: a pause, a forced id, or nothing proposed (no evidence on the draft)
            self.plain.add(seconds, emitted)
            if self.off:
                self.off -= 1
            return
        grown = self.k + 2 if accepted == drafted else max(1, self.k - 1)
        self.k = grown if self.cap is None else min(grown, self.cap)
        if self.switch_off:
            self.speculative.add(seconds, emitted)
            self._judge()

    def _judge(self) -> None:
        """After TRIAL speculative steps, switch off when they cost more per id than plain ones."""
        if self.speculative.count < TRIAL:
            return
        if self.speculative.per_id <= self.plain.per_id:
            self.pause = FIRST_PAUSE
            return
        self.off, self.pauses = self.pause, self.pauses + 1
        self.pause = min(2 * self.pause, MAX_PAUSE)
        self.k = max(1, self.k // 2)
        self.speculative = Average()  # the retry is judged on its own steps
