"""Documents: texts split into sentences (text.sentences), translated as one batch and joined back with their
own whitespace, in the library (translate(split_sentences=True)), the CLI (generate --split-sentences) and the
server (/v1/translate's split_sentences, LibreTranslate's route by default); a sentence over the model's limit
is cut at the limit, not refused. On the trained NLLB fixture (numbers in digits -> words)."""

from __future__ import annotations

import logging
import random

import pytest
from helpers import run_cli

from tfm_export.runtime import open_export
from tfm_export.text import sentences
from tfm_export.text.iso639 import two_letter

pytest.importorskip("sentencex")

ENG, DEU = "eng_Latn", "deu_Latn"


@pytest.mark.parametrize("text", [
    "Dr. Smith went to Washington. He arrived at 3 p.m.!  Then he left.\n\nNew paragraph... Is it? Yes",
    "  leading and trailing whitespace.  \n", "", "   ", "no punctuation at all", "a\r\n\r\nb. c.\n"])
def test_split_and_join_keep_every_character(text):
    pieces = sentences.split(text, "en")
    assert "".join(p.before + p.text + p.after for p in pieces) == text
    assert all(p.text == p.text.strip() for p in pieces)
    assert sentences.join(pieces, [t.upper() for t in sentences.texts_of(pieces)]) == text.upper()


def test_the_languages_rules_by_any_code_an_export_uses():
    german = "Er kam am 3. Mai. Er blieb z. B. zwei Tage. Dann ging er."
    expected = ["Er kam am 3. Mai.", "Er blieb z. B. zwei Tage.", "Dann ging er."]
    for code in ("de", "deu", "deu_Latn", ">>deu<<", "de_DE"):
        assert sentences.texts_of(sentences.split(german, code)) == expected, code
    assert len(sentences.texts_of(sentences.split(german, "en"))) == 4  # English's rules: "3." ends one
    assert [two_letter(c) for c in ("eng_Latn", "en_XX", "zho_Hans", "fra", "xxx_Latn", "123")] == [
        "en", "en", "zh", "fr", None, None]


def test_a_sentence_over_the_limit_is_cut_at_the_limit(caplog):
    words = lambda text: len(text.split()) + 1  # noqa: E731  a token per word and EOS
    text = "Short one. " + " ".join(f"w{i}" for i in range(23)) + ". Last."
    with caplog.at_level(logging.WARNING):
        pieces = sentences.plan(text, "en", words, 5)
    assert "a sentence of 24 tokens is longer than the model's limit of 5: translated in 6 pieces" in caplog.text
    assert all(words(t) <= 5 for t in sentences.texts_of(pieces))
    assert "".join(p.before + p.text + p.after for p in pieces) == text
    # a word longer than the limit is cut inside it
    assert sentences.texts_of(sentences.split_at_limit("x" * 30, len, 7)) == ["x" * 7] * 4 + ["xx"]


@pytest.fixture(scope="module")
def nllb(trained_export):
    out = trained_export("nllb")
    return out, open_export(out, "cpu")


def document(words: int = 5000, seed: int = 0) -> tuple[str, list[str]]:
    """A document of `words` one-number sentences (40 distinct ones) in paragraphs of 10; its sentence list."""
    rng = random.Random(seed)
    distinct = [f"{rng.randint(1, 9999)}." for _ in range(40)]
    chosen = [distinct[rng.randrange(40)] for _ in range(words)]
    text = "".join(s + ("\n\n" if n % 10 == 9 else " ") for n, s in enumerate(chosen))
    return text, chosen


def test_a_5000_word_document_keeps_every_sentence(nllb):
    _, model = nllb
    text, chosen = document()
    pieces = sentences.split(text, ENG)
    assert sentences.texts_of(pieces) == chosen  # 5,000 sentences in
    translated = model.translate([text], source_lang=ENG, target_lang=DEU, split_sentences=True)[0]
    alone = {s: model.translate([s], source_lang=ENG, target_lang=DEU)[0] for s in set(chosen)}
    # out: each sentence's own translation, in order, between the document's whitespace
    assert translated == sentences.join(pieces, [alone[s] for s in chosen])
    assert translated.count("\n\n") == 500 and len(translated.split()) >= 5000
    # whole, the model drops sentences: what splitting is for
    assert model.translate(["4718 12."], source_lang=ENG, target_lang=DEU) == model.translate(
        ["4718"], source_lang=ENG, target_lang=DEU)


def test_a_document_encodes_each_distinct_sentence_once(nllb, monkeypatch):
    """The plan's length check and the batch share one encoding per distinct text (it was every sentence twice,
    ~5 % of a document's time: BENCHMARKS.md, documents); the translation is the same."""
    _, model = nllb
    text, chosen = document(200, seed=1)
    expected = model.translate([text], source_lang=ENG, target_lang=DEU, split_sentences=True)
    encoded: list[str] = []
    encode = type(model).encode
    monkeypatch.setattr(type(model), "encode", lambda self, t, *a: encoded.append(t) or encode(self, t, *a))
    assert model.translate([text], source_lang=ENG, target_lang=DEU, split_sentences=True) == expected
    assert sorted(encoded) == sorted(set(chosen))


def test_by_length_decodes_batches_of_similar_length_in_the_sources_order():
    sources = [[0] * n for n in (5, 1, 4, 1, 3, 2, 5)]
    batches: list[list[int]] = []
    rows = sentences.by_length(sources, 3, lambda batch: batches.append([len(s) for s in batch]) or [
        len(s) for s in batch])
    assert batches == [[1, 1, 2], [3, 4, 5], [5]]
    assert rows == [5, 1, 4, 1, 3, 2, 5]


def test_a_document_decodes_its_sentences_by_length(nllb, monkeypatch):
    """Sentences of similar length share a batch (less padding, as CTranslate2's translate_iterable sorts);
    the document is the one translated in document order (each sentence as it is alone)."""
    _, model = nllb
    rng = random.Random(2)
    chosen = [" ".join(str(rng.randint(1, 9999)) for _ in range(rng.randint(1, 6))) + "." for _ in range(70)]
    text = " ".join(chosen)
    alone = model.translate(chosen, source_lang=ENG, target_lang=DEU)
    lengths: list[list[int]] = []
    generate = type(model).generate_ids
    monkeypatch.setattr(type(model), "generate_ids", lambda self, src, *a, **k: lengths.append(
        [len(s) for s in src]) or generate(self, src, *a, **k))
    translated = model.translate([text], source_lang=ENG, target_lang=DEU, split_sentences=True)[0]
    assert translated == sentences.join(sentences.split(text, ENG), alone)
    assert [len(b) for b in lengths] == [32, 32, 6]
    assert all(max(a) <= min(b) for a, b in zip(lengths, lengths[1:]))


def test_a_source_over_max_len_is_translated_not_refused(nllb, caplog):
    _, model = nllb
    long = "1 " * 1100  # 2,200 tokens without a sentence end: cut at max_len 1024
    with caplog.at_level(logging.WARNING):
        translated = model.translate([long, "4718"], source_lang=ENG, target_lang=DEU)
    assert "text 1 has 2203 tokens, more than the model's max_len of 1024" in caplog.text
    assert "translated in 3 pieces cut at the limit" in caplog.text
    assert translated[1] == model.translate(["4718"], source_lang=ENG, target_lang=DEU)[0]  # the others as before
    assert len(translated[0].split()) >= 3
    # the plain call without a long source is unchanged: one source per text, whatever its sentences
    assert model.translate(["4718. 12."], source_lang=ENG, target_lang=DEU) != model.translate(
        ["4718. 12."], source_lang=ENG, target_lang=DEU, split_sentences=True)


def test_generate_split_sentences_translates_a_file_as_a_document(nllb, tmp_path):
    out, model = nllb
    text = "4718. 12.\n\n905.\n"
    (tmp_path / "doc.txt").write_text(text)
    result = run_cli("generate", out, "--input", tmp_path / "doc.txt", "--split-sentences", "--source-lang", ENG,
                     "--target-lang", DEU)
    assert result.exit_code == 0, result.output
    one = {s: model.translate([s], source_lang=ENG, target_lang=DEU)[0] for s in ("4718.", "12.", "905.")}
    assert result.stdout == f"{one['4718.']} {one['12.']}\n\n{one['905.']}\n"
    refused = run_cli("generate", out, "--ids", "1 2", "--split-sentences")
    assert refused.exit_code == 2 and "--split-sentences translates text documents" in refused.output


@pytest.fixture(scope="module")
def server(nllb):
    pytest.importorskip("fastapi")
    from helpers import serving

    from tfm_export.serve.engine import ServeSettings

    with serving(ServeSettings(str(nllb[0]), max_texts=4)) as (url, _):
        yield url


def test_the_server_translates_documents_with_split_sentences(nllb, server):
    httpx = pytest.importorskip("httpx")
    _, model = nllb
    text, chosen = document(words=300, seed=1)
    pieces = sentences.split(text, ENG)
    alone = {s: model.translate([s], source_lang=ENG, target_lang=DEU)[0] for s in set(chosen)}
    body = {"texts": [text, "77."], "source_lang": ENG, "target_lang": DEU, "split_sentences": True}
    reply = httpx.post(f"{server}/v1/translate", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    rows = reply.json()["translations"]
    assert rows[0]["text"] == sentences.join(pieces, [alone[s] for s in chosen])  # 300 sentences: 75 waves of 4
    assert rows[1]["text"] == model.translate(["77."], source_lang=ENG, target_lang=DEU)[0]
    assert rows[1]["ids"] == model.generate_ids([model.encode("77.", ENG, DEU)], **model.language_options(DEU))[0]
    # n-best: the k-th hypothesis joins each sentence's k-th
    nbest = httpx.post(f"{server}/v1/translate", json={**body, "texts": ["4718. 12."], "num_beams": 2,
                                                        "num_return_sequences": 2}).json()["translations"][0]
    hyps = model.generate([model.encode(s, ENG, DEU) for s in ("4718.", "12.")], num_beams=2, num_return_sequences=2,
                          **model.language_options(DEU))
    decoded = [[model.tokenizer.decode(h.ids) for h in row] for row in hyps]
    assert [h["text"] for h in nbest["hypotheses"]] == [f"{decoded[0][k]} {decoded[1][k]}" for k in range(2)]
    # over the limit: 413 without split_sentences, translated with it
    long = {"texts": ["1 " * 1100], "source_lang": ENG, "target_lang": DEU}
    refused = httpx.post(f"{server}/v1/translate", json=long)
    assert refused.status_code == 413 and refused.json()["limit"] == "max_len", refused.text
    cut = httpx.post(f"{server}/v1/translate", json={**long, "split_sentences": True}, timeout=120)
    assert cut.status_code == 200 and len(cut.json()["translations"][0]["text"].split()) >= 3, cut.text
    streamed = httpx.post(f"{server}/v1/translate", json={**body, "stream": True})
    assert streamed.status_code == 422 and streamed.json()["fields"] == ["split_sentences", "stream"]
