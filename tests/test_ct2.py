"""The CTranslate2 peer: our weights through its spec API decode exactly like eager."""

import pytest

from tfm_export.config import PRESETS
from tfm_export.model.eager import EagerModel
from tfm_export.model.presets import init_model

pytest.importorskip("ctranslate2")

from tfm_export.bench.ct2 import CT2Runner  # noqa: E402

SOURCES = [[5, 6, 7, 8], [9, 10, 11, 12], [30, 31]]


@pytest.mark.parametrize("changes", [{}, {"norm_first": True, "final_norm": True, "positions": "learned"},
                                     {"activation": "gelu", "scale_embeddings": False}])
def test_ct2_greedy_equals_eager(changes):
    model = init_model(PRESETS["tiny"].replace(**changes), seed=3)
    assert CT2Runner(model).generate_ids(SOURCES, 12) == EagerModel(model).generate_ids(SOURCES, 12)


def test_ct2_fixed_length_timings():
    from tfm_export.runtime import DecodeTimings

    timings = DecodeTimings()
    rows = CT2Runner(init_model("tiny", seed=3)).generate_ids(SOURCES, 6, stop_at_eos=False, timings=timings)
    assert [len(r) for r in rows] == [6] * 3 and len(timings.steps_s) == 6
