"""#26's headline case: a Marian folder as OPUS-MT publishes it (generation_config.json with 4 beams, the
pad id banned, max_length 512, renormalised logits), at opus-mt's size, exports with default flags:
validation compares greedy tokens and the folder's default beam search with eager, and passes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from helpers import run_cli_ok  # noqa: E402
from marian_fixtures import OPUS_MT, marian_folder  # noqa: E402
from tfm_export.runtime import GREEDY, open_export  # noqa: E402


@pytest.mark.long  # opus-mt's size with validation: over a minute; CI checks published folders at tiny sizes
def test_opus_mt_sized_published_folder_exports_with_default_flags(tmp_path):
    (tmp_path / "opus-mt-en-de").mkdir()
    folder = marian_folder(tmp_path / "opus-mt-en-de", vocab_size=15_600, **OPUS_MT)
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["bad_words_ids"], generation["max_length"]) == (4, [[15_599]], 512)
    result = run_cli_ok(folder, "-o", tmp_path / "out")
    assert "greedy tokens: equal" in result.output and "default decoding (" in result.output
    runtime = open_export(tmp_path / "out", "cpu")
    validation = runtime.manifest.validation
    assert validation["greedy"]["equal"] and validation["default"]["equal"]
    assert validation["default"]["config"]["num_beams"] == 4 and runtime.generation.num_beams == 4
    assert runtime.config.src_vocab_size == 15_600 and runtime.config.d_model == 512
    # Text in and out through the folder's tokenizer, explicitly greedy and with its default beams.
    for config in (GREEDY, None):
        ids = runtime.generate_ids([runtime.encode("the house")], 8, config=config)
        assert runtime.translate(["the house"], 8, config=config) == [runtime.tokenizer.decode(ids[0])]
