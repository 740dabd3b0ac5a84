"""The Hugging Face fixtures (tests/hf_fixtures.py, tests/fixtures/trained/) are what they claim to be:
folders transformers loads offline, with each family's published files, special ids and
generation_config.json; trained models that solve most of the task, where beam search matters; tokenizers
that round-trip unicode; random folders of every family and size that save and load back."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

import torch  # noqa: E402

from hf_fixtures import (FAMILIES, LANGS, MODEL_FILES, PUBLISHED, SHAPES, T5_FAMILY, TARGETS,  # noqa: E402
                         UNICODE, hf_model, hf_tokenizer, lang_token, random_folder, sources, spell, split_numbers,
                         task_examples, tokenizer_files, trained_folder, translate)

# Greedy exact match on task_examples(family) (20 held-out inputs), a little under what was measured
# (tests/fixtures/trained/metrics.json: greedy_exact_20; README.md).
FLOORS = {"marian": 0.55, "bart": 0.25, "mbart50": 0.45, "m2m100": 0.75, "nllb": 0.75, "pegasus": 0.25, "t5": 0.75,
          "flan_t5": 0.75, "mt5": 0.75}  # measured: 0.65, 0.35, 0.55, 0.85, 0.85, 0.35, 0.85, 0.85, 0.85
# The files of each published folder (besides config.json, generation_config.json, model.safetensors).
FILES = {
    "marian": {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"},
    "bart": {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"},
    "mbart50": {"sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json"},
    "m2m100": {"sentencepiece.bpe.model", "vocab.json", "tokenizer_config.json", "added_tokens.json"},
    "nllb": {"sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json"},
    "pegasus": {"spiece.model", "tokenizer.json", "tokenizer_config.json"},
    **{family: {"spiece.model", "tokenizer.json", "tokenizer_config.json"} for family in T5_FAMILY},
}
SPM = {"marian": "source.spm", "mbart50": "sentencepiece.bpe.model", "m2m100": "sentencepiece.bpe.model",
       "nllb": "sentencepiece.bpe.model", "pegasus": "spiece.model",
       **{family: "spiece.model" for family in T5_FAMILY}}


@functools.lru_cache(maxsize=None)
def trained(family: str):
    folder = trained_folder(family)
    return hf_model(folder), hf_tokenizer(folder)


@functools.lru_cache(maxsize=None)
def greedy_and_beam(family: str) -> tuple[list[str], list[str]]:
    model, tok = trained(family)
    examples = task_examples(family, 100)
    return (translate(model, tok, family, examples, num_beams=1, do_sample=False),
            translate(model, tok, family, examples, num_beams=4, do_sample=False))


def test_task_and_sources():
    assert FAMILIES == ("marian", "bart", "mbart50", "m2m100", "nllb", "pegasus", "t5", "flan_t5", "mt5")
    assert [spell(n) for n in (0, 21, 115, 1000, 7070)] == [
        "zero", "twenty-one", "one hundred fifteen", "one thousand", "seven thousand seventy"]
    assert [spell(n, "de") for n in (1, 21, 101, 1001, 9999)] == [
        "eins", "einundzwanzig", "einhunderteins", "eintausendeins", "neuntausendneunhundertneunundneunzig"]
    train, heldout = split_numbers()
    assert len(heldout) == 500 and not set(train) & set(heldout) and len(train) + 500 == 10_000
    for family in FAMILIES:
        examples = task_examples(family)
        assert len(examples) == 20 and all(e.number in heldout for e in examples)
        assert {e.lang for e in examples} == set(TARGETS[family])
        strings = sources(family)
        assert len(strings) >= 50 and "" in strings and set(UNICODE) < set(strings)
        assert [e.source for e in examples] == strings[-20:]


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_folder_is_published_style(family):
    folder = trained_folder(family)
    names = {p.name for p in folder.iterdir()}
    assert names == FILES[family] | set(MODEL_FILES)  # safetensors only, no pytorch_model.bin
    assert set(tokenizer_files(folder)) == FILES[family]
    assert sum(p.stat().st_size for p in folder.iterdir()) < 1.3e6
    generation = json.loads((folder / "generation_config.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    published = dict(PUBLISHED[family])
    if family == "marian":  # the pad id (the last) is banned and starts the decoder
        pad = config["vocab_size"] - 1
        published |= dict(bad_words_ids=[[pad]], forced_eos_token_id=0, decoder_start_token_id=pad, pad_token_id=pad)
    assert {key: generation.get(key) for key in published} == published
    if family in T5_FAMILY:
        assert "max_length" not in generation  # transformers then stops at 20 tokens
        assert config["feed_forward_proj"] == ("relu" if family == "t5" else "gated-gelu")
        assert config["tie_word_embeddings"] is (family == "t5")
    if family == "mt5":
        assert config["num_layers"] != config["num_decoder_layers"]
        assert config["num_heads"] * config["d_kv"] != config["d_model"]
    if family == "nllb":
        assert config["model_type"] == "m2m_100"
    model, tok = trained(family)
    assert model.config.vocab_size >= len(tok)
    if family in ("flan_t5", "mt5"):  # an lm_head of their own, also once transformers 5 has loaded them
        assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
        assert not torch.equal(model.lm_head.weight, model.shared.weight)


@pytest.mark.parametrize("family", FAMILIES)
def test_special_token_ids(family):
    _, tok = trained(family)
    ids = tok.convert_tokens_to_ids
    if family == "marian":  # OPUS-MT: </s> 0, <unk> 1, <pad> last
        assert (tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == (0, 1, len(tok) - 1)
        assert ids(">>de<<") != tok.unk_token_id
    elif family in T5_FAMILY or family == "pegasus":
        assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)
        if family == "pegasus":  # <mask_1>, <mask_2>, <unk_2>..<unk_102>, then the pieces: <unk> 105
            assert ids(["<mask_1>", "<mask_2>", "<unk_2>", "<unk_102>", "<unk>"]) == [2, 3, 4, 104, 105]
        else:  # 100 sentinels, the last ids, <extra_id_0> the very last
            assert tok.unk_token_id == 2 and ids("<extra_id_0>") == len(tok) - 1 == ids("<extra_id_99>") + 99
    else:  # fairseq: <s> 0, <pad> 1, </s> 2, <unk> 3 (MBart50Tokenizer has no bos_token, as in transformers 4)
        assert ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
        assert [tok.pad_token_id, tok.eos_token_id, tok.unk_token_id] == [1, 2, 3]
    if family in LANGS:
        source, targets = LANGS[family]
        codes = [ids(lang_token(family, code)) for code in [source, *targets]]
        assert tok.unk_token_id not in codes and min(codes) > 3
        if family != "m2m100":  # mbart50, nllb: the codes, then <mask> as the last id
            assert tok.mask_token_id == len(tok) - 1 > max(codes)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_with_the_folder_defaults(family):
    model, tok = trained(family)
    examples = task_examples(family)[:4]
    answers = translate(model, tok, family, examples)  # num_beams, lengths, forced tokens: the folder's
    assert all(answers) and sum(a == e.target for a, e in zip(answers, examples)) >= 1


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_greedy_exact_match(family):
    greedy, _ = greedy_and_beam(family)
    examples = task_examples(family)  # the first 20 of the 100
    exact = sum(g == e.target for g, e in zip(greedy, examples)) / len(examples)
    assert exact >= FLOORS[family], list(zip(greedy, [e.target for e in examples]))


@pytest.mark.parametrize("family", FAMILIES)
def test_beam_search_differs_from_greedy(family):
    """On 100 held-out inputs (metrics.json: beam4_differs_100), beam-4 changes at least one answer."""
    greedy, beam = greedy_and_beam(family)
    assert sum(b != g for b, g in zip(beam, greedy)) >= 1


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_round_trip(family):
    """decode(encode(s)) gives s back as SentencePiece normalises it (NFKC, whitespace runs), and the
    pieces are the SentencePiece library's; byte-level BPE (bart) gives s back exactly. Every character
    of the sources is in the vocabulary (no <unk>)."""
    import sentencepiece as spm

    _, tok = trained(family)
    folder = trained_folder(family)
    sp = spm.SentencePieceProcessor(model_file=str(folder / SPM[family])) if family in SPM else None
    if family in LANGS:
        tok.src_lang = LANGS[family][0]
    for text in sources(family):
        ids = tok(text).input_ids
        assert tok.unk_token_id not in ids, text
        back = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if sp is None:
            assert back == text
            continue
        code, rest = (text.split(" ", 1) if family == "marian" and text.startswith(">>") else ("", text))
        expected = sp.decode(sp.encode(rest))
        pieces = tok.convert_ids_to_tokens(tok(rest, add_special_tokens=False).input_ids)
        if family in ("nllb", "pegasus") and rest != rest.rstrip():
            # their tokenizer.json (normaliser: the charsmap, then runs of spaces -> one) keeps a trailing
            # space as a last "▁", as the published ones do; SentencePiece drops it, and so does mbart50's
            # class since transformers 5.25 (its normaliser strips on the right: text.hf's strip_right)
            assert pieces[-1] == "▁", text
            pieces = pieces[:-1]
            if expected:
                expected += " "
        assert back == (f"{code} {expected}" if code else expected), text
        if family != "marian":  # (MarianTokenizer runs SentencePiece itself)
            assert pieces == sp.encode(rest, out_type=str), text


# The "layers" folders (the base checkpoints' depth) feed only `make test-long`'s cases
# (test_hf_families' random folders), so they are checked there: `make test` checks the tiny ones.
@pytest.mark.parametrize("size", ["tiny", pytest.param("layers", marks=pytest.mark.long)])
@pytest.mark.parametrize("family", FAMILIES)
def test_random_folder_saves_and_loads(family, size, tmp_path):
    folder = random_folder(family, tmp_path / family, size=size)
    trained_names = set(tokenizer_files(trained_folder(family)))
    assert {p.name for p in folder.iterdir()} == trained_names | set(MODEL_FILES)
    model, tok = hf_model(folder), hf_tokenizer(folder)
    config = json.loads((trained_folder(family) / "config.json").read_text())
    assert model.config.vocab_size == config["vocab_size"]
    shape = SHAPES[size][family]
    if family in T5_FAMILY:
        layers = (model.config.num_layers, model.config.num_decoder_layers, model.config.num_heads)
    else:
        layers = (model.config.encoder_layers, model.config.decoder_layers, model.config.encoder_attention_heads)
    assert (model.config.d_model, *layers) == (shape.d_model, shape.encoder_layers, shape.decoder_layers, shape.heads)
    generation = json.loads((folder / "generation_config.json").read_text())
    assert {k: generation.get(k) for k in PUBLISHED[family] if k not in ("pad_token_id", "decoder_start_token_id")} \
        == {k: v for k, v in PUBLISHED[family].items() if k not in ("pad_token_id", "decoder_start_token_id")}
    if family in ("flan_t5", "mt5"):
        assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
    answers = translate(model, tok, family, task_examples(family)[:4], num_beams=1, max_new_tokens=6)
    assert len(set(answers)) >= 2, answers  # greedy tokens depend on the source
