"""MarianMT folders: weights, config and SentencePiece tokenizer proven equal to `transformers`."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

from tfm_export.cli import cli  # noqa: E402
from tfm_export.generate import greedy_decode  # noqa: E402
from tfm_export.importers import load_any  # noqa: E402
from tfm_export.marian_tokenizer import MarianTokenizer  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

EOS, UNK = 0, 1
CONFIGS = {
    "swish-scaled-shared-banned-pad": dict(activation_function="swish", scale_embedding=True, bad_pad=True),
    "gelu-unscaled": dict(activation_function="gelu", scale_embedding=False, d_model=24, encoder_layers=1),
    "relu-unshared-untied": dict(activation_function="relu", scale_embedding=True,
                                 share_encoder_decoder_embeddings=False, tie_word_embeddings=False),
}


def marian(vocab=40, seed=0, bad_pad=False, **changes):
    settings = dict(vocab_size=vocab, decoder_vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
                    max_position_embeddings=64, pad_token_id=vocab - 1, eos_token_id=EOS,
                    decoder_start_token_id=vocab - 1, dropout=0.0)
    settings.update(changes)
    if bad_pad:
        settings["bad_words_ids"] = [[vocab - 1]]
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings)).eval()
    with torch.no_grad():  # HF initialises this bias to zeros; make it count
        model.final_logits_bias.normal_(0, 0.5)
    if bad_pad:
        model.generation_config.bad_words_ids = [[vocab - 1]]
    return model


def padded(vocab=40, seed=1):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, vocab - 1, (3, 8), generator=gen)
    src[:, -1] = EOS
    src[1, 5:] = vocab - 1
    src[2, 2:] = vocab - 1
    return src, (src != vocab - 1).long()


def hf_greedy(model, src, mask, steps):
    out = model.generate(input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=steps)
    rows = out[:, 1:].tolist()
    return [r[: r.index(EOS)] if EOS in r else r for r in rows]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("weights", ["safetensors", "bin"])
@torch.no_grad()
def test_logits_and_greedy_match_transformers(name, weights, tmp_path):
    hf = marian(**CONFIGS[name])
    hf.save_pretrained(tmp_path, safe_serialization=weights == "safetensors")
    ckpt = load_any(tmp_path)
    ours = ckpt.build_model()
    src, mask = padded()
    tgt = torch.randint(2, 39, (3, 6))
    tgt[:, 0] = hf.config.decoder_start_token_id
    expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    # Banned ids are masked inside our logits (generation-time in transformers): compare the rest.
    allowed = [i for i in range(expected.shape[-1]) if i not in ckpt.config.suppress_ids]
    assert (ours(src, tgt) - expected)[..., allowed].abs().max() <= 1e-4
    # transformers forces EOS as the last token at max length; with one step fewer the rest is equal.
    assert ckpt.meta["forced_eos_at_max_length"]
    assert greedy_decode(ours, src, 11) == hf_greedy(hf, src, mask, 12)


def test_banned_pad_becomes_suppress_ids(tmp_path):
    hf = marian(**CONFIGS["swish-scaled-shared-banned-pad"])
    hf.save_pretrained(tmp_path)
    config = load_any(tmp_path).config
    assert config.suppress_ids == (39,) and config.bos_id == 39 and config.activation == "silu"


def train_spm(folder, prefix, corpus, vocab_size):
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(folder / prefix),
                                   vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                                   bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2)
    (folder / f"{prefix}.model").rename(folder / f"{prefix}.spm")


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    """A tiny Marian model with real SentencePiece files and vocab.json, as downloaded."""
    folder = tmp_path_factory.mktemp("opus-mt-tiny")
    words = ["the house", "a small cat", "green trees grow", "we eat bread", "das Haus", "eine Katze"]
    corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3)) for i in range(300)]
    train_spm(folder, "source", corpus, 30)
    train_spm(folder, "target", corpus, 30)
    pieces = []
    for name in ("source.spm", "target.spm"):
        proc = spm.SentencePieceProcessor(model_file=str(folder / name))
        pieces += [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
    vocab = {"</s>": EOS, "<unk>": UNK}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    model = marian(vocab=len(vocab), seed=5, bad_pad=True, scale_embedding=True, activation_function="swish")
    model.save_pretrained(folder)
    hf_tok = transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                          str(folder / "vocab.json"))
    return folder, model, hf_tok


TEXTS = ["the house", "green cat grows bread", "eine Katze, das Haus!", "zzz qqq"]


def test_tokenizer_matches_transformers(marian_folder):
    folder, _, hf_tok = marian_folder
    tok = MarianTokenizer.from_folder(folder, eos_id=EOS, pad_id=hf_tok.pad_token_id)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf_tok(text)["input_ids"]
        assert tok.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True)
    assert [p.name for p in tok.files()] == ["source.spm", "target.spm", "vocab.json"]


@torch.no_grad()
def test_export_carries_the_tokenizer_and_matches_generate(marian_folder, tmp_path):
    folder, model, hf_tok = marian_folder
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, [str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "layout marian" in result.output
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in out.iterdir()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["type"] == "marian"
    runtime = open_export(out, device="cpu")
    batch = hf_tok(TEXTS, return_tensors="pt", padding=True)
    expected = hf_greedy(model, batch["input_ids"], batch["attention_mask"], 10)
    assert runtime.generate_ids([hf_tok(t)["input_ids"] for t in TEXTS], 9) == expected
    texts = runtime.translate(TEXTS, max_new_tokens=9)
    assert texts == [hf_tok.decode(ids, skip_special_tokens=True) for ids in expected]
    generated = CliRunner().invoke(cli, ["generate", str(out), "--text", TEXTS[0], "--json", "--device", "cpu",
                                         "--max-new-tokens", "9"])
    assert generated.exit_code == 0 and json.loads(generated.output)["text"] == texts[0]


def test_bad_folders(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bart"}))
    result = CliRunner().invoke(cli, [str(tmp_path)])
    assert result.exit_code == 1 and "only marian folders are supported" in result.output
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    marian().config.save_pretrained(tmp_path)
    result = CliRunner().invoke(cli, [str(tmp_path)])
    assert result.exit_code == 1 and "neither model.safetensors nor pytorch_model.bin" in result.output
