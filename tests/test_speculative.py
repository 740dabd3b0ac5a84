"""Speculative greedy decoding (runtime.decode.speculative): with prompt lookup or a draft export, the ids are
plain greedy decoding's, id for id, on the trained fixtures (tests/fixtures/trained) and the tiny model; drafts
are accepted (fewer decoder calls than ids), the cache rolls back to the kept ids, a draft of another vocabulary
is refused, and an export made before earlier_logits decodes without speculation."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

import hf_fixtures
from helpers import run_cli, run_cli_ok
from tfm_export.errors import InputError
from tfm_export.manifest import EARLIER_LOGITS
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.decode.proposers import PromptLookup
from tfm_export.runtime.options.generation import GREEDY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family -> its trained fixture exported without validation (the decoder with earlier_logits)."""
    made = {}

    def export(family: str):
        if family not in made:
            out = tmp_path_factory.mktemp(f"spec-{family}") / "out"
            run_cli_ok(hf_fixtures.trained_folder(family), "-o", out, "--no-validate")
            made[family] = out
        return made[family]

    return export


def sources_of(model, family: str) -> list[list[int]]:
    return [model.encode(e.source) for e in hf_fixtures.task_examples(family)]


def speculated(model, sources, **options) -> tuple[list[list[int]], DecodeTimings]:
    timings = DecodeTimings()
    return model.generate_ids(sources, config=GREEDY, timings=timings, **options), timings


@pytest.mark.parametrize("family", ["t5", "marian"])
@pytest.mark.parametrize("lookup", [1, 3, 10])
def test_prompt_lookup_is_greedy(exported, family, lookup):
    model = open_export(exported(family), "cpu")
    sources = sources_of(model, family)
    plain = model.generate_ids(sources, config=GREEDY)
    got, timings = speculated(model, sources, prompt_lookup_num_tokens=lookup)
    assert got == plain
    assert len(timings.steps_s) <= sum(len(r) + 1 for r in plain)  # a call per emitted id at most
    assert 0 <= timings.accepted <= timings.drafted


def test_a_draft_export_is_greedy_and_saves_calls(exported):
    """t5 drafted by flan_t5 (another model of the same tokenizer): the same ids in fewer decoder calls."""
    model, draft = open_export(exported("t5"), "cpu"), open_export(exported("flan_t5"), "cpu")
    sources = sources_of(model, "t5")
    plain = model.generate_ids(sources, config=GREEDY)
    tokens = sum(len(r) + 1 for r in plain)  # EOS counts: a plain decode makes one call per id
    for first in (1, 3, 20):
        got, timings = speculated(model, sources, assistant=draft, num_assistant_tokens=first)
        assert got == plain
        assert 0 < timings.accepted < timings.drafted  # the draft is right often, not always
        # each call emits its accepted ids and the model's next, except after an accepted EOS (once per source)
        assert tokens <= len(timings.steps_s) + timings.accepted <= tokens + len(sources)
        assert len(timings.steps_s) < tokens / 2


def test_the_model_as_its_own_draft_accepts_everything(exported):
    model = open_export(exported("t5"), "cpu")
    sources = sources_of(model, "t5")
    plain = model.generate_ids(sources, config=GREEDY)
    got, timings = speculated(model, sources, assistant=open_export(exported("t5"), "cpu"))
    assert got == plain
    assert timings.accepted == timings.drafted == sum(len(r) + 1 for r in plain)  # every id, EOS included
    assert len(timings.steps_s) == len(sources)  # one decoder call per source: 20 drafted ids cover each


def test_translate_and_the_cli_speculate(exported):
    folder, draft = exported("t5"), exported("flan_t5")
    model = open_export(folder, "cpu")
    texts = [e.source for e in hf_fixtures.task_examples("t5")][:4]
    plain = model.translate(texts, config=GREEDY)
    assert model.translate(texts, config=GREEDY, assistant=open_export(draft, "cpu")) == plain
    assert model.translate(texts, config=GREEDY, prompt_lookup_num_tokens=4) == plain
    args = [a for t in texts for a in ("--text", t)]
    expected = run_cli_ok("generate", folder, *args, "--greedy").output
    assert run_cli_ok("generate", folder, *args, "--greedy", "--assistant", draft).output == expected
    assert run_cli_ok("generate", folder, *args, "--greedy", "--prompt-lookup", 5).output == expected


def test_a_draft_of_another_vocabulary_is_refused(exported, tiny_export):
    model = open_export(exported("t5"), "cpu")
    with pytest.raises(InputError, match="does not share this model's vocabulary .*tgt_vocab_size 64 != 512"):
        model.generate_ids(sources_of(model, "t5")[:1], config=GREEDY, assistant=open_export(tiny_export, "cpu"))
    result = run_cli("generate", exported("t5"), "--text", "to English: 12", "--greedy", "--assistant", tiny_export)
    assert result.exit_code != 0 and "does not share this model's vocabulary" in result.output
    assert "Traceback" not in result.output


def test_speculation_asks_for_greedy_on_the_cli(exported):
    result = run_cli("generate", exported("t5"), "--text", "to English: 12", "--num-beams", 2, "--prompt-lookup", 3)
    assert result.exit_code != 0 and "plain greedy decoding only" in result.output


def test_the_tiny_model_on_the_growing_and_the_static_cache(tiny_export, static_export):
    """The random tiny model repeats itself: prompt lookup accepts most drafts. Opened with its static cache
    (CUDA graphs' loop, uncaptured on CPU), plain greedy runs there and speculation on the growing cache."""
    rng = np.random.default_rng(3)
    sources = [rng.integers(4, 64, size=n).tolist() for n in (3, 7, 12, 5)]
    growing = open_export(tiny_export, "cpu")
    static = open_export(static_export, "cpu", RuntimeOptions(cuda_graph=True))
    assert static.static_cache is not None
    for model in (growing, static):
        plain = model.generate_ids(sources, config=GREEDY)
        got, timings = speculated(model, sources, prompt_lookup_num_tokens=5)
        assert got == plain
        assert timings.accepted > timings.drafted / 2 and len(timings.steps_s) < sum(len(r) + 1 for r in plain) / 2
        got, timings = speculated(model, sources, assistant=growing)  # the same weights: all accepted
        assert got == plain and timings.accepted == timings.drafted


def test_the_cache_rolls_back_to_the_kept_ids(tiny_export):
    """Feeding three ids and keeping one leaves the state where feeding that one id alone leaves it."""
    model = open_export(tiny_export, "cpu")
    src = model.source_input([[5, 9, 11, 3]])
    rolled, plain = model.growing.start(src), model.growing.start(src)
    rolled.feed(np.array([[model.config.bos_id, 7, 8]]))
    assert rolled.length == 3
    rolled.truncate(1)
    plain.step(np.array([model.config.bos_id]))
    assert rolled.length == plain.length == 1
    for token in (7, 12, 30):
        rolled.step(np.array([token]))
        plain.step(np.array([token]))
        np.testing.assert_allclose(rolled.logits(), plain.logits(), rtol=1e-5, atol=1e-5)
        assert rolled.next_ids().tolist() == plain.next_ids().tolist()


def test_position_ids_are_each_positions_greedy_id(tiny_export):
    model = open_export(tiny_export, "cpu")
    src = model.source_input([[5, 9, 11, 3]])
    fed, stepped = model.growing.start(src), model.growing.start(src)
    ids = [model.config.bos_id, 7, 8, 20]
    fed.feed(np.array([ids]))
    bias = np.zeros(model.config.tgt_vocab_size, dtype=np.float32)
    expected = []
    for token in ids:
        stepped.step(np.array([token]))
        expected.append(int(stepped.next_ids()[0]))
    assert fed.position_ids(bias)[0].tolist() == expected
    assert int(fed.next_ids()[0]) == expected[-1]


def test_an_export_without_earlier_logits_decodes_plainly(exported, caplog):
    folder = exported("t5")
    model = open_export(folder, "cpu")
    entry = model.manifest.graphs["decoder"]
    old = dataclasses.replace(entry.spec, outputs=tuple(t for t in entry.spec.outputs if t.name != EARLIER_LOGITS))
    graphs = {**model.manifest.graphs, "decoder": dataclasses.replace(entry, spec=old)}
    assert model.manifest.decoder_positions and not model.manifest.replace(graphs=graphs).decoder_positions
    model.growing.positions = False  # what open_export makes of such a manifest
    sources = sources_of(model, "t5")[:3]
    with caplog.at_level(logging.WARNING):
        got, timings = speculated(model, sources, prompt_lookup_num_tokens=3)
    assert got == model.generate_ids(sources, config=GREEDY) and timings.drafted == 0
    assert "decoding without speculation" in caplog.text


def test_prompt_lookup_finds_the_source_first_then_the_output():
    """transformers' PromptLookupCandidateGenerator: the longest n-gram (<= 2) ending the history, first
    match, its continuation cut before EOS; source ids count when the embedding is shared."""
    from tfm_export.config import PRESETS

    cfg = dataclasses.replace(PRESETS["tiny"], share_embeddings=True)
    lookup = PromptLookup(cfg)
    lookup.start(np.array([[10, 11, 12, 13, cfg.eos_id, cfg.src_pad_id]]))
    assert lookup.propose([cfg.bos_id, 11, 12], 2) == [13]  # cut before the source's EOS
    assert lookup.propose([cfg.bos_id, 10], 5) == [11, 12, 13]
    assert lookup.propose([cfg.bos_id, 20, 21, 22, 20, 21], 3) == [22, 20, 21]  # the output's own bigram
    assert lookup.propose([cfg.bos_id, 30, 31], 3) == []
    lookup = PromptLookup(dataclasses.replace(cfg, share_embeddings=False))  # source ids are not target ids
    lookup.start(np.array([[10, 11, 12]]))
    assert lookup.propose([cfg.bos_id, 10], 5) == []
