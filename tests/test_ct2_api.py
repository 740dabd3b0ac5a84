"""CTranslate2's decoding API on the trained Marian and BART fixtures (tests/fixtures/README.md), against
transformers: `target_prefix` equals `generate(decoder_input_ids=[decoder start, *prefix])` (greedy and beam-4,
the folder's processors), `score` equals the per-token log-probabilities of transformers' loss of the labels,
and `return_alternatives` are the prefix, each of the position's best tokens, and its greedy continuation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from hf_fixtures import hf_model, hf_tokenizer, task_examples, trained_folder  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
FAMILIES = ("marian", "bart")
STEPS = 40  # max_new_tokens on both sides: every answer of the task is shorter


@pytest.fixture(scope="module")
def pair(trained_export):
    """family -> (the opened export, transformers' model, its tokenizer), each made once."""
    made = {}

    def get(family):
        if family not in made:
            folder = trained_folder(family)
            made[family] = open_export(trained_export(family), "cpu"), hf_model(folder), hf_tokenizer(folder)
        return made[family]

    return get


def sources_of(runtime, family, count=8):
    examples = task_examples(family, count)
    return [e.source for e in examples], [runtime.encode(e.source) for e in examples], [e.target for e in examples]


def with_forced(runtime, prefix) -> list[int]:
    """The prefix as decoded: the folder's forced first token (BART's <s>) in front unless it starts with it."""
    forced = runtime.generation.forced_bos_token_id
    return prefix if forced is None or prefix[:1] == [forced] else [forced, *prefix]


def hf_completion(runtime, model, tokenizer, text, prefix, **settings) -> list[int]:
    """transformers' ids after the decoder start for decoder_input_ids = start + (forced first) + prefix, to EOS."""
    full = with_forced(runtime, prefix)
    decoder_input_ids = torch.tensor([[runtime.config.bos_id, *full]])
    with torch.no_grad():
        out = model.generate(**tokenizer([text], return_tensors="pt"), decoder_input_ids=decoder_input_ids,
                             max_new_tokens=STEPS, min_new_tokens=runtime.generation.min_new_tokens, **settings)
    row, eos = out[0, 1:].tolist(), runtime.config.eos_id
    generated = row[len(full):]
    return row[: len(full) + generated.index(eos)] if eos in generated else row


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("beams", [1, 4])
def test_target_prefix_equals_transformers_decoder_input_ids(family, beams, pair):
    """One batch, prefixes of 0-3 tokens taken from another source's translation (the model must follow a
    prefix it would not choose), decoded in groups of equal length: each row equals transformers'."""
    runtime, model, tokenizer = pair(family)
    texts, srcs, _ = sources_of(runtime, family)
    plain = runtime.generate(srcs, num_beams=beams, max_new_tokens=STEPS)
    prefixes = [plain[(i + 1) % len(srcs)][0].ids[: i % 4] for i in range(len(srcs))]
    ours = runtime.generate(srcs, target_prefix=prefixes, num_beams=beams, max_new_tokens=STEPS)
    changed = 0
    for text, prefix, row, before in zip(texts, prefixes, ours, plain):
        full = with_forced(runtime, prefix)
        assert row[0].ids[: len(full)] == full
        assert row[0].ids == hf_completion(runtime, model, tokenizer, text, prefix, num_beams=beams)
        changed += row[0].ids != before[0].ids
    assert changed >= 3  # the prefixes steered the translations


@pytest.mark.parametrize("family", FAMILIES)
def test_score_equals_transformers_loss(family, pair):
    runtime, model, tokenizer = pair(family)
    texts, _, targets = sources_of(runtime, family)
    targets[1] = targets[0]  # a wrong translation scores too (lower)
    batch = tokenizer(texts, text_target=targets, return_tensors="pt", padding=True)
    labels, pad, eos = batch["labels"], tokenizer.pad_token_id, runtime.config.eos_id
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=labels.masked_fill(labels == pad, -100))
    theirs = torch.log_softmax(out.logits.double(), -1)
    rows = [row[: row.index(eos) + 1] for row in labels.tolist()]  # each label row up to its EOS
    srcs = [row[: int(m.sum())] for row, m in zip(batch["input_ids"].tolist(), batch["attention_mask"])]
    results = runtime.score(srcs, [row[:-1] for row in rows])
    for r, (row, result) in enumerate(zip(rows, results)):
        assert result.tokens == row
        expected = theirs[r, torch.arange(len(row)), torch.tensor(row)].numpy()
        np.testing.assert_allclose(result.log_probs, expected, atol=1e-5)
        assert result.score == pytest.approx(float(expected.sum()), abs=1e-4)
    # transformers' loss is minus the mean over every label token of the batch
    assert -np.mean([p for r in results for p in r.log_probs]) == pytest.approx(out.loss.item(), abs=1e-5)
    assert results[1].normalized < results[0].normalized
    # text in: the same ids (BART's target gets its forced <s> first, as its labels have it)
    assert [r.tokens for r in runtime.score(texts[:3], targets[:3])] == rows[:3]


@pytest.mark.parametrize("family", FAMILIES)
def test_alternatives_branch_after_the_prefix(family, pair):
    """Each alternative is the prefix, one of the position's 4 best tokens (all different, best first), then
    exactly what greedy decoding with that token appended to the prefix gives (transformers')."""
    runtime, model, tokenizer = pair(family)
    texts, srcs, _ = sources_of(runtime, family, 4)
    greedy = runtime.generate(srcs, num_beams=1, max_new_tokens=STEPS)
    prefixes = [greedy[i][0].ids[: 1 + i % 2] for i in range(len(srcs))]
    rows = runtime.generate(srcs, target_prefix=prefixes, return_alternatives=True, num_return_sequences=4,
                            max_new_tokens=STEPS)
    for text, prefix, row in zip(texts, prefixes, rows):
        full = with_forced(runtime, prefix)
        assert len(row) == 4 and all(h.ids[: len(full)] == full for h in row)
        firsts = [h.ids[len(full)] for h in row if len(h.ids) > len(full)]  # (an alternative may be EOS: ended)
        assert len(set(firsts)) == len(firsts) >= 3
        for h in (h for h in row if len(h.ids) > len(full)):
            assert h.ids == hf_completion(runtime, model, tokenizer, text, h.ids[: len(full) + 1], num_beams=1)
        # the first alternative is the best token: greedy decoding with the prefix
        assert row[0].ids == hf_completion(runtime, model, tokenizer, text, prefix, num_beams=1)


def test_text_api_and_bad_input(pair):
    runtime, _, _ = pair("marian")
    texts, srcs, targets = sources_of(runtime, "marian", 3)
    prefix = targets[1].split()[0] if " " in targets[1] else targets[1][:4]
    out = runtime.translate(texts, target_prefix=[prefix, "", ""], max_new_tokens=STEPS)
    assert out[0].startswith(prefix) and len(out) == 3
    ids = runtime.generate(srcs, target_prefix=[runtime.encode_target(prefix), [], []], max_new_tokens=STEPS)
    assert out == [runtime.tokenizer.decode(r[0].ids) for r in ids]
    alternatives = runtime.translate(texts, return_alternatives=True, num_hypotheses=3, max_new_tokens=STEPS)
    assert [len(a) for a in alternatives] == [3, 3, 3] and all(len(set(a)) == 3 for a in alternatives)
    assert [a[0] for a in alternatives] == runtime.translate(texts, num_beams=1, max_new_tokens=STEPS)
    nbest = runtime.translate(texts, num_hypotheses=2, max_new_tokens=STEPS)
    assert [n[0] for n in nbest] == runtime.translate(texts, max_new_tokens=STEPS)  # the folder's 4 beams
    with pytest.raises(InputError, match="out of range"):
        runtime.generate(srcs[:1], target_prefix=[[10**6]])
    with pytest.raises(InputError, match="prefixes for 3 sources"):
        runtime.generate(srcs, target_prefix=[[1]])
    with pytest.raises(InputError, match="one target per source"):
        runtime.score(srcs, [[1]])


# --- the vocabulary shortlist (CTranslate2's vmap) ---------------------------------------------------------

@pytest.fixture(scope="module")
def vmap(pair):
    """A map from a third of the Marian fixture's training pairs (never the held-out numbers)."""
    from hf_fixtures import TARGETS, example, split_numbers
    from tfm_export.runtime.decode.vmap import VocabularyMap

    runtime, _, _ = pair("marian")
    pairs = [example("marian", n, lang) for n in split_numbers()[0][::3] for lang in TARGETS["marian"]]
    return VocabularyMap.from_pairs([runtime.encode(p.source) for p in pairs],
                                    [runtime.encode_target(p.target) for p in pairs])


@pytest.mark.parametrize("family", FAMILIES)
def test_a_shortlist_of_every_id_is_the_full_head(family, pair):
    """The rewritten decoder (the head's rows gathered by the shortlist input) gives the full head's ids and scores."""
    runtime, _, _ = pair(family)
    _, srcs, _ = sources_of(runtime, family)
    every = runtime.with_shortlist(range(runtime.config.tgt_vocab_size))
    for beams in (1, 4):
        full, short = runtime.generate(srcs, num_beams=beams), every.generate(srcs, num_beams=beams)
        assert [h.ids for row in short for h in row] == [h.ids for row in full for h in row]
        np.testing.assert_allclose([h.score for row in short for h in row], [h.score for row in full for h in row],
                                   atol=1e-5)


def test_shortlist_under_a_vocabulary_map(pair, vmap, tmp_path):
    """Per sentence its shortlist (about a third of the vocabulary): most translations equal the full head's,
    chrF against them stays near 100, and masking the full logits to the same ids gives the same tokens."""
    import sacrebleu

    from tfm_export.runtime.exported import Shortlisted
    from tfm_export.runtime.decode.vmap import VocabularyMap
    from tfm_export.runtime.states.shortlist import MaskedCache

    runtime, _, _ = pair("marian")
    examples = task_examples("marian", 100)
    texts, refs = [e.source for e in examples], [e.target for e in examples]
    runtime.vmap = vmap
    try:
        full = runtime.translate(texts, num_beams=1)
        short = [runtime.translate([t], num_beams=1, use_vmap=True)[0] for t in texts]
    finally:
        runtime.vmap = None
    sizes = [len(vmap.shortlist([runtime.encode(t)])) for t in texts]
    assert np.mean(sizes) < 0.5 * runtime.config.tgt_vocab_size
    assert np.mean([a == b for a, b in zip(full, short)]) >= 0.95
    assert sacrebleu.corpus_chrf(short, [full]).score >= 99.0
    assert abs(sacrebleu.corpus_chrf(short, [refs]).score - sacrebleu.corpus_chrf(full, [refs]).score) < 1.0
    srcs = [runtime.encode(t) for t in texts[:10]]
    ids = vmap.shortlist(srcs)
    gathered = runtime.with_shortlist(ids)
    masked = Shortlisted(runtime, MaskedCache(runtime.growing, gathered.shortlist_cache.ids,
                                              runtime.config.tgt_vocab_size, runtime.config.suppress_ids))
    for beams in (1, 4):
        assert [h.ids for h in gathered.generate(srcs, num_beams=beams)[0]] == \
            [h.ids for h in masked.generate(srcs, num_beams=beams)[0]]
    vmap.save(tmp_path / "vmap.json")
    assert VocabularyMap.load(tmp_path / "vmap.json") == vmap
    with pytest.raises(InputError, match="not a vocabulary map"):
        VocabularyMap.load(tmp_path / "missing.json")
    with pytest.raises(InputError, match="needs a vocabulary map"):
        runtime.translate(texts[:1], use_vmap=True)


def test_ct2_vmap_text_file(pair, tmp_path):
    """CTranslate2's format: `source<TAB>targets`, an empty source for the fixed set; tokens by the tokenizer."""
    from tfm_export.runtime.decode.vmap import VocabularyMap

    runtime, _, _ = pair("marian")
    tokenizer = runtime.tokenizer
    (tmp_path / "vmap.txt").write_text("\t</s> ▁six\n7\t▁seven sieben nosuch\n", encoding="utf-8")
    vmap = VocabularyMap.load_ct2(tmp_path / "vmap.txt", tokenizer.encoder.get, tokenizer.encoder.get)
    enc = tokenizer.encoder
    assert vmap.fixed == tuple(sorted({enc["</s>"], enc["▁six"]}))
    assert vmap.candidates == {enc["7"]: tuple(sorted({enc["▁seven"], enc["sieben"]}))}  # unknown tokens dropped


# --- the server ---------------------------------------------------------------------------------------------

def test_the_server_takes_prefixes_alternatives_and_scores(pair, trained_export):
    """/v1/translate's target_prefix and return_alternatives, and /v1/score, answer what the Python API does;
    bad requests are one-line 4xx JSON errors."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tfm_export.serve.app import create_app
    from tfm_export.serve.engine import ServeSettings

    runtime, _, _ = pair("marian")
    texts, srcs, targets = sources_of(runtime, "marian", 3)
    with TestClient(create_app(ServeSettings(str(trained_export("marian"))))) as client:
        body = {"texts": texts, "target_prefix": ["six", "", [runtime.encode_target("vier")[0]]],
                "max_new_tokens": STEPS}
        answer = client.post("/v1/translate", json=body)
        assert answer.status_code == 200, answer.text
        expected = runtime.translate(texts, target_prefix=["six", "", runtime.encode_target("vier")[:1]],
                                     max_new_tokens=STEPS)
        assert [t["text"] for t in answer.json()["translations"]] == expected
        answer = client.post("/v1/translate", json={"texts": texts, "return_alternatives": True,
                                                    "num_return_sequences": 3, "max_new_tokens": STEPS})
        assert answer.status_code == 200, answer.text
        expected = runtime.translate(texts, return_alternatives=True, num_hypotheses=3, max_new_tokens=STEPS)
        assert [[h["text"] for h in t["hypotheses"]] for t in answer.json()["translations"]] == expected
        answer = client.post("/v1/score", json={"texts": texts, "targets": targets})
        assert answer.status_code == 200, answer.text
        scores = runtime.score(texts, targets)
        for got, want in zip(answer.json()["scores"], scores):
            assert got["tokens"] == want.tokens
            np.testing.assert_allclose(got["log_probs"], want.log_probs, atol=1e-9)
            assert got["normalized_score"] == pytest.approx(want.normalized)
        # streamed: decoded first, then the plain stream's events (the best's ids as tokens, then the answer)
        body = {"texts": texts[:2], "target_prefix": ["six", ""], "max_new_tokens": STEPS}
        events = [json.loads(line[len("data: "):]) for line in
                  client.post("/v1/translate", json={**body, "stream": True}).text.splitlines()
                  if line.startswith("data: ")]
        plain = client.post("/v1/translate", json=body).json()
        assert events[-1] == plain
        assert [[e["id"] for e in events[:-1] if e["index"] == i] for i in range(2)] == \
            [t["ids"] for t in plain["translations"]]
        for path, bad, says in [
                ("/v1/translate", {"texts": texts, "target_prefix": ["a"]}, "1 prefixes for 3 sources"),
                ("/v1/translate", {"texts": texts[:1], "target_prefix": [[10**6]]}, "out of range"),
                ("/v1/translate", {"texts": texts[:1], "target_prefix": ["a"], "split_sentences": True},
                 "drop split_sentences"),
                ("/v1/translate", {"texts": texts[:1], "return_alternatives": True, "num_beams": 2}, "drop num_beams"),
                ("/v1/score", {"texts": texts, "targets": targets[:1]}, "1 targets for 3 sources"),
                ("/v1/score", {"texts": texts, "targets": targets, "model": "other"}, "no model 'other'"),
                ("/v1/score", {"texts": texts}, "exactly one of targets")]:
            answer = client.post(path, json=bad)
            assert answer.status_code == 422 and says in answer.json()["error"], (bad, answer.text)


def test_one_prefix_and_one_target_per_source_or_a_422(pair, trained_export):
    """The rule the schema states only in words (serve.contract_ct2): a target_prefix (a /v1/score target) per
    source, fewer or more, texts or ids, is a 422 JSON error naming the field, never a 500 or a padded answer."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tfm_export.serve.app import create_app
    from tfm_export.serve.engine import ServeSettings

    runtime, _, _ = pair("marian")
    texts, srcs, targets = sources_of(runtime, "marian", 3)
    ids = [runtime.encode(t) for t in texts]
    target_ids = [runtime.encode_target(t) for t in targets]
    with TestClient(create_app(ServeSettings(str(trained_export("marian"))))) as client:
        for path, body, field in [
                ("/v1/translate", {"texts": texts, "target_prefix": ["six"] * 4}, "target_prefix"),
                ("/v1/translate", {"texts": texts, "target_prefix": []}, "target_prefix"),
                ("/v1/translate", {"ids": ids, "target_prefix": [[5]] * 2}, "target_prefix"),
                ("/v1/translate", {"texts": texts + [""], "target_prefix": ["six"] * 3}, "target_prefix"),
                ("/v1/translate", {"texts": texts, "target_prefix": ["six"] * 4, "return_alternatives": True},
                 "target_prefix"),
                ("/v1/score", {"texts": texts, "targets": targets + targets[:1]}, "targets"),
                ("/v1/score", {"ids": ids, "target_ids": target_ids[:2]}, "target_ids"),
                ("/v1/score", {"ids": ids, "target_ids": target_ids * 2}, "target_ids")]:
            steps = {"max_new_tokens": STEPS} if path == "/v1/translate" else {}
            answer = client.post(path, json={**body, **steps})
            assert answer.status_code == 422, (body, answer.text)
            error = answer.json()
            assert field in error["error"] and field in error.get("fields", [error.get("field")]), error
