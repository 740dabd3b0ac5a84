"""Tiny random MarianMT models and real SentencePiece files, built with `transformers` (tests only)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

EOS, UNK = 0, 1
BASE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64, dropout=0.0,
            init_std=0.3)  # wider than the default 0.02, so that greedy tokens depend on the source
# generation_config.json as OPUS-MT folders are published (Helsinki-NLP/opus-mt-*): beam search, the pad
# id banned, a long max_length, renormalised logits; forced_eos_token_id and the pad id are set per model.
PUBLISHED = dict(num_beams=4, max_length=512, renormalize_logits=True)
WORDS = ["the house", "a small cat", "green trees grow", "we eat bread", "das Haus", "eine Katze", "grüne Bäume"]


def marian(vocab: int = 40, seed: int = 0, bad_pad: bool = False, forced_eos: bool = True,
           generation: dict | None = None, **changes):
    """A random MarianMTModel in eval mode; the pad id (vocab - 1) is the decoder start, as in OPUS-MT.

    Its generation_config is a published folder's (PUBLISHED, the pad id in bad_words_ids) with
    `generation`'s changes; `bad_pad` makes the banned pad id win wherever it is not banned."""
    import transformers

    settings = dict(BASE, vocab_size=vocab, decoder_vocab_size=vocab, pad_token_id=vocab - 1, eos_token_id=EOS,
                    decoder_start_token_id=vocab - 1)
    settings.update(changes)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings)).eval()
    with torch.no_grad():  # transformers initialises this bias to zeros; make it count
        model.final_logits_bias.normal_(0, 0.5)
        if bad_pad:  # without the ban, greedy decoding would emit the pad id
            model.final_logits_bias[0, vocab - 1] += 20.0
    # Generation settings live in generation_config (written to generation_config.json).
    settings = dict(PUBLISHED, bad_words_ids=[[settings["pad_token_id"]]], **(generation or {}))
    for name, value in settings.items():
        setattr(model.generation_config, name, value)
    model.generation_config.forced_eos_token_id = EOS if forced_eos else None
    return model


def save(model, folder: Path, weights: str = "safetensors") -> Path:
    """save_pretrained, then (for "bin") the same tensors as pytorch_model.bin, as transformers 4 wrote
    them; transformers 5 writes safetensors only."""
    from safetensors.torch import load_file

    model.save_pretrained(folder)
    if weights == "bin":
        torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    return folder


def padded_batch(vocab: int = 40, seed: int = 1, pad: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids (3, 8) ending in EOS, rows 1 and 2 right-padded; and the attention mask."""
    pad = vocab - 1 if pad is None else pad
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, vocab - 1, (3, 8), generator=gen)
    src[:, -1] = EOS
    src[1, 5:] = pad
    src[1, 4] = EOS
    src[2, 2:] = pad
    src[2, 1] = EOS
    return src, (src != pad).long()


def hf_greedy(model, src: torch.Tensor, mask: torch.Tensor, steps: int) -> list[list[int]]:
    """transformers' greedy generate, without the decoder start token and from EOS on."""
    out = model.generate(input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=steps)
    rows = out[:, 1:].tolist()
    return [r[: r.index(EOS)] if EOS in r else r for r in rows]


def train_spm(folder: Path, prefix: str, corpus: list[str], vocab_size: int) -> None:
    """A tiny unigram SentencePiece model saved as `prefix`.spm (Marian's file name)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(folder / prefix),
                                   vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                                   bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2,
                                   hard_vocab_limit=False)
    (folder / f"{prefix}.model").rename(folder / f"{prefix}.spm")


def write_vocab(path: Path, spm_files: list[Path], extra: tuple[str, ...] = ()) -> dict[str, int]:
    """vocab.json as OPUS-MT has it: </s> 0, <unk> 1, the pieces, language codes, <pad> last."""
    import sentencepiece as spm

    vocab = {"</s>": EOS, "<unk>": UNK}
    for name in spm_files:
        proc = spm.SentencePieceProcessor(model_file=str(name))
        for i in range(proc.get_piece_size()):
            vocab.setdefault(proc.id_to_piece(i), len(vocab))
    for token in extra:
        vocab.setdefault(token, len(vocab))
    vocab["<pad>"] = len(vocab)
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return vocab


def pair_folder(folder: Path, sources: list[str], targets: list[str], pair: tuple[str, str], seed: int) -> Path:
    """A single-pair OPUS-MT folder (its tokenizer_config names the pair, no >>xx<< tokens): SentencePiece files
    trained on lines of three of `sources` / `targets`, a random model of `seed`. The same arguments make the same
    folder, whose export conftest's graph cache then makes once (test_serve_multi's, test_serve_libretranslate's)."""
    import warnings

    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    lines = lambda words, step: [" ".join(words[(i * step + j) % len(words)] for j in range(3))  # noqa: E731
                                 for i in range(300)]
    train_spm(folder, "source", lines(sources, 7), 28)
    train_spm(folder, "target", lines(targets, 5), 24)
    vocab = write_vocab(folder / "vocab.json", [folder / "source.spm", folder / "target.spm"])
    marian(vocab=len(vocab), seed=seed, bad_pad=True, scale_embedding=True).save_pretrained(folder)
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses": transformers' own tokenising only
        warnings.simplefilter("ignore")
        tokenizer = transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                                 str(folder / "vocab.json"), source_lang=pair[0], target_lang=pair[1])
    tokenizer.save_pretrained(folder)
    return folder


# Helsinki-NLP/opus-mt-*'s size: 6 + 6 layers of 512 wide, 8 heads, ffn 2048, 512 positions.
OPUS_MT = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
               encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512, init_std=0.02)


def marian_folder(folder: Path, seed: int = 5, vocab_size: int | None = None, **sizes) -> Path:
    """A downloaded-looking OPUS-MT folder: weights, configs, source/target.spm, vocab.json. `vocab_size`:
    vocab.json padded to that many ids (opus-mt's are 15k..60k; the SentencePiece files stay small);
    `sizes`: MarianConfig changes (OPUS_MT for an opus-mt-sized model)."""
    import transformers

    sources = [" ".join(WORDS[(i * 7 + j) % 4] for j in range(3)) for i in range(300)]
    targets = [" ".join(WORDS[4 + (i * 5 + j) % 3] for j in range(3)) for i in range(300)]
    train_spm(folder, "source", sources, 28)
    train_spm(folder, "target", targets, 24)
    spm_files, codes = [folder / "source.spm", folder / "target.spm"], (">>de<<", ">>nl<<")
    vocab = write_vocab(folder / "vocab.json", spm_files, codes)
    if vocab_size and vocab_size > len(vocab):  # pieces the spm files never produce, before <pad>
        filler = tuple(f"▁piece{i}" for i in range(vocab_size - len(vocab)))
        vocab = write_vocab(folder / "vocab.json", spm_files, codes + filler)
    model = marian(vocab=len(vocab), seed=seed, bad_pad=True, scale_embedding=True, activation_function="swish",
                   **sizes)
    model.save_pretrained(folder)
    tok = transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                       str(folder / "vocab.json"))
    tok.save_pretrained(folder)  # writes tokenizer_config.json, as a downloaded folder has
    return folder
