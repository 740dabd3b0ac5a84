"""A caller's LogitsProcessor list (runtime.decode.processors): TokenPicker and BeamSearch both run it, after the
generic processors, with each row's history (its prompt, then its generated ids) and the step."""

from __future__ import annotations

import numpy as np
import pytest

from tfm_export.runtime.decode.beam import BeamSearch
from tfm_export.runtime.decode.processors import needs_rows
from tfm_export.runtime.decode.strategies import TokenPicker
from tfm_export.runtime.options.generation import GenerationConfig

BOS, EOS, PAD, VOCAB = 0, 1, 2, 12
FAVOURITE = 7  # the model's argmax every step, unless a processor bans it


class View:
    """A StepView whose logits favour FAVOURITE, then FAVOURITE + 1, on every row; no device head."""

    device_top = False

    def __init__(self, rows: int):
        self.rows = rows

    def logits(self) -> np.ndarray:
        x = np.zeros((self.rows, VOCAB), dtype=np.float32)
        x[:, FAVOURITE], x[:, FAVOURITE + 1], x[:, EOS] = 5.0, 4.0, -5.0
        return x


class BanFavourite:
    """Bans FAVOURITE and records what each call saw."""

    def __init__(self):
        self.calls: list[tuple[tuple[int, ...], int]] = []

    def __call__(self, scores, history, step):
        self.calls.append((history.shape, step))
        assert (history[:, :2] == [BOS, 9]).all()  # the prompt heads every row's history
        scores[:, FAVOURITE] = -np.inf
        return scores


def strategies(processor):
    prompt = np.tile([BOS, 9], (2, 1))
    return {
        "picker": TokenPicker(2, 3, GenerationConfig(max_new_tokens=3), BOS, EOS, PAD, processors=[processor],
                              prompt=prompt),
        "beam": BeamSearch(1, 3, GenerationConfig(num_beams=2, max_new_tokens=3), BOS, EOS, PAD, vocab=VOCAB,
                           processors=[processor], prompt=prompt),
    }


@pytest.mark.parametrize("name", ["picker", "beam"])
def test_a_callers_processor_is_applied(name):
    processor = BanFavourite()
    strategy = strategies(processor)[name]
    while not strategy.finished:
        ids, _ = strategy.advance(View(strategy.rows))
        assert FAVOURITE not in ids.tolist() and (ids == FAVOURITE + 1).any()
    best = strategy.results()[0][0]
    assert best.ids == [FAVOURITE + 1] * 3
    assert processor.calls == [((2, 2 + step), step) for step in range(3)]


def test_without_processors_the_favourite_wins_and_beams_may_use_the_device():
    config = GenerationConfig(num_beams=2, max_new_tokens=3)
    picker = TokenPicker(1, 2, GenerationConfig(max_new_tokens=2), BOS, EOS, PAD)
    while not picker.finished:
        picker.advance(View(1))
    assert picker.results()[0][0].ids == [FAVOURITE] * 2
    assert not needs_rows(config) and needs_rows(config, [BanFavourite()])
    assert BeamSearch(1, 3, config, BOS, EOS, PAD, vocab=VOCAB).head_key() is not None
    assert BeamSearch(1, 3, config, BOS, EOS, PAD, vocab=VOCAB, processors=[BanFavourite()]).head_key() is None
