"""Speculative sampling (runtime.decode.speculative_sampling): drafted ids accepted with probability
min(1, p/q), a rejection drawing from norm(max(0, p - q)), keep the model's distribution.

- The rule alone, on a vocabulary of 6 ids with fixed p and q: every emitted position's histogram matches p
  (Pearson chi-square), for a draft q far from p and for one-hot drafts (prompt lookup); and the same check
  rejects the rule when its acceptance or its residual is broken (accepting every draft gives q), so it
  cannot pass vacuously.
- End to end on the trained t5 fixture drafted by flan_t5 (tests/fixtures/trained), top_k 5: seeded
  speculative sampling is reproducible; over many seeds the first ids' histogram matches plain sampling's
  (a two-sample chi-square); with top_k 1 the ids are greedy's, with a draft model and with prompt lookup.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import hf_fixtures
from helpers import run_cli, run_cli_ok
from tfm_export.runtime import open_export
from tfm_export.runtime.decode import speculative_sampling
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.decode.sampling import SplitMix64, draw
from tfm_export.runtime.options.generation import GREEDY

TRIALS = 20_000
P = np.array([[0.30, 0.25, 0.20, 0.10, 0.10, 0.05],  # the model's p at three positions
              [0.05, 0.05, 0.10, 0.20, 0.25, 0.35],
              [0.40, 0.01, 0.01, 0.01, 0.07, 0.50],
              [1 / 6] * 6])  # the bonus position
Q = np.array([[0.02, 0.03, 0.05, 0.10, 0.30, 0.50],  # a draft far from p
              [0.50, 0.20, 0.10, 0.10, 0.05, 0.05],
              [0.01, 0.90, 0.02, 0.02, 0.02, 0.03]])
PASS, DETECTED = 1e-3, 1e-6  # a right rule's p-value stays above PASS; a wrong one's falls below DETECTED


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square(df) > x), exactly (no scipy): Q(x; 1) = erfc(sqrt(x/2)), Q(x; 2) = exp(-x/2), and
    Q(x; k + 2) = Q(x; k) + (x/2)^(k/2) exp(-x/2) / Gamma(k/2 + 1)."""
    k, total = (2, math.exp(-x / 2)) if df % 2 == 0 else (1, math.erfc(math.sqrt(x / 2)))
    while k < df:
        total += math.exp((k / 2) * math.log(x / 2) - x / 2 - math.lgamma(k / 2 + 1)) if x > 0 else 0.0
        k += 2
    return min(1.0, total)


def test_chi2_sf_matches_known_quantiles():
    for x, df in ((3.841459, 1), (5.991465, 2), (11.070498, 5), (18.307038, 10)):  # the 5 % critical values
        assert chi2_sf(x, df) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(0.0, 4) == 1.0


def goodness(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square p-value of `counts` against the distribution `probs` (all expected counts >= 5
    here: 20 000 trials of probabilities >= 0.01)."""
    expected = counts.sum() * probs
    return chi2_sf(float(((counts - expected) ** 2 / expected).sum()), len(probs) - 1)


def histograms(seed: int, drafts) -> np.ndarray:
    """(positions, vocab) counts of the ids `accept` emits at each position over TRIALS steps; `drafts(g)`
    gives a step's draft and its q (None: one-hot)."""
    g, k = SplitMix64(seed), len(P) - 1
    counts = np.zeros((len(P), P.shape[1]))
    for _ in range(TRIALS):
        draft, q = drafts(g)
        emitted, n = speculative_sampling.accept(draft, P[:len(draft) + 1], q, g)
        assert len(emitted) == n + 1 and emitted[:n] == draft[:n]
        for position, token in enumerate(emitted):
            counts[position, token] += 1
    assert counts[0].sum() == TRIALS and counts[:k + 1].sum() >= TRIALS
    return counts


def sampled_draft(g: SplitMix64):
    """A draft model's step: d_i drawn from Q[i] (the positions' p and q do not depend on the ids before:
    each position's emitted id, given that the step reaches it, is then distributed as P[i])."""
    return [draw(q, g) for q in Q], Q


def p_values(counts: np.ndarray, positions: int) -> list[float]:
    return [goodness(counts[i], P[i]) for i in range(positions)]


def test_a_sampled_draft_keeps_the_models_distribution():
    counts = histograms(1, sampled_draft)
    assert min(p_values(counts, len(P))) > PASS
    assert 0 < counts[len(P) - 1].sum() < TRIALS  # the bonus position is reached, not always


@pytest.mark.parametrize("token", [0, 4, 5])  # the likeliest id, a middling one, the least likely
def test_a_one_hot_draft_keeps_the_models_distribution(token):
    """Prompt lookup: the draft is certain (q one-hot), d accepted with probability p(d)."""
    counts = histograms(2 + token, lambda g: ([token], None))
    assert min(p_values(counts, 2)) > PASS
    assert counts[0, token] / TRIALS == pytest.approx(P[0, token], abs=0.015)  # accepted at rate p(d)


def test_the_check_detects_a_wrong_rule(monkeypatch):
    """The same histograms and threshold fail the rule where it is wrong: accepting every draft (the output
    is then q's), and a rejection resampling from p instead of the residual (too much mass where q is)."""
    monkeypatch.setattr(speculative_sampling, "acceptance", lambda p_d, q_d: 1.0)
    counts = histograms(1, sampled_draft)
    assert goodness(counts[0], P[0]) < DETECTED and goodness(counts[0], Q[0]) > PASS  # q's distribution
    monkeypatch.undo()
    monkeypatch.setattr(speculative_sampling, "residual", lambda p, q: p)
    assert goodness(histograms(1, sampled_draft)[0], P[0]) < DETECTED
    assert goodness(histograms(2, lambda g: ([0], None))[0], P[0]) < DETECTED


# --- end to end: the trained t5 fixture, drafted by flan_t5 (same tokenizer and ids) ---------------------------

SAMPLING = dict(do_sample=True, top_k=5, temperature=1.0)


@pytest.fixture(scope="module")
def models(speculative_exports):
    return open_export(speculative_exports("t5"), "cpu"), open_export(speculative_exports("flan_t5"), "cpu")


def first_sources(model, count: int = 3, skip: int = 0) -> list[list[int]]:
    return [model.encode(e.source) for e in hf_fixtures.task_examples("t5")][skip:skip + count]


@pytest.mark.slow
def test_speculative_sampling_is_reproducible(models, speculative_exports):
    model, draft = models
    sources = first_sources(model)
    timings = DecodeTimings()
    first = model.generate_ids(sources, config=GREEDY, assistant=draft, seed=11, timings=timings, **SAMPLING)
    assert 0 < timings.accepted < timings.drafted  # the rule accepted drafts, and rejected some
    again = open_export(speculative_exports("t5"), "cpu").generate_ids(sources, config=GREEDY, assistant=draft, seed=11,
                                                                       **SAMPLING)
    assert again == first == model.generate_ids(sources, config=GREEDY, assistant=draft, seed=11, **SAMPLING)
    others = [model.generate_ids(sources, config=GREEDY, assistant=draft, seed=s, **SAMPLING) for s in (12, 13)]
    assert any(o != first for o in others)  # the seed matters
    # generate: num_return_sequences samples per source, row r drawing from row r's generator, so the second
    # source decoded alone as rows 3.. of the call (a server's row_offset) gets the same samples
    rows = model.generate(sources[:2], config=GREEDY, assistant=draft, seed=11, num_return_sequences=3, **SAMPLING)
    alone = model.generate(sources[1:2], config=GREEDY, assistant=draft, seed=11, num_return_sequences=3,
                           row_offset=3, **SAMPLING)
    assert [h.ids for h in alone[0]] == [h.ids for h in rows[1]] and len(rows[0]) == 3
    best = model.generate_ids(sources[:2], config=GREEDY, assistant=draft, seed=11, num_return_sequences=3,
                              **SAMPLING)
    assert best == [rows[0][0].ids, rows[1][0].ids]  # generate_ids: each source's first sample, as plain sampling


def homogeneity(a: list[tuple], b: list[tuple]) -> float:
    """The two-sample chi-square p-value that `a` and `b` come from one distribution; outcomes expected fewer
    than 5 times in either sample pooled into one category."""
    keys = sorted(set(a) | set(b))
    table = np.array([[a.count(k) for k in keys], [b.count(k) for k in keys]], dtype=np.float64)
    expected = table.sum(axis=0) * table.sum(axis=1, keepdims=True) / table.sum()
    rare = expected.min(axis=0) < 5
    table = np.concatenate([table[:, ~rare], table[:, rare].sum(axis=1, keepdims=True)], axis=1)
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=0) * table.sum(axis=1, keepdims=True) / table.sum()
    return chi2_sf(float(((table - expected) ** 2 / expected).sum()), table.shape[1] - 1)


@pytest.mark.slow
def test_speculative_sampling_matches_plain_samplings_distribution(models):
    """Over 150 seeds, the first three ids of a source whose ids are uncertain ("to German: 4447": p at the first
    position 0.36, 0.32, 0.16, 0.09, 0.07 under top_k 5, and the draft's top 5 is another set): the histogram of (id 1, id 2) pairs and of id 3 under
    speculative sampling with the draft (which drafts 2 ids at the first step: both checked by the rule)
    against plain sampling's. The same check tells plain sampling at top_k 5 from top_k 2 (its power)."""
    model, draft = models
    source = first_sources(model, 1, skip=1)
    seeds = range(150)
    options = dict(config=GREEDY, max_new_tokens=3, **SAMPLING)
    plain = [tuple(model.generate_ids(source, seed=s, **options)[0]) for s in seeds]
    spec = [tuple(model.generate_ids(source, seed=s, assistant=draft, **options)[0]) for s in seeds]
    assert homogeneity([r[:2] for r in plain], [r[:2] for r in spec]) > PASS
    assert homogeneity([r[2:3] for r in plain], [r[2:3] for r in spec]) > PASS
    narrow = [tuple(model.generate_ids(source, seed=s, **{**options, "top_k": 2})[0]) for s in seeds]
    assert homogeneity([r[:2] for r in plain], [r[:2] for r in narrow]) < PASS


@pytest.mark.slow
def test_top_k_1_is_greedy(models):
    """top_k 1 leaves p one-hot at the argmax (and the draft's q at its own): a draft is kept exactly where
    greedy would pick it, and the residual is the argmax; the ids are greedy's, id for id."""
    model, draft = models
    sources = first_sources(model, 6)
    greedy = model.generate_ids(sources, config=GREEDY)
    timings = DecodeTimings()
    got = model.generate_ids(sources, config=GREEDY, do_sample=True, top_k=1, seed=5, timings=timings,
                             assistant=draft)
    assert got == greedy and 0 < timings.accepted < timings.drafted


def tiny_sources() -> list[list[int]]:
    rng = np.random.default_rng(3)
    return [rng.integers(4, 64, size=n).tolist() for n in (3, 7, 12, 5)]


def test_prompt_lookup_sampling_on_the_tiny_model(tiny_export):
    """The random tiny model repeats itself, so n-gram drafts are found: with top_k 1 the ids are greedy's;
    with top_k 5 a seeded decode is reproducible and drafts are accepted (with probability p(d)) and rejected."""
    model, sources = open_export(tiny_export, "cpu"), tiny_sources()
    greedy = model.generate_ids(sources, config=GREEDY)
    timings = DecodeTimings()
    got = model.generate_ids(sources, config=GREEDY, do_sample=True, top_k=1, seed=3, prompt_lookup_num_tokens=4,
                             timings=timings)
    assert got == greedy and timings.accepted > 0
    timings = DecodeTimings()
    options = dict(config=GREEDY, prompt_lookup_num_tokens=4, do_sample=True, top_k=5, seed=9)
    first = model.generate_ids(sources, timings=timings, **options)
    assert 0 < timings.accepted < timings.drafted
    assert open_export(tiny_export, "cpu").generate_ids(sources, **options) == first
    assert model.generate_ids(sources, **{**options, "seed": 10}) != first


@pytest.mark.slow
def test_the_cli_samples_speculatively(tiny_export):
    """`generate --sample --prompt-lookup N`: reproducible with --seed, greedy's output at --top-k 1, and beam
    search with the flag refused in one line."""
    ids = [a for src in tiny_sources() for a in ("--ids", " ".join(map(str, src)))]
    sampled = [*ids, "--sample", "--top-k", 5, "--seed", 4, "--prompt-lookup", 4, "--json"]
    first = run_cli_ok("generate", tiny_export, *sampled).output
    assert run_cli_ok("generate", tiny_export, *sampled).output == first
    greedy = run_cli_ok("generate", tiny_export, *ids, "--greedy", "--json").output
    top1 = [json.loads(line) for line in run_cli_ok("generate", tiny_export, *ids, "--sample", "--top-k", 1,
                                                     "--prompt-lookup", 4, "--json").output.splitlines()]
    assert all(math.isfinite(row.pop("score")) for row in top1)  # a real score now (it was nan)
    assert top1 == [json.loads(line) for line in greedy.splitlines()]
    result = run_cli("generate", tiny_export, *ids, "--num-beams", 2, "--prompt-lookup", 4)
    assert result.exit_code != 0 and "greedy decoding and sampling only" in result.output
    assert "Traceback" not in result.output
