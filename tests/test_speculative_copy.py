"""Prompt lookup on the copy-heavy BART fixture (tests/copy_fixtures.py; issue #63): its answers copy long spans
of the source, so prompt lookup's drafts are mostly accepted, and the ids stay plain greedy decoding's and
transformers' greedy `generate`'s (the folder's own generation_config.json, num_beams=1: no_repeat_ngram_size,
min_length, forced BOS/EOS), on the growing and on the static cache (opened as CUDA graphs' loop, uncaptured on
CPU), with the draft-length policy as it ships and with the schedule alone."""

from __future__ import annotations

import functools

import pytest
import torch

import copy_fixtures
import hf_fixtures
from conftest import built_once
from helpers import run_cli_ok
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.decode import speculative
from tfm_export.runtime.decode.draft_length import DraftLength
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.options.generation import GREEDY

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]
LOOKUP = 10
FAMILY = "bart"  # tests/fixtures/trained_copy/<FAMILY>
if not (copy_fixtures.ROOT / FAMILY / "model.safetensors").exists():  # as conftest's bundled model: not trained yet
    pytest.skip("the copy-heavy fixture is not trained yet (tests/fixtures/README.md, 'Copy-heavy BART')",
                allow_module_level=True)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """The copy fixture exported once, without validation, with its static-cache decoders too."""
    return built_once(tmp_path_factory, "speculative-copy", "out", lambda out: run_cli_ok(
        copy_fixtures.copy_folder(FAMILY), "-o", out, "--no-validate", "--cuda-graph"))


@pytest.fixture(scope="module")
def held_out():
    """(the 20 held-out sources' ids, transformers' greedy ids of each with the folder's defaults)."""
    folder = copy_fixtures.copy_folder(FAMILY)
    model, tok = hf_fixtures.hf_model(folder), hf_fixtures.hf_tokenizer(folder)
    texts = [s for s, _ in copy_fixtures.copy_examples(20)]
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1)
    eos = model.config.eos_token_id
    rows = [r[1:] for r in out.tolist()]  # after the decoder start: the forced BOS, the answer, EOS, padding
    expected = [r[:r.index(eos)] if eos in r else r for r in rows]
    forced = model.generation_config.forced_bos_token_id
    assert forced is None or all(r[0] == forced for r in rows)
    return [tok(t)["input_ids"] for t in texts], expected


def speculated(model, sources, **options):
    timings = DecodeTimings()
    return model.generate_ids(sources, timings=timings, prompt_lookup_num_tokens=LOOKUP, **options), timings


@pytest.mark.parametrize("static", [False, True], ids=["growing", "static"])
@pytest.mark.parametrize("switch_off", [True, False], ids=["as-shipped", "schedule-only"])
def test_prompt_lookup_is_transformers_greedy(export, held_out, static, switch_off, monkeypatch):
    monkeypatch.setattr(speculative, "DraftLength", functools.partial(DraftLength, switch_off=switch_off))
    model = open_export(export, "cpu", RuntimeOptions(cuda_graph=static))
    assert (model.static_cache is not None) == static
    sources, expected = held_out
    assert [model.encode(s) for s, _ in copy_fixtures.copy_examples(3)] == sources[:3]
    plain = model.generate_ids(sources, num_beams=1)  # the folder's defaults, greedy: processors on the host
    assert plain == expected
    got, timings = speculated(model, sources, num_beams=1)
    assert got == expected
    assert timings.accepted <= timings.drafted
    plain = model.generate_ids(sources, config=GREEDY)  # argmax alone, on the device
    got, timings = speculated(model, sources, config=GREEDY)
    assert got == plain
    tokens = sum(len(r) + 1 for r in plain)
    if not switch_off:  # the schedule alone: calls and acceptance do not depend on timing
        assert timings.accepted > 0.8 * timings.drafted
        assert len(timings.steps_s) < tokens / 3  # most ids come out of accepted drafts


def test_the_answers_copy_their_sources(held_out):
    """What makes the fixture copy-heavy: every greedy answer is 20+ ids, and most of them exact."""
    folder = copy_fixtures.copy_folder(FAMILY)
    tok = hf_fixtures.hf_tokenizer(folder)
    sources, expected = held_out
    assert all(len(r) >= 20 for r in expected)
    answers = [t for _, t in copy_fixtures.copy_examples(20)]
    exact = sum(tok.decode(r, skip_special_tokens=True).strip() == a for r, a in zip(expected, answers))
    assert exact >= 10
