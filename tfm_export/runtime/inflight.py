"""In-flight rows: groups of rows that join and leave a running batch, each with its strategy. Torch-free.

The scheduler's half of continuous batching (serve.batcher.InflightBatcher adds the threads, the
queue and the jobs): a group is one request's rows, one for greedy decoding and one sample, k for a
beam search of k beams (or k samples of one source), and every row of every group takes the same
decoder step of one runtime.states.rows.Rows. Each group decides its next ids with the strategy a
direct call of its request would use (runtime.decode.strategies.strategy_for, one source: `Greedy` on the
graph's own argmax, `TokenPicker`, `BeamSearch`), reading its rows of the step through `GroupView`;
a beam group's cache rows are then gathered in its beams' order, one gather for every group.

Beam groups pick their candidates on the device as a direct call does: `device_tops` runs one head
over the rows of every group that shares a bias, and only each row's best ids and log-probabilities
cross; the whole logits cross once per step, only for the groups that sample or run whole-row
processors (1.21x the engine's beam-4 throughput at 64 rows over each group's log-softmax and top-k
on the host: BENCHMARKS.md, "Serving beam search").

A greedy request with prompt_lookup_num_tokens speculates (`Speculating`): its group's strategy is a
runtime.decode.speculative.SpeculativeRow on a checking state of its own (the growing decoder with
earlier_logits, which takes the row's last id and its draft in one call and truncates back to the ids kept),
started on the encoder outputs the rows' encoder made for its source (`InflightRows.checking_state`: a source
is encoded once); its rows here stay unbound, since decoder_static takes one id per row a step. Each step of
the rows is one call of every speculating group's state, emitting one or more ids (greedy's), checked as
the same request's plain row would pick them (runtime.decode.checking.check_for): without processors on the graph's argmax
(ArgmaxCheck: only ids cross, and no score, as a plain greedy row answers), under
processors as `generate` checks them (ProcessorCheck: the processed logits on the host, and generate's score,
as a TokenPicker row answers); the rows themselves step when any other group is bound, so a batch without
speculating groups steps exactly as before. Which requests speculate is the caller's choice (serve.batcher's load
rule); one that does not is bound with `RowGroup.start` as the same request without prompt lookup (greedy's ids,
and a score under processors, either way).

`decode_in_flight` runs sources through this loop alone: how an export's checks (runtime.verify)
prove that the server's rows decode like decoder.onnx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..config import TransformerConfig
from .decode.beam import BeamSearch
from .decode.loop import moved
from .options.generation import GenerationConfig, Hypothesis
from .decode.processors import BiasKey
from .decode.speculative import Speculation, SpeculativeRow, checkable, proposal
from .decode.checking import ProcessorCheck, check_for
from .states.growing import GrowingState, device_value
from .states.rows import Rows
from .decode.strategies import Greedy, Picker, TokenPicker, strategy_for

Top = tuple[np.ndarray, np.ndarray]  # a group's rows' best log-probabilities and their ids


def group_width(config: GenerationConfig) -> int:
    """Cache rows a request decodes in: its beams, or its samples (n-best of sampling), else one."""
    return config.num_beams if config.num_beams > 1 else config.num_return_sequences


@dataclass(eq=False)
class RowGroup:
    """One request (`owner`: the server's job) and its cache rows (beam b, or sample b, at rows[b])."""

    owner: Any
    rows: list[int]
    strategy: Picker

    @classmethod
    def start(cls, owner: Any, rows: list[int], config: GenerationConfig, max_new_tokens: int,
              cfg: TransformerConfig, request_row: int = 0) -> "RowGroup":
        """`request_row`: the source's index in its request, whose rows seed its sampling generators as
        in a direct call of the whole request."""
        first_row = request_row * config.num_return_sequences
        return cls(owner, rows, strategy_for(1, max_new_tokens, config, cfg, first_row, scored=False))

    @classmethod
    def speculating(cls, owner: Any, rows: list[int], config: GenerationConfig, max_new_tokens: int,
                    cfg: TransformerConfig, state: Any, src: np.ndarray, stats: Speculation) -> "RowGroup":
        """A greedy request with prompt lookup (`speculates`): its row decodes on `state`, a checking state
        of its source `src` (1, src_len) (`InflightRows.checking_state`), `stats` counting its drafts."""
        return cls(owner, rows, Speculating.start(config, max_new_tokens, cfg, state, src, stats))

    @property
    def speculates(self) -> bool:
        return isinstance(self.strategy, Speculating)

    @property
    def streams(self) -> bool:
        """Tokens go out as they are chosen (greedy, one sample); else when the search ends (a later
        step can overtake every running beam)."""
        strategy = self.strategy
        return isinstance(strategy, (Greedy, Speculating)) or (isinstance(strategy, TokenPicker) and len(self.rows) == 1)

    def head_run(self) -> tuple[BiasKey, bool] | None:
        """For a beam search whose processors allow it: the (bias, renormalize) of its device-side head
        this step; groups with equal ones share a run. None: the group needs no head run."""
        if not isinstance(self.strategy, BeamSearch):
            return None
        key = self.strategy.head_key()
        return None if key is None else (key, self.strategy.config.renormalize_logits)

    @property
    def finished(self) -> bool:
        return self.strategy.finished

    def results(self) -> list[Hypothesis] | None:
        """The request's hypotheses (None for plain greedy, speculating or not: no score is computed)."""
        strategy = self.strategy
        unscored = isinstance(strategy, Greedy) or (isinstance(strategy, Speculating) and not strategy.scored)
        return None if unscored else strategy.results()[0]


def speculates(config: GenerationConfig, cache: Any) -> bool:
    """Whether a request of `config` speculates in the rows: greedy decoding (runtime.decode.speculative.checkable:
    one sequence, no beams, no sampling; under its processors too, forced EOS included, which
    runtime.decode.checking.ProcessorCheck applies as TokenPicker does) with prompt_lookup_num_tokens, and a
    `cache` that checks drafts (runtime.exported's checking_cache; None: an export from before earlier_logits,
    decoded plainly)."""
    return cache is not None and config.prompt_lookup_num_tokens > 0 and checkable(config)


@dataclass
class Speculating:
    """A group's strategy that speculates (see the module docstring): each step of the rows is one decoder call
    of its own checking state, fed its last id and its draft, which may emit several ids. Its check is the plain
    row's (runtime.decode.checking.check_for): under processors runtime.decode.speculative.scored's
    (TokenPicker's greedy picks, forced EOS included), so its hypothesis is `generate`'s, score and all; without
    them Greedy's argmax on the device, and no score (`scored` False), as a plain greedy row."""

    row: SpeculativeRow
    bos_id: int

    @classmethod
    def start(cls, config: GenerationConfig, steps: int, cfg: TransformerConfig, state: Any, src: np.ndarray,
              stats: Speculation) -> "Speculating":
        proposer, policy = proposal(config, cfg, None, None)
        proposer.start(src)
        check = check_for(config, cfg, steps, scored=False)  # a plain row's picks: Greedy's or TokenPicker's
        return cls(SpeculativeRow(state, proposer, policy, steps, check, [cfg.bos_id], stats), cfg.bos_id)

    @property
    def finished(self) -> bool:
        return self.row.finished

    def advance(self, view: Any) -> tuple[np.ndarray, None]:
        """The ids this step emits (1 or more; the rows' step is not read)."""
        return np.array(self.row.step(), dtype=np.int64), None

    @property
    def scored(self) -> bool:
        """Whether its check keeps each id's log-probability (ProcessorCheck): its hypothesis has a score."""
        return isinstance(self.row.check, ProcessorCheck)

    def results(self) -> list[list[Hypothesis]]:
        ids = self.row.result()
        return [[Hypothesis(ids, self.row.score)]]


@dataclass
class StepOutputs:
    """One step of the rows, read once however many groups need it."""

    rows: Rows
    tops: dict[int, Top]  # by id(group): the device's candidates of the beam groups
    _next_ids: np.ndarray | None = None
    _logits: np.ndarray | None = None

    def next_ids(self) -> np.ndarray:
        if self._next_ids is None:
            self._next_ids = self.rows.next_ids()
        return self._next_ids

    def logits(self) -> np.ndarray:
        if self._logits is None:  # (batch, tgt_vocab) to the host only when a group picks from it
            self._logits = self.rows.logits()
        return self._logits


@dataclass
class GroupView:
    """A runtime.decode.loop.StepView of one group's rows."""

    outputs: StepOutputs
    group: RowGroup
    device_top: bool = field(init=False)

    def __post_init__(self) -> None:
        self.device_top = id(self.group) in self.outputs.tops

    def next_ids(self) -> np.ndarray:
        return self.outputs.next_ids()[self.group.rows]

    def logits(self) -> np.ndarray:
        return self.outputs.logits()[self.group.rows]

    def top(self, bias: BiasKey, width: int, renormalize: bool) -> Top:
        logp, ids = self.outputs.tops[id(self.group)]
        return logp[:, :width], ids[:, :width]


def device_tops(groups: list[RowGroup], rows: Rows) -> dict[int, Top]:
    """Each beam group's candidates for this step by id(group), picked on the device: one head run per
    (bias, renormalize) over the rows of all the groups that share it, as wide as the widest of them
    (a group of fewer beams takes the first columns: the head's top-k is sorted, ties by id)."""
    runs: dict[tuple[BiasKey, bool], list[RowGroup]] = {}
    for group in groups:
        if (run := group.head_run()) is not None:
            runs.setdefault(run, []).append(group)
    tops: dict[int, Top] = {}
    for (bias, renormalize), members in runs.items():
        width = max(group.strategy.width for group in members)  # type: ignore[union-attr]
        logp, ids = rows.top(bias, width, renormalize, rows=np.concatenate([group.rows for group in members]))
        start = 0
        for group in members:  # (n, width) -> each group's rows
            end = start + len(group.rows)
            tops[id(group)] = (logp[start:end], ids[start:end])
            start = end
    return tops


class InflightRows:
    """The groups bound in `rows` and their next input ids; `step` advances every group by one token."""

    def __init__(self, rows: Rows, cfg: TransformerConfig):
        self.rows, self.cfg = rows, cfg
        self.speculation = Speculation()  # the speculating groups' decoder calls, drafted and accepted ids
        # The bound groups that speculate, counted at join and leave: a step without any (the common case) asks
        # no group whether it does (8 groups' isinstance checks were 4 us of a 0.65 ms step, bundled model)
        self.speculating = 0
        self.groups: list[RowGroup | None] = [None] * rows.batch  # (batch,): the group each row is in
        self.tokens = np.full(rows.batch, cfg.tgt_pad_id, dtype=np.int64)  # (batch,) next input ids

    def free_rows(self) -> list[int]:
        return [row for row, group in enumerate(self.groups) if group is None]

    def bound_groups(self) -> list[RowGroup]:
        """Each bound group once, in row order."""
        return list({id(g): g for g in self.groups if g is not None}.values())

    def checking_state(self, cache: Any, encoded: list[np.ndarray], length: int) -> GrowingState:
        """A state of `cache` (the growing decoder: runtime.exported's checking_cache) for one source from the
        rows' encoder outputs (`Rows.encode`'s, each (1, ...)), cut to the source's own `length` along src_len
        (src_mask's axis 1, cross.*'s 2: what its own encoder run returns), so the source is not encoded again."""
        def own(value: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(value[:, :length] if value.ndim == 2 else value[:, :, :length])

        return GrowingState(cache, {name: device_value(cache.device, own(value))
                                    for name, value in zip(self.rows.encoded_names, encoded)}, 1)

    def join(self, group: RowGroup, encoded: list[np.ndarray]) -> None:
        """Write one source's encoder outputs (1, ...) into the group's rows; it starts at the next step. A
        speculating group's rows stay unbound: it decodes on its own state."""
        for row in group.rows:
            self.groups[row] = group
        if group.speculates:
            self.speculating += 1
            return
        self.rows.write(group.rows, [np.repeat(value, len(group.rows), axis=0) for value in encoded])
        self.tokens[group.rows] = group.strategy.bos_id  # Whisper's: its prompt's first token

    def leave(self, group: RowGroup) -> None:
        """Free a group's rows at once: they idle (pad at slot 0) until another group is bound into them."""
        self.speculating -= group.speculates
        for row in group.rows:
            self.groups[row] = None
            self.rows.release(row)
        self.tokens[group.rows] = self.cfg.tgt_pad_id

    def step(self, ended: Callable[[RowGroup, np.ndarray], bool]) -> None:
        """One decoder step of every row; each group advances by its strategy, `ended(group, ids)` says
        whether it leaves now (its rows are freed at once), and the beams that go on are reordered.
        Speculating groups take a call of their own states; the rows step when another group is bound (a step
        without speculating groups is the plain one)."""
        groups, speculating = self.bound_groups(), self.speculating
        if speculating < len(groups):  # a group is bound to the rows
            self.rows.step(self.tokens)
        outputs = StepOutputs(self.rows, device_tops(groups, self.rows))
        moving: list[int] = []  # the rows of every group whose beams continue other rows' caches
        beams: list[np.ndarray] = []  # the index in `moving` of the row each continues
        for group in groups:
            chosen, beam_idx = group.strategy.advance(GroupView(outputs, group))
            if ended(group, chosen):
                self.leave(group)
                continue
            if moved(beam_idx):
                beams.append(beam_idx + len(moving))
                moving += group.rows
            if not (speculating and group.speculates):
                self.tokens[group.rows] = chosen
        if moving:  # one gather for every group
            self.rows.reorder(np.concatenate(beams), moving)


def decode_in_flight(rows: Rows, src: np.ndarray, steps: int, config: GenerationConfig,
                     cfg: TransformerConfig) -> list[list[Hypothesis] | list[int]]:
    """Decode the sources of `src` (the encoder input of a batch) as the server's rows do, every source its
    own group (rows must hold them all): per source its hypotheses, or for plain greedy decoding its ids
    (trimmed at EOS)."""
    batch = InflightRows(rows, cfg)
    encoded = rows.encode(src)
    free, groups = batch.free_rows(), []
    for n in range(src.shape[0]):
        group = RowGroup.start(n, [free.pop(0) for _ in range(group_width(config))], config, steps, cfg, n)
        batch.join(group, [value[n:n + 1] for value in encoded])
        groups.append(group)
    while any(g is not None for g in batch.groups):
        batch.step(lambda group, chosen: group.finished)
    return [g.strategy.results()[0][0].ids if isinstance(g.strategy, Greedy) else g.results() for g in groups]
