"""Speculative greedy decoding (runtime.decode.speculative): with prompt lookup or a draft export, the ids are
plain greedy decoding's, id for id, on the trained fixtures (tests/fixtures/trained) and the tiny model; drafts
are accepted (fewer decoder calls than ids), the cache rolls back to the kept ids, a draft of another vocabulary
is refused, and an export made before earlier_logits decodes without speculation. The draft-length policy
(runtime.decode.draft_length): the schedule grows a right proposer's drafts to their cap, and a proposer that
does not pay is switched off after a few steps (at most a few percent over plain greedy), the ids unchanged."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time

import numpy as np
import pytest

import hf_fixtures
from helpers import run_cli, run_cli_ok
from tfm_export.errors import InputError
from tfm_export.graph_io import EARLIER_LOGITS
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.decode import draft_length, speculative, speculative_sampling
from tfm_export.runtime.decode.draft_length import DraftLength
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.decode.proposers import PromptLookup
from tfm_export.runtime.options.generation import GREEDY

pytestmark = pytest.mark.slow


@pytest.fixture
def schedule_only(monkeypatch):
    """transformers' schedule without the switch-off: the decoder calls then do not depend on timing."""
    monkeypatch.setattr(speculative, "DraftLength", functools.partial(DraftLength, switch_off=False))


def sources_of(model, family: str) -> list[list[int]]:
    return [model.encode(e.source) for e in hf_fixtures.task_examples(family)]


def speculated(model, sources, **options) -> tuple[list[list[int]], DecodeTimings]:
    timings = DecodeTimings()
    return model.generate_ids(sources, config=GREEDY, timings=timings, **options), timings


@pytest.mark.parametrize("family", ["t5", "marian"])
@pytest.mark.parametrize("lookup", [1, 3, 10])
def test_prompt_lookup_is_greedy(speculative_exports, family, lookup, monkeypatch):
    model = open_export(speculative_exports(family), "cpu")
    sources = sources_of(model, family)
    plain = model.generate_ids(sources, config=GREEDY)
    for switch_off in (True, False):  # the adaptive length with and without the switch-off
        monkeypatch.setattr(speculative, "DraftLength", functools.partial(DraftLength, switch_off=switch_off))
        got, timings = speculated(open_export(speculative_exports(family), "cpu"), sources,
                                  prompt_lookup_num_tokens=lookup)
        assert got == plain
        assert len(timings.steps_s) <= sum(len(r) + 1 for r in plain)  # a call per emitted id at most
        assert 0 <= timings.accepted <= timings.drafted


def test_a_draft_export_is_greedy_and_saves_calls(speculative_exports, schedule_only):
    """t5 drafted by flan_t5 (another model of the same tokenizer): the same ids in fewer decoder calls."""
    model, draft = open_export(speculative_exports("t5"), "cpu"), open_export(speculative_exports("flan_t5"), "cpu")
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


def test_the_model_as_its_own_draft_accepts_everything(speculative_exports, schedule_only):
    model = open_export(speculative_exports("t5"), "cpu")
    sources = sources_of(model, "t5")
    plain = model.generate_ids(sources, config=GREEDY)
    got, timings = speculated(model, sources, assistant=open_export(speculative_exports("t5"), "cpu"))
    assert got == plain
    assert timings.accepted == timings.drafted == sum(len(r) + 1 for r in plain)  # every id, EOS included
    assert len(timings.steps_s) == len(sources)  # one decoder call per source: 20 drafted ids cover each


def test_a_forced_language_id_rides_with_the_first_check(speculative_exports, schedule_only):
    """NLLB's forced target language (forced_bos_token_id) is known without the model: plain greedy spends a
    call on it, a speculative decode feeds it with the first draft. Drafted by itself, every source of the
    trained nllb fixture takes one decoder call; prompt lookup and a budget of one id keep plain's ids too."""
    folder = speculative_exports("nllb")
    model, tokenizer = open_export(folder, "cpu"), hf_fixtures.hf_tokenizer(hf_fixtures.trained_folder("nllb"))
    tokenizer.src_lang = hf_fixtures.LANGS["nllb"][0]
    sources = [tokenizer(e.source)["input_ids"] for e in hf_fixtures.task_examples("nllb")[:8]]
    german = tokenizer.convert_tokens_to_ids(hf_fixtures.lang_token("nllb", hf_fixtures.lang_code("nllb", "de")))
    config = GREEDY.replace(forced_bos_token_id=german)
    plain = model.generate_ids(sources, config=config)
    assert all(row[0] == german and len(row) > 2 for row in plain)
    timings = DecodeTimings()
    got = model.generate_ids(sources, config=config, timings=timings, assistant=open_export(folder, "cpu"))
    assert got == plain
    assert len(timings.steps_s) == len(sources)  # the forced id, the drafted translation and EOS: one call
    assert timings.accepted == timings.drafted == sum(len(r) for r in plain)  # every id after the forced one
    assert model.generate_ids(sources, config=config, prompt_lookup_num_tokens=3) == plain
    one = config.replace(max_new_tokens=1)
    assert model.generate_ids(sources, config=one, prompt_lookup_num_tokens=3) == [[german]] * len(sources)


def test_a_draft_export_with_the_switch_off_is_greedy(speculative_exports):
    """The policy as it runs by default (timed online): the ids stay greedy's, the first step is plain (the
    figure to beat), and a second call on the same runner goes on with the first one's policy."""
    model, draft = open_export(speculative_exports("t5"), "cpu"), open_export(speculative_exports("flan_t5"), "cpu")
    sources = sources_of(model, "t5")
    plain = model.generate_ids(sources, config=GREEDY)
    for _ in range(2):
        got, timings = speculated(model, sources, assistant=draft, num_assistant_tokens=5)
        assert got == plain and timings.accepted <= timings.drafted
    (policy,) = model.draft_lengths.values()
    assert policy.plain.count > 0 and policy.start == 5


def test_translate_and_the_cli_speculate(speculative_exports):
    folder, draft = speculative_exports("t5"), speculative_exports("flan_t5")
    model = open_export(folder, "cpu")
    texts = [e.source for e in hf_fixtures.task_examples("t5")][:4]
    plain = model.translate(texts, config=GREEDY)
    assert model.translate(texts, config=GREEDY, assistant=open_export(draft, "cpu")) == plain
    assert model.translate(texts, config=GREEDY, prompt_lookup_num_tokens=4) == plain
    args = [a for t in texts for a in ("--text", t)]
    expected = run_cli_ok("generate", folder, *args, "--greedy").output
    assert run_cli_ok("generate", folder, *args, "--greedy", "--assistant", draft).output == expected
    assert run_cli_ok("generate", folder, *args, "--greedy", "--prompt-lookup", 5).output == expected


def test_a_draft_of_another_vocabulary_is_refused(speculative_exports, tiny_export):
    model = open_export(speculative_exports("t5"), "cpu")
    with pytest.raises(InputError, match="does not share this model's vocabulary .*tgt_vocab_size 64 != 512"):
        model.generate_ids(sources_of(model, "t5")[:1], config=GREEDY, assistant=open_export(tiny_export, "cpu"))
    result = run_cli("generate", speculative_exports("t5"), "--text", "to English: 12", "--greedy", "--assistant",
                     tiny_export)
    assert result.exit_code != 0 and "does not share this model's vocabulary" in result.output
    assert "Traceback" not in result.output


def test_speculation_asks_for_greedy_on_the_cli(speculative_exports):
    result = run_cli("generate", speculative_exports("t5"), "--text", "to English: 12", "--num-beams", 2,
                     "--prompt-lookup", 3)
    assert result.exit_code != 0 and "greedy decoding and sampling only" in result.output


def test_the_tiny_model_on_the_growing_and_the_static_cache(tiny_export, static_export, schedule_only):
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


def test_an_export_without_earlier_logits_decodes_plainly(speculative_exports, caplog):
    folder = speculative_exports("t5")
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


def drive(policy: DraftLength, steps: int, cost, accepts) -> tuple[float, int]:
    """Run `policy` over `steps` steps of a simulated decode: a plain step takes 1 s for one id, a step that
    drafts k ids takes cost(k) s and accepts accepts(k) of them. Returns (seconds, ids emitted)."""
    seconds = ids = 0
    for _ in range(steps):
        k = policy.length(room=1000)
        taken, accepted = (cost(k), accepts(k)) if k else (1.0, 0)
        policy.record(k, accepted, accepted + 1, taken)
        seconds, ids = seconds + taken, ids + accepted + 1
    return seconds, ids


def test_a_proposer_that_is_always_wrong_is_switched_off():
    """Every draft rejected, each speculative step 30 % dearer than a plain one: after the first plain steps
    and TRIAL speculative ones speculation pauses, its retries ever rarer; in all, within 5 % of plain."""
    policy = DraftLength(10)
    # PLAIN_FIRST plain steps, then speculative and plain ones alternate: the TRIAL-th speculative one decides
    drive(policy, draft_length.PLAIN_FIRST + 2 * draft_length.TRIAL - 1, cost=lambda k: 1.3, accepts=lambda k: 0)
    assert policy.pauses == 1 and policy.off == draft_length.FIRST_PAUSE and policy.length(1000) == 0
    assert policy.k == 4  # 10, then -1 twice (the schedule), then halved at the switch-off
    seconds, ids = drive(policy, 3000, cost=lambda k: 1.3, accepts=lambda k: 0)
    assert policy.pauses > 4 and policy.pause == draft_length.MAX_PAUSE and policy.k == 1
    assert seconds / ids < 1.05  # plain greedy: 1 s per id


def test_a_proposer_that_is_always_right_grows_to_its_cap():
    """Every draft accepted, a check of k ids costing 1 + 0.1 k steps (a memory-bound step, as on a GPU):
    the length grows by 2 a step up to its cap and speculation stays on."""
    policy = DraftLength(3, cap=10)
    seen = []
    for _ in range(12):
        seen.append(policy.length(1000))
        policy.record(seen[-1], seen[-1], seen[-1] + 1, 1.0 + 0.1 * seen[-1] if seen[-1] else 1.0)
    # the first steps are plain (the figure to beat), then plain and speculative ones alternate
    assert seen == [0, 0, 0, 3, 0, 5, 0, 7, 0, 9, 0, 10]
    drive(policy, 2 * draft_length.WINDOW, cost=lambda k: 1 + 0.1 * k, accepts=lambda k: k)
    assert policy.plain.count == draft_length.WINDOW
    while policy.since_plain:  # up to the next plain step
        drive(policy, 1, cost=lambda k: 1 + 0.1 * k, accepts=lambda k: k)
    refresh = draft_length.REFRESH + 1  # then one plain step in REFRESH + 1 keeps the plain figure current
    seconds, ids = drive(policy, 100 * refresh, cost=lambda k: 1 + 0.1 * k, accepts=lambda k: k)
    assert policy.pauses == 0 and policy.k == 10 and ids == 100 * (draft_length.REFRESH * 11 + 1)
    assert seconds / ids < 0.2


def test_right_drafts_that_cost_too_much_are_switched_off_too():
    """Every draft accepted, but a check of k ids costs k + 1 steps and drafting 0.1 a step (a compute-bound
    CPU with a draft model): no id is cheaper than a plain step's, and speculation pauses."""
    policy = DraftLength(4)
    seconds, ids = drive(policy, 2000, cost=lambda k: 1.1 * k + 1, accepts=lambda k: k)
    assert policy.pauses > 4 and seconds / ids < 1.05


def test_a_preempted_step_does_not_decide():
    """One step in 16 of either kind takes 50x its time (another process had the CPU): a proposer that pays
    stays on, one that costs 30 % more per id is still switched off."""
    for right, expected_on in ((True, True), (False, False)):
        policy, n = DraftLength(4, cap=8), 0
        for _ in range(400):
            k, n = policy.length(1000), n + 1
            accepted = k if right else 0
            seconds = (1.0 + 0.1 * k if right else 1.3) if k else 1.0
            policy.record(k, accepted, accepted + 1, seconds * (50 if n % 16 == 0 else 1))
        assert (policy.pauses == 0) is expected_on, policy


def test_without_the_switch_off_the_schedule_alone_runs():
    policy = DraftLength(4, switch_off=False)
    assert policy.length(1000) == 4 and policy.length(2) == 2  # no plain step first
    policy.record(4, 1, 2, 9.0)
    policy.record(3, 3, 4, 9.0)
    assert policy.k == 5 and policy.pauses == 0 and policy.length(1000) == 5
    policy.record(0, 0, 1, 1.0)  # nothing proposed: no change
    assert policy.k == 5


class SlowWrong:
    """A proposer whose drafts take 20 ms each (the tiny model's step: well under 1 ms), always the same id."""

    lock = contextlib.nullcontext()

    def __init__(self, token: int):
        self.token, self.calls = token, 0

    def start(self, src):
        pass

    def propose(self, history, k):
        self.calls += 1
        time.sleep(0.02)
        return [self.token] * k

    def close(self):
        pass


def test_a_slow_proposer_is_switched_off_in_a_real_decode(tiny_export):
    """On the tiny model a proposer that spends 20 ms a draft never pays: after TRIAL speculative steps it
    pauses, retried ever more rarely, and the ids are greedy's."""
    model = open_export(tiny_export, "cpu")
    rng = np.random.default_rng(4)
    sources = [rng.integers(4, 64, size=n).tolist() for n in (6, 9, 4)]
    plain = model.generate_ids(sources, max_new_tokens=40, config=GREEDY)
    policy, proposer = DraftLength(4), SlowWrong(model.config.bos_id)
    got = [speculative.speculate(model.checking_cache(), model.source_input([src]), proposer, policy, 40,
                                 model.config) for src in sources]
    assert got == plain
    steps = sum(len(r) + 1 for r in plain)
    assert policy.pauses >= 1 and proposer.calls <= draft_length.TRIAL * (1 + policy.pauses)
    assert proposer.calls < steps / 4


def speculated_hypotheses(model, sources, config, assistant=None) -> list:
    """Each source's speculative Hypothesis (runtime.decode.speculative.scored; sampling:
    speculative_sampling.sample_hypotheses), on the model's checking cache."""
    cache, tokenizer, steps = model.checking_cache(), model.manifest.tokenizer, model.steps_for(config)
    inputs = [model.source_input([s]) for s in sources]
    if config.do_sample:
        return speculative_sampling.sample_hypotheses(cache, inputs, config, model.config, tokenizer, assistant,
                                                      steps)
    out = []
    for src in inputs:
        proposer, policy = speculative.proposal(config, model.config, tokenizer, assistant)
        out.append(speculative.scored(cache, src, proposer, policy, steps, model.config, config))
    return out


@pytest.mark.parametrize("which", ["t5", "bundled"])
def test_speculative_hypotheses_carry_plain_greedys_score(speculative_exports, bundled_export, which):
    """Prompt lookup and a draft (flan_t5 for t5; the bundled model drafts for itself), greedy plain and under a
    repetition penalty, and sampling at top_k 1 (greedy's ids): each hypothesis has plain greedy's ids and its
    score (TokenPicker's sum of log p of the processed scores), not nan."""
    folder, draft_folder = (speculative_exports("t5"), speculative_exports("flan_t5")) if which == "t5" \
        else (bundled_export,) * 2
    model, draft = open_export(folder, "cpu"), open_export(draft_folder, "cpu")
    if which == "t5":
        sources = sources_of(model, "t5")
    else:
        sources = [model.encode(t) for t in ("12", "345", "1001", "99999")]
    for base in (GREEDY, GREEDY.replace(repetition_penalty=1.3)):
        plain = [h[0] for h in model.generate(sources, config=base)]
        assert all(np.isfinite(h.score) and h.score < 0 for h in plain)
        for config, assistant in ((base.replace(prompt_lookup_num_tokens=3), None),
                                  (base.replace(num_assistant_tokens=4), draft),
                                  (base.replace(do_sample=True, top_k=1, seed=3, prompt_lookup_num_tokens=3), None),
                                  (base.replace(do_sample=True, top_k=1, seed=3), draft)):
            got = speculated_hypotheses(model, sources, config, assistant)
            assert [h.ids for h in got] == [h.ids for h in plain]
            np.testing.assert_allclose([h.score for h in got], [h.score for h in plain], rtol=1e-5, atol=1e-5)



def test_generate_speculates_with_plain_greedys_score(speculative_exports):
    model, draft = open_export(speculative_exports("t5"), "cpu"), open_export(speculative_exports("flan_t5"), "cpu")
    sources = sources_of(model, "t5")
    plain = [h[0] for h in model.generate(sources, config=GREEDY)]
    for options in ({"prompt_lookup_num_tokens": 3}, {"assistant": draft},
                    {"prompt_lookup_num_tokens": 3, "do_sample": True, "top_k": 1}):
        timings = DecodeTimings()
        got = [h[0] for h in model.generate(sources, config=GREEDY, timings=timings, **options)]
        assert timings.drafted > 0  # it speculated
        assert [h.ids for h in got] == [h.ids for h in plain]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in plain], rtol=1e-5, atol=1e-5)
