"""MarianMT folders: weights, config and SentencePiece tokenizer proven equal to `transformers`."""

import json
import logging
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

from helpers import run_cli, run_cli_ok  # noqa: E402
from marian_fixtures import EOS, hf_greedy, marian, marian_folder, padded_batch, save  # noqa: E402
from tfm_export.errors import CheckpointError, ConfigError, ManifestError  # noqa: E402
from tfm_export.model.generate import greedy_decode  # noqa: E402
from tfm_export.importers import load_any  # noqa: E402
from tfm_export.cli.common import cli_option
from helpers import import_hf as import_marian  # noqa: E402
from tfm_export.importers.hf_generation import generation_report  # noqa: E402
from tfm_export.text.languages import Languages  # noqa: E402
from tfm_export.text.marian import MarianTokenizer  # noqa: E402
from tfm_export.model.layers import sinusoidal_table  # noqa: E402
from tfm_export.runtime import GREEDY, open_export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

CONFIGS = {
    "swish-scaled-shared-banned-pad": dict(activation_function="swish", scale_embedding=True, bad_pad=True),
    "gelu-unscaled-odd-dims": dict(activation_function="gelu", scale_embedding=False, d_model=21,
                                   encoder_attention_heads=3, decoder_attention_heads=3, encoder_layers=1,
                                   decoder_layers=3, forced_eos=False),
    "relu-unshared-untied": dict(activation_function="relu", scale_embedding=True, decoder_vocab_size=44,
                                 share_encoder_decoder_embeddings=False, tie_word_embeddings=False),
    "silu-unshared-tied": dict(activation_function="silu", d_model=32, encoder_attention_heads=8,
                               decoder_attention_heads=8, encoder_ffn_dim=64, decoder_ffn_dim=64,
                               share_encoder_decoder_embeddings=False, bad_pad=True),
    # transformers 5 unties every embedding of a shared model when tie_word_embeddings is false.
    "shared-flag-untied": dict(share_encoder_decoder_embeddings=True, tie_word_embeddings=False, forced_eos=False),
}
STEPS = 12


@pytest.mark.parametrize("dim", [7, 16, 21, 32])
def test_positions_are_marians_table(dim):
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(50, dim).create_weight()
    assert (sinusoidal_table(50, dim, "sinusoidal_concat") - theirs).abs().max() <= 1e-6


def assert_matches_transformers(hf, ckpt, forced_eos: bool) -> None:
    """Teacher-forced logits on a padded batch, and greedy tokens against generate()."""
    ours = ckpt.build_model()
    src, mask = padded_batch()
    tgt = torch.randint(0, ckpt.config.tgt_vocab_size, (3, 6), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = hf.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt)
    # Banned ids are banned when decoding (as in transformers), not in the logits: compare every id.
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4
    # transformers forces EOS as the last of N new tokens; then its first N-1 are ours.
    assert ckpt.meta["forced_eos_at_max_length"] == forced_eos
    ours_steps = STEPS - 1 if forced_eos else STEPS
    assert greedy_decode(ours, src, ours_steps) == hf_greedy(hf, src, mask, STEPS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_logits_and_greedy_match_transformers(name, weights, tmp_path):
    settings = dict(CONFIGS[name])
    hf = marian(**settings)
    save(hf, tmp_path, weights)
    ckpt = load_any(tmp_path)
    cfg = ckpt.config
    assert (cfg.share_embeddings, cfg.tie_output) == {
        "relu-unshared-untied": (False, False), "silu-unshared-tied": (False, True),
        "shared-flag-untied": (False, False)}.get(name, (True, True))
    assert cfg.suppress_ids == (39,)  # published folders ban the pad id (bad_words_ids)
    assert_matches_transformers(hf, ckpt, settings.get("forced_eos", True))


def test_rows_that_end_early_and_rows_cut_at_max_new_tokens(tmp_path):
    """Per-row EOS, pad-filled finished rows, and transformers' forced EOS at the last step."""
    src, mask = padded_batch()
    for seed in range(40):  # a seed whose greedy rows end at different steps, some at the cap
        hf = marian(seed=seed, init_std=0.2)
        with torch.no_grad():
            hf.final_logits_bias[0, EOS] += 3.0
        lengths = {len(row) for row in hf_greedy(hf, src, mask, STEPS)}
        if len(lengths) > 1 and max(lengths) == STEPS - 1:
            break
    else:
        pytest.fail("no seed gives rows of different lengths; retune the EOS bias")
    save(hf, tmp_path)
    assert_matches_transformers(hf, load_any(tmp_path), forced_eos=True)


def test_config_fields(tmp_path):
    hf = marian(**CONFIGS["swish-scaled-shared-banned-pad"])
    hf.save_pretrained(tmp_path)
    cfg = load_any(tmp_path).config
    assert (cfg.activation, cfg.positions) == ("silu", "sinusoidal_concat")
    assert (cfg.norm_first, cfg.final_norm, cfg.attention_scale) == (False, False, "head_dim")
    assert (cfg.bos_id, cfg.eos_id, cfg.src_pad_id, cfg.tgt_pad_id, cfg.suppress_ids) == (39, EOS, 39, 39, (39,))
    assert (cfg.scale_embeddings, cfg.output_bias, cfg.max_len, cfg.layer_norm_eps) == (True, True, 64, 1e-5)


def test_legacy_folder_with_every_copy_saved_and_generation_in_config_json(tmp_path):
    """Folders saved by transformers 4: tied copies and position tables in the .bin, no generation_config.json."""
    hf = marian(bad_pad=True, scale_embedding=True, activation_function="swish")
    save(hf, tmp_path, "bin")
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    for key in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        state[key] = hf.model.shared.weight.detach().clone()
    assert "model.encoder.embed_positions.weight" in state
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "generation_config.json").unlink()
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(bad_words_ids=[[39]], num_beams=4, max_length=512, normalize_before=False)
    (tmp_path / "config.json").write_text(json.dumps(config))
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path).eval()
    assert reloaded.generation_config.bad_words_ids == [[39]]
    ckpt = import_marian(tmp_path)
    assert ckpt.meta["generation"]["num_beams"] == 4 and ckpt.config.suppress_ids == (39,)
    assert_matches_transformers(reloaded, ckpt, forced_eos=True)


def test_generation_settings(tmp_path, caplog):
    hf = marian(seed=3)
    with torch.no_grad():  # make the banned ids win unless banned
        hf.final_logits_bias[0, [5, 6, 7]] += torch.tensor([20.0, 19.0, 18.0])
    src, mask = padded_batch()
    assert {t for row in hf_greedy(hf, src, mask, 4) for t in row} <= {5, 6, 7}
    hf.generation_config.suppress_tokens = [5, 6]
    hf.generation_config.bad_words_ids = [[7], [8, 9]]
    hf.generation_config.no_repeat_ngram_size = 3
    hf.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="tfm_export.importers.hf_generation"):
        ckpt = import_marian(tmp_path)
    assert ckpt.config.suppress_ids == (5, 6, 7)
    ignored = ckpt.meta["generation"]["not_reproduced"]
    assert set(ignored) == {"bad_words_ids (phrases)"}
    assert "bad_words_ids (phrases)=[[8, 9]] is not reproduced" in caplog.text
    # no_repeat_ngram_size is reproduced (runtime.decode.processors): it becomes the export's default decoding.
    # As published: 4 beams, max_length 512 (capped to the 64 positions), forced EOS.
    assert ckpt.meta["generation_defaults"] == {"no_repeat_ngram_size": 3, "num_beams": 4, "max_new_tokens": 64,
                                                "forced_eos": True, "renormalize_logits": True}
    neutral = {"min_new_tokens": None, "repetition_penalty": 1.0, "min_length": 1, "num_beams": 4}
    assert generation_report(neutral) == {"not_reproduced": {}, "num_beams": 4, "max_length": None}
    # Without the settings we do not reproduce, the static bans give transformers' tokens.
    hf.generation_config.bad_words_ids = [[7]]
    hf.generation_config.no_repeat_ngram_size = None
    assert_matches_transformers(hf, ckpt, forced_eos=True)


def test_options(tmp_path):
    marian().save_pretrained(tmp_path)
    assert import_marian(tmp_path, {"max_len": 32, "heads": 4, "eos_id": EOS, "activation": None}).config.max_len == 32
    for options, message in (({"max_len": 65}, "--max-len 65 does not fit"), ({"heads": 8}, "--heads 8 does not apply"),
                             ({"norm_first": True}, "--norm-first"), ({"config": {}}, "--config CONFIG.json does not apply")):
        with pytest.raises(ConfigError) as info:  # the CLI's rendering of the option named in the error
            import_marian(tmp_path, options)
        assert message in info.value.render(cli_option)


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_bad_folders(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    result = run_cli(tmp_path)
    assert result.exit_code == 1 and "describes a 'gpt2' model; supported model types: bart, m2m_100" in result.output
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        import_marian(tmp_path)
    marian().config.save_pretrained(tmp_path)
    result = run_cli(tmp_path)
    assert result.exit_code == 1 and "neither model.safetensors nor pytorch_model.bin" in result.output
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        import_marian(tmp_path)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "safetensors.torch", None)
        with pytest.raises(ConfigError, match="needs safetensors: pip install"):
            import_marian(tmp_path)
    _edit(tmp_path / "config.json", lambda c: c.update(activation_function="quick_gelu"))
    with pytest.raises(ConfigError, match="activation 'quick_gelu' is not supported"):
        import_marian(tmp_path)


def test_families_come_from_one_registry(tmp_path, monkeypatch):
    """Each model_type is one registered Family: an unknown type's error lists the registry, a type is
    registered once, and a family like Marian under another name is one record."""
    from tfm_export.importers.families import FAMILIES, Family, register_family, registry, supported

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigError, match=f"supported model types: {', '.join(supported())}$"):
        import_marian(tmp_path)
    assert supported() == sorted(FAMILIES) and {"marian", "bart", "mbart", "m2m_100", "pegasus", "t5", "mt5"} <= set(
        FAMILIES)
    with pytest.raises(ValueError, match="registered already"):
        register_family(FAMILIES["marian"])
    folder = save(marian(), tmp_path / "marian")
    known = import_marian(folder)
    marian_like = FAMILIES["marian"]
    monkeypatch.setitem(registry._FAMILIES, "marian_like", Family("marian_like", marian_like.layout,
                                                                  marian_like.defaults, marian_like.tokenizer))
    _edit(folder / "config.json", lambda c: c.update(model_type="marian_like"))
    again = import_marian(folder)
    assert again.config == known.config and again.meta["layout"] == "marian_like"
    assert all(torch.equal(again.state_dict[k], v) for k, v in known.state_dict.items())


def test_only_the_family_modules_branch_on_model_type():
    """What differs by model_type lives in the family records (tfm_export/importers/families/)."""
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "tfm_export"
    families = package / "importers" / "families"
    found = [f"{p}:{n}" for p in package.rglob("*.py") if families not in p.parents
             for n, line in enumerate(p.read_text().splitlines(), 1) if "model_type ==" in line]
    assert not found


def test_weights_that_do_not_fit(tmp_path):
    marian(share_encoder_decoder_embeddings=False, tie_word_embeddings=False).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(weights)
    _edit(tmp_path / "config.json", lambda c: c.update(tie_word_embeddings=True))
    with pytest.raises(CheckpointError, match="ties lm_head.weight .* the saved tensors differ"):
        import_marian(tmp_path)
    _edit(tmp_path / "config.json", lambda c: c.update(tie_word_embeddings=False))
    save_file({k: v for k, v in state.items() if k != "model.decoder.layers.1.fc2.bias"}, weights)
    with pytest.raises(CheckpointError, match="missing source keys: model.decoder.layers.1.fc2.bias"):
        import_marian(tmp_path)
    save_file({**state, "model.decoder.layers.2.fc2.bias": torch.zeros(48)}, weights)
    with pytest.raises(CheckpointError, match="keys left over: model.decoder.layers.2.fc2.bias"):
        import_marian(tmp_path)
    save_file({**state, "lm_head.weight": state["lm_head.weight"][:30].contiguous()}, weights)
    with pytest.raises(CheckpointError, match="mis-shaped: lm_head.weight"):
        import_marian(tmp_path)
    _edit(tmp_path / "config.json", lambda c: c.update(encoder_attention_heads=3, decoder_attention_heads=3))
    save_file(state, weights)
    with pytest.raises(ConfigError, match="must be divisible"):
        import_marian(tmp_path)


def test_library_does_not_import_transformers():
    code = ("import sys, tfm_export.importers.hf, tfm_export.text.marian; "
            "sys.exit('transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- tokenizer ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def opus_folder(tmp_path_factory):
    """A tiny Marian model with real SentencePiece files, vocab.json and tokenizer_config.json."""
    folder = marian_folder(tmp_path_factory.mktemp("opus-mt-tiny"))
    return folder, transformers.MarianMTModel.from_pretrained(folder).eval(), \
        transformers.MarianTokenizer.from_pretrained(folder)


TEXTS = ["the house", "green cat grows bread", "eine Katze, das Haus!", "zzz qqq €", "  the   house  ", "",
         ">>de<< the house", ">>nl<<a small cat", ">>xx<< the house", "the >>de<< house", "a </s> b<unk>x<pad>",
         "Grüne Bäume\twachsen\n", "ＡＢＣ ｆｕｌｌ"]


def test_tokenizer_matches_transformers(opus_folder):
    folder, _, hf_tok = opus_folder
    tok = MarianTokenizer.from_folder(folder)
    for text in TEXTS:
        assert tok.encode(text) == hf_tok(text)["input_ids"], text
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        ids = torch.randint(0, len(tok.encoder), (int(torch.randint(0, 12, (1,), generator=gen)),), generator=gen)
        # use_source_tokenizer=False: detokenise with target.spm (transformers 5 defaults to source.spm).
        assert tok.decode(ids.tolist()) == hf_tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
    assert [p.name for p in tok.files()] == ["source.spm", "target.spm", "vocab.json"]
    again = MarianTokenizer.from_dict(json.loads(json.dumps(tok.to_dict())), folder)
    assert again.encode(TEXTS[2]) == tok.encode(TEXTS[2]) and again.to_dict() == tok.to_dict()
    earlier = {"type": "marian", "source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json",
               "unk_id": 1, "eos_id": 0, "pad_id": tok.pad_id}  # the first release's dict form
    # The first release's dict has no languages: the same tokenizer, no language codes.
    assert MarianTokenizer.from_dict(earlier, folder).to_dict() == {**tok.to_dict(), "languages": Languages().to_dict()}
    assert tok.languages.codes("target") == ["de", "nl"] and tok.languages.target_on_source
    assert tok.encode("the house", target_lang="de") == hf_tok(">>de<< the house")["input_ids"]


def test_separate_target_vocab(opus_folder, tmp_path):
    folder, _, _ = opus_folder
    for name in ("source.spm", "target.spm", "vocab.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    vocab = json.loads((folder / "vocab.json").read_text())
    target = {piece: len(vocab) - 1 - i for piece, i in vocab.items()}  # reversed ids
    target.update({"</s>": EOS, "<unk>": 1, "<pad>": len(vocab) - 1})
    (tmp_path / "target_vocab.json").write_text(json.dumps(target))
    hf_tok = transformers.MarianTokenizer(str(tmp_path / "source.spm"), str(tmp_path / "target.spm"),
                                          str(tmp_path / "vocab.json"), str(tmp_path / "target_vocab.json"),
                                          separate_vocabs=True)
    hf_tok.save_pretrained(tmp_path)
    tok = MarianTokenizer.from_folder(tmp_path)
    assert tok.to_dict()["target_vocab"] == "target_vocab.json" and len(tok.files()) == 4
    ids = [target[p] for p in ("▁the", "▁house") if p in target] + list(range(2, 20))
    assert tok.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True)
    assert tok.encode(TEXTS[0]) == hf_tok(TEXTS[0])["input_ids"]


def test_tokenizer_errors(opus_folder, tmp_path, monkeypatch):
    folder, _, _ = opus_folder
    with pytest.raises(ManifestError, match="needs the folder"):
        MarianTokenizer.from_dict(MarianTokenizer.from_folder(folder).to_dict())
    with pytest.raises(ManifestError, match="vocab.json is missing"):
        MarianTokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0}))
    with pytest.raises(ManifestError, match="has no <unk>, </s>, <pad>"):
        MarianTokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({"<unk>": 0, "</s>": 1, "<pad>": 2}))
    (tmp_path / "source.spm").write_bytes(b"garbage")
    with pytest.raises(ManifestError, match="not a SentencePiece model"):
        MarianTokenizer.from_folder(tmp_path)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ConfigError, match=r"pip install 'tfm-export\[sentencepiece\]'"):
        MarianTokenizer.from_folder(folder)


def test_import_carries_the_tokenizer(opus_folder):
    folder, _, hf_tok = opus_folder
    ckpt = load_any(folder)
    assert ckpt.tokenizer["type"] == "marian" and ckpt.meta["tokenizer_folder"] == str(folder)
    assert ckpt.tokenizer["pad_id"] == hf_tok.pad_token_id == ckpt.config.src_pad_id


@pytest.mark.slow
@pytest.mark.long  # the trained Marian family fixture and test_marian_published cover it in make test
def test_export_carries_the_tokenizer_and_matches_generate(opus_folder, tmp_path):
    folder, model, hf_tok = opus_folder
    out = tmp_path / "export"
    result = run_cli_ok(folder, "-o", out)
    assert "layout marian" in result.output
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in out.iterdir()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["type"] == "marian"
    runtime = open_export(out, device="cpu")
    batch = hf_tok(TEXTS, return_tensors="pt", padding=True)
    sources = [hf_tok(t)["input_ids"] for t in TEXTS]
    # The folder's defaults (4 beams, forced EOS) on both sides, then explicitly greedy.
    default = model.generate(**batch, max_new_tokens=10)[:, 1:].tolist()
    assert runtime.generate_ids(sources, 10) == [r[: r.index(EOS)] if EOS in r else r for r in default]
    assert manifest["validation"]["default"]["equal"] and manifest["validation"]["greedy"]["equal"]
    expected = hf_greedy(model, batch["input_ids"], batch["attention_mask"], 10)
    assert runtime.generate_ids(sources, 9, config=GREEDY) == expected
    texts = runtime.translate(TEXTS, max_new_tokens=9, config=GREEDY)
    assert texts == [hf_tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=False) for ids in expected]
    generated = run_cli("generate", out, "--text", TEXTS[0], "--json", "--device", "cpu", "--max-new-tokens", "9",
                        "--greedy")
    assert generated.exit_code == 0 and json.loads(generated.output)["text"] == texts[0]
    # The copied tokenizer files are recorded with their hashes: --force removes them only while unchanged.
    assert sorted(manifest["files"]) == ["source.spm", "source.tokenizer.json", "target.spm", "vocab.json"]
    (out / "target.spm").write_bytes(b"edited by the user")
    run_cli_ok(folder, "-o", out, "--force", "--no-validate")
    kept = [p for p in tmp_path.iterdir() if p.name.startswith(".export.old-")]
    assert len(kept) == 1 and [p.name for p in kept[0].iterdir()] == ["target.spm"]
    assert (kept[0] / "target.spm").read_bytes() == b"edited by the user"


def test_runtime_files_for_node(opus_folder, tmp_path, caplog):
    """source.tokenizer.json and the "sentencepiece" section (text.spm_json): a standard tokenizer.json whose
    pieces the tokenizers library finds on plain text, a dict form that round-trips; a model the conversion
    cannot reproduce (BPE) gets none, with a warning, and the export stays ids only in Node."""
    from tokenizers import Tokenizer

    folder, _, _ = opus_folder
    tok = MarianTokenizer.from_folder(folder)
    data, written = tok.write_runtime_files(tmp_path)
    assert written == ["source.tokenizer.json"] and data["sentencepiece"]["target"]["unk"] == "<unk>"
    assert MarianTokenizer.from_dict(json.loads(json.dumps(data)), folder).to_dict() == data
    rust = Tokenizer.from_file(str(tmp_path / "source.tokenizer.json"))
    for text in ("the house", "green cat grows bread", "eine Katze, das Haus!"):
        assert rust.encode(text, add_special_tokens=False).tokens == tok.source.encode(text, out_type=str)
    with pytest.raises(ManifestError, match="sentencepiece section is malformed"):
        MarianTokenizer.from_dict({**data, "sentencepiece": {"source": {}}}, folder)

    bpe = tmp_path / "bpe"
    bpe.mkdir()
    for name in ("target.spm", "vocab.json", "tokenizer_config.json"):
        (bpe / name).write_bytes((folder / name).read_bytes())
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["the house", "green cat grows bread"] * 20),
                                   model_prefix=str(bpe / "source"), vocab_size=30, model_type="bpe",
                                   minloglevel=2, hard_vocab_limit=False)
    (bpe / "source.model").rename(bpe / "source.spm")
    with caplog.at_level(logging.WARNING, logger="tfm_export.text.marian"):
        data, written = MarianTokenizer.from_folder(bpe).write_runtime_files(tmp_path / "out")
    assert written == [] and "sentencepiece" not in data
    assert "Node and the browser will take token ids only" in caplog.text and "not a unigram model" in caplog.text
