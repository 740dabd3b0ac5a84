"""Hugging Face encoder-decoder folders saved the way the real ones are published (tests only).

Nine families, each with its real tokenizer class and files, its real special-token ids and the
`generation_config.json` of a published checkpoint, each one `Fixture` record of FIXTURES (at the end;
FAMILIES, PUBLISHED, LANGS, TARGETS, SHAPES and T5_FAMILY are read from them):

    random_folder(family, folder, size="tiny" | "layers")  random weights, saved as published
    trained_folder(family)                                 the committed folder, trained on a small task
    hf_model(folder), hf_tokenizer(folder)                 loaded by transformers, local files only
    sources(family)                                        strings for the tokenizer round trip
    task_examples(family)                                  held-out inputs of the task, with answers
    translate(model, tokenizer, family, examples)          transformers' generate, the family's way

The task (`spell`): integers 0..9999 in digits -> English words ("one thousand two hundred
thirty-four") or German words ("eintausendzweihundertvierunddreißig"). The target language is chosen
the family's way: a forced BOS language token (mbart50, m2m100, nllb: LANGS), a task prefix (T5 family:
"to German: 1234"), a >>de<< / >>en<< source token (marian). bart and pegasus spell English only.

tests/fixtures/train_fixtures.py builds the tokenizers and trains the committed folders;
tests/fixtures/README.md is their model card.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

from marian_fixtures import PUBLISHED as MARIAN_PUBLISHED
from marian_fixtures import marian as marian_model
from marian_fixtures import train_spm, write_vocab

HERE = Path(__file__).resolve().parent
TRAINED = HERE / "fixtures" / "trained"
SEED = 1234

# --------------------------------------------------------------------------------------------------
# The task: numbers in digits -> words

_EN = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
       "sixteen seventeen eighteen nineteen").split()
_EN_TENS = "- - twenty thirty forty fifty sixty seventy eighty ninety".split()
_DE = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn fünfzehn "
       "sechzehn siebzehn achtzehn neunzehn").split()
_DE_TENS = "- - zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()


def _english(n: int) -> str:
    if n < 20:
        return _EN[n]
    if n < 100:
        return _EN_TENS[n // 10] + (f"-{_EN[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{_EN[n // 100]} hundred" + (f" {_english(n % 100)}" if n % 100 else "")
    return f"{_english(n // 1000)} thousand" + (f" {_english(n % 1000)}" if n % 1000 else "")


def _german(n: int, last: bool = True) -> str:
    """German number words, one word; `last` is False before "hundert"/"tausend" (ein, not eins)."""
    if n == 1:
        return "eins" if last else "ein"
    if n < 20:
        return _DE[n]
    if n < 100:
        unit = n % 10
        return (("ein" if unit == 1 else _DE[unit]) + "und" if unit else "") + _DE_TENS[n // 10]
    if n < 1000:
        return _german(n // 100, False) + "hundert" + (_german(n % 100) if n % 100 else "")
    return _german(n // 1000, False) + "tausend" + (_german(n % 1000) if n % 1000 else "")


def spell(n: int, lang: str = "en") -> str:
    """0 <= n <= 9999 in words: English (American, no "and") or German (num2words' spelling)."""
    if not 0 <= n <= 9999:
        raise ValueError(f"{n} is outside 0..9999")
    return _english(n) if lang == "en" else "null" if n == 0 else _german(n)


# Multilingual families (Fixture.codes; LANGS): the target is forced as the first token
# (forced_bos_token_id = tokenizer.convert_tokens_to_ids(lang_token(family, code))) and the
# source code is set with tokenizer.src_lang = code. Digits are tagged as English.
T5_PREFIX = {"en": "to English: ", "de": "to German: "}
MARIAN_PREFIX = {"en": ">>en<< ", "de": ">>de<< "}


class Example(NamedTuple):
    number: int
    lang: str      # "en" or "de": the language of the answer
    source: str    # what the tokenizer is given (with the family's prefix, if it has one)
    target: str    # the answer: spell(number, lang)


def lang_code(family: str, lang: str) -> str | None:
    """The family's language code of "en"/"de" (en_XX, __en__'s "en", eng_Latn); None if it has none."""
    codes = fixture(family).codes
    return codes[lang] if codes else None


def lang_token(family: str, code: str) -> str:
    """The vocabulary token of a language code: m2m100 wraps it (__de__), mbart50 and nllb do not."""
    return fixture(family).lang_token.format(code)


def example(family: str, number: int, lang: str) -> Example:
    prefix = fixture(family).prefix
    text = (prefix[lang] if prefix else "") + str(number)
    return Example(number, lang, text, spell(number, lang))


def split_numbers(seed: int = SEED) -> tuple[list[int], list[int]]:
    """(train, held-out): 500 numbers of 100..9999 held out (never trained on, in any language)."""
    pool = list(range(100, 10_000))
    random.Random(seed).shuffle(pool)
    heldout = pool[:500]
    return sorted(set(range(10_000)) - set(heldout)), heldout


def task_examples(family: str, count: int = 20) -> list[Example]:
    """`count` held-out inputs of the family's task, the target languages taken in turn."""
    langs = TARGETS[family]
    return [example(family, n, langs[i % len(langs)]) for i, n in enumerate(split_numbers()[1][:count])]


# --------------------------------------------------------------------------------------------------
# Strings for the tokenizer round trip: unicode of many kinds, whitespace runs, the empty string.

UNICODE = [
    "", " ", "Hello world.", "  leading and trailing spaces  ", "several   spaces\tand a tab",
    "two\nlines", "café crème brûlée", "naïve façade, Ærøskøbing", "Straße, Äpfel, Öl, Übermut",
    "Dvořák, Łódź, Ångström", "e\u0301 and a\u0308: combining marks", "ñ vs n\u0303",
    "日本語のテキストです", "中文测试句子", "한국어 문장", "Ελληνικά γράμματα", "Русский текст",
    "עברית", "العربية", "हिन्दी", "ภาษาไทย", "emoji 😀🎉👍", "skin tone 👍🏽 and family 👨\u200d👩\u200d👧",
    "flags 🇩🇪🇬🇧", "math: ∑ x² ≤ ∞, ½ + ¼", "€100, £50, ¥20, $5", "«guillemets» “curly” ‘single’",
    "dash — en – hyphen -", "ellipsis… done", "non\u00a0breaking space", "zero\u200bwidth space",
    "ligature \ufb01ne", "fullwidth ＡＢＣ１２３", "circled ① ②", "MiXeD CaSe 123 abc",
    "URL https://example.com/a?b=c&d=e", "email someone@example.org", "tabs\t\tand\t\ttabs",
    "punctuation!? (yes) [no] {maybe}", "numbers 3.14 and 2,718", "quote \"double\" 'single'",
    "underscores_and-dashes", "#hashtag @mention", "ünïcödé ëvërÿwhërë",
]
# Characters outside the task whose nmt_nfkc rules the SentencePiece models keep (spm_rules).
_RULE_BLOCKS = ((0x00, 0x100), (0x2000, 0x2070), (0xFB00, 0xFB07), (0xFF01, 0xFF5F), (0x2460, 0x2474))


def sources(family: str) -> list[str]:
    """At least 50 strings for the tokenizer round trip: UNICODE, then 20 task inputs of the family."""
    return UNICODE + [e.source for e in task_examples(family)]


def task_corpus(family: str, langs: tuple[str, ...] | None = None) -> tuple[list[str], list[str]]:
    """(sources, targets) of every number 0..9999 in the family's task: what tokenizers train on."""
    langs = TARGETS[family] if langs is None else langs
    pairs = [example(family, n, lang) for n in range(10_000) for lang in langs]
    return [p.source for p in pairs], [p.target for p in pairs]


def translate(model, tokenizer, family: str, examples: list[Example], **generate) -> list[str]:
    """transformers' generate on the examples, the target language chosen the family's way (for LANGS:
    tokenizer.src_lang = the source code, forced_bos_token_id = the target code's id), decoded without
    special tokens. `generate` overrides the folder's generation_config (e.g. num_beams=1)."""
    answers: list[str] = [""] * len(examples)
    for lang in dict.fromkeys(e.lang for e in examples):
        rows = [i for i, e in enumerate(examples) if e.lang == lang]
        settings = dict(generate)
        if family in LANGS:
            tokenizer.src_lang = LANGS[family][0]
            settings.setdefault("forced_bos_token_id",
                                tokenizer.convert_tokens_to_ids(lang_token(family, lang_code(family, lang))))
        batch = tokenizer([examples[i].source for i in rows], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**batch, **settings)
        for i, text in zip(rows, tokenizer.batch_decode(ids, skip_special_tokens=True)):
            answers[i] = text.strip()
    return answers


# --------------------------------------------------------------------------------------------------
# Tokenizers, built the family's way and saved with save_pretrained

SP_VOCAB = 360  # SentencePiece pieces (before the family's specials, language codes, extra ids)


def spm_rules(path: Path) -> Path:
    """The real nmt_nfkc rules of SentencePiece, restricted to keys made of the characters of UNICODE
    and a few blocks (Latin-1, general punctuation, ligatures, fullwidth ASCII, circled digits).

    The whole table adds 240 KB to every .model file and 320 KB to tokenizer.json; this one a few KB,
    with the same normalisation of every fixture string."""
    import sentencepiece as spm

    allowed = {c for s in UNICODE for c in s} | {chr(c) for a, b in _RULE_BLOCKS for c in range(a, b)}
    rules = sorted((k, v) for k, v in spm.SentencePieceNormalizer(rule_name="nmt_nfkc").Decompile()
                   if set(k) <= allowed)
    hexes = lambda s: " ".join(f"{ord(c):X}" for c in s)  # noqa: E731
    path.write_text("".join(f"{hexes(k)}\t{hexes(v)}\n" for k, v in rules), encoding="utf-8")
    return path


def train_sentencepiece(path: Path, corpus: list[str], model_type: str, ids: dict[str, int],
                        vocab_size: int = SP_VOCAB) -> Path:
    """A SentencePiece model (unigram or bpe) with the family's control ids, saved as `path`."""
    import sentencepiece as spm

    work = path.parent / f".{path.stem}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        settings = dict(bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1) | ids
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus), model_prefix=str(work / "m"), vocab_size=vocab_size,
            model_type=model_type, character_coverage=1.0, split_digits=True, hard_vocab_limit=False,
            normalization_rule_tsv=str(spm_rules(work / "rules.tsv")), num_threads=1, minloglevel=2,
            **settings)
        shutil.move(work / "m.model", path)
    finally:
        shutil.rmtree(work)
    return path


def _clean_spm(path: Path) -> None:
    """SentencePiece keeps the training paths (model_prefix, the rules file) in the model: the file's
    stem instead, and no rules path (the rules themselves are compiled into precompiled_charsmap)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    proto.trainer_spec.model_prefix = path.stem
    proto.trainer_spec.ClearField("input")
    proto.normalizer_spec.ClearField("normalization_rule_tsv")
    path.write_bytes(proto.SerializeToString())


def _corpus(family: str) -> tuple[list[str], list[str]]:
    src, tgt = task_corpus(family)
    return src + UNICODE, tgt + UNICODE


def build_tokenizer(family: str, folder: Path, corpus: tuple[list[str], list[str]] | None = None):
    """Train the family's tokenizer on its task corpus (and UNICODE), or on `corpus` (sources, targets:
    another task's, tests/copy_fixtures.py), and save_pretrained it in `folder` (Fixture.tokenizer builds it).

    Returns the tokenizer as AutoTokenizer loads it back from `folder`."""
    record = fixture(family)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = folder / ".tokenizer"
    stage.mkdir()
    try:
        src, tgt = _corpus(family) if corpus is None else (corpus[0] + UNICODE, corpus[1] + UNICODE)
        tok = record.tokenizer(record, stage, src, tgt)
        tok.save_pretrained(folder)
        # transformers 5 saves tokenizer.json (+ tokenizer_config.json) only; the published folders also
        # hold the files it was converted from
        for name in ("vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model"):
            if (stage / name).exists() and not (folder / name).exists():
                shutil.copyfile(stage / name, folder / name)
        for name in ("source.spm", "target.spm", "sentencepiece.bpe.model", "spiece.model"):
            if (folder / name).exists():
                _clean_spm(folder / name)
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        for key in ("is_local", "local_files_only"):  # from_pretrained(stage)'s, not the tokenizer's
            config.pop(key, None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                      encoding="utf-8")
    finally:
        shutil.rmtree(stage)
    return hf_tokenizer(folder)


# Each family's tokenizer, trained in `stage` (Fixture.tokenizer): (record, stage, sources, targets) -> it.

def marian_tokenizer(record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    """OPUS-MT: two unigram models (full nmt_nfkc), one joint vocab.json."""
    import transformers

    train_spm(stage, "source", [str(n) for n in range(10_000)] + UNICODE, 240)  # codes are not spm's
    train_spm(stage, "target", tgt, SP_VOCAB)
    write_vocab(stage / "vocab.json", [stage / "source.spm", stage / "target.spm"],
                tuple(record.prefix[lang].strip() for lang in record.targets))
    return transformers.MarianTokenizer(str(stage / "source.spm"), str(stage / "target.spm"), str(stage / "vocab.json"))


def bart_tokenizer(record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    """Byte-level BPE as GPT-2/RoBERTa/BART; <mask> the last id."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(src + tgt, vocab_size=SP_VOCAB + 40, min_frequency=2, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    vocab = json.loads(bpe.to_str())["model"]["vocab"]
    vocab["<mask>"] = len(vocab)
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(bpe.to_str())["model"]["merges"]]
    (stage / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (stage / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return transformers.BartTokenizer.from_pretrained(stage)


def _fairseq_spm(stage: Path, corpus: list[str], kind: str) -> Path:
    """fairseq's layout: spm <unk>=0 <s>=1 </s>=2, shifted by one in the vocabulary."""
    return train_sentencepiece(stage / "sentencepiece.bpe.model", corpus, kind, dict(unk_id=0, bos_id=1, eos_id=2))


def mbart50_tokenizer(record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    import transformers

    _fairseq_spm(stage, src + tgt, "unigram")
    return transformers.MBart50Tokenizer.from_pretrained(stage)  # codes then <mask> last, as the real one


def nllb_tokenizer(record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    """The codes are not added without extra_special_tokens; <mask> after them, as the real one."""
    import transformers
    from tokenizers import AddedToken
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    _fairseq_spm(stage, src + tgt, "bpe")
    tok = transformers.NllbTokenizer.from_pretrained(stage, extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES),
                                                     mask_token=None)
    tok.add_special_tokens({"mask_token": AddedToken("<mask>", lstrip=True, normalized=True, special=True)})
    return tok


def m2m100_tokenizer(record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    """vocab.json (fairseq dictionary) + the spm; no tokenizer.json."""
    import sentencepiece as spm
    import transformers
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    _fairseq_spm(stage, src + tgt, "bpe")
    proc = spm.SentencePieceProcessor(model_file=str(stage / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(3, proc.get_piece_size()):
        vocab.setdefault(proc.id_to_piece(i), len(vocab))
    (stage / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    # the language tokens are special only when named (as the published tokenizer_config.json does);
    # otherwise decode(..., skip_special_tokens=True) keeps __de__
    return transformers.M2M100Tokenizer(
        str(stage / "vocab.json"), str(stage / "sentencepiece.bpe.model"),
        extra_special_tokens=[record.lang_token.format(code) for code in FAIRSEQ_LANGUAGE_CODES["m2m100"]])


def spiece_tokenizer(cls: str, record: Fixture, stage: Path, src: list[str], tgt: list[str]):
    """Pegasus and T5: spm <pad>=0 </s>=1 <unk>=2, then the class's extra tokens (Pegasus: <mask_1>,
    <mask_2>, <unk_2>..<unk_102>; T5: <extra_id_99>..<extra_id_0>)."""
    import transformers

    train_sentencepiece(stage / "spiece.model", src + tgt, "unigram", dict(pad_id=0, eos_id=1, unk_id=2))
    return getattr(transformers, cls).from_pretrained(stage)


def hf_tokenizer(folder: Path):
    """AutoTokenizer of a folder, local files only."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def hf_model(folder: Path):
    """AutoModelForSeq2SeqLM of a folder in eval mode, local files only."""
    import transformers

    return transformers.AutoModelForSeq2SeqLM.from_pretrained(str(folder), local_files_only=True).eval()


# --------------------------------------------------------------------------------------------------
# Models: the family's config, sizes, and published generation_config.json

class Shape(NamedTuple):
    d_model: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    ffn: int
    d_kv: int = 0  # T5 family: the size of a head (heads * d_kv need not be d_model)


def model_vocab(family: str, tokenizer) -> int:
    """The model's vocab_size for a tokenizer, as the published configs have it: T5 pads to a multiple
    of 128 (t5-small 32128 for 32100 tokens), m2m100 adds 8 "madeup words" (128112), nllb 2 (256206)."""
    record = fixture(family)
    size = max(tokenizer.get_vocab().values()) + 1
    return -(-size // record.vocab_multiple) * record.vocab_multiple + record.extra_vocab


def _t5_settings(record: Fixture, vocab: int, shape: Shape) -> dict[str, Any]:
    """T5Config / MT5Config settings of the published checkpoints that Fixture.settings does not set."""
    d, enc, dec, heads, ffn, d_kv = shape
    return dict(vocab_size=vocab, d_model=d, d_kv=d_kv, d_ff=ffn, num_layers=enc, num_decoder_layers=dec,
                num_heads=heads, dropout_rate=0.0, relative_attention_num_buckets=32,
                relative_attention_max_distance=128, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                tie_word_embeddings=not record.untied)


def _bart_settings(record: Fixture, vocab: int, shape: Shape) -> dict[str, Any]:
    """The sizes of a BART-like config (Marian, BART, mBART, M2M100, Pegasus)."""
    d, enc, dec, heads, ffn, _ = shape
    return dict(vocab_size=vocab, d_model=d, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
                decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, dropout=0.0,
                attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=record.max_positions)


def model_config(family: str, vocab: int, shape: Shape, **changes):
    """The family's transformers config (architecture settings of the published checkpoint)."""
    import transformers

    record = fixture(family)
    common = (_t5_settings if record.t5 else _bart_settings)(record, vocab, shape)
    special = {**record.settings, **(record.vocab_settings(vocab) if record.vocab_settings else {}), **record.legacy}
    return getattr(transformers, record.config_class)(**(common | special | changes))


def set_generation_config(model, family: str) -> None:
    """model.generation_config := the published generation_config.json of the family."""
    import transformers

    record = fixture(family)
    values = dict(record.published)
    if record.generation_ids:
        values |= record.generation_ids(model.config.pad_token_id)
    model.generation_config = transformers.GenerationConfig(**values)


def build_model(family: str, vocab: int, shape: Shape, seed: int = 0, init_std: float | None = None):
    """A model of the family with random weights (seeded), its published generation_config set.

    init_std (T5: initializer_factor) defaults to the family's 0.02 (T5: 1.0)."""
    import transformers

    record = fixture(family)
    changes = {}
    if init_std is not None:
        changes["initializer_factor" if record.t5 else "init_std"] = init_std
    config = model_config(family, vocab, shape, **changes)
    torch.manual_seed(seed)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    if record.untied:
        untie_lm_head(model, (init_std or 1.0) * config.d_model ** -0.5)
    set_generation_config(model, family)
    return model.eval()


# T5 v1.1 (flan-t5, mt5: Fixture.untied) has an lm_head of its own. transformers 5 forces
# tie_word_embeddings=True on T5Config/MT5Config (scale_decoder_outputs keeps T5's d_model**-0.5 on the
# tied head) and unties on load only when the checkpoint holds a different lm_head.weight (with a
# warning): so the head is made a parameter of its own here, and save_folder writes the published
# "tie_word_embeddings": false.
def untie_lm_head(model, std: float) -> None:
    """Give a T5 model an lm_head of its own (random, seeded by the caller), saved as lm_head.weight."""
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * std)
    model.all_tied_weights_keys.pop("lm_head.weight", None)


def save_folder(model, tokenizer_from: Path | None, folder: Path, family: str) -> Path:
    """save_pretrained (safetensors, with the published generation_config.json) + the tokenizer files
    of the folder `tokenizer_from` (None: they are in `folder` already)."""
    record = fixture(family)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    set_generation_config(model, family)
    model.save_pretrained(folder)
    if record.t5:  # as published: tie_word_embeddings as is, no scale_decoder_outputs (Fixture.untied)
        config = json.loads((folder / "config.json").read_text())
        config["tie_word_embeddings"] = not record.untied
        config.pop("scale_decoder_outputs", None)
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tokenizer_from is not None:
        for name in tokenizer_files(tokenizer_from):
            shutil.copyfile(Path(tokenizer_from) / name, folder / name)
    return folder


MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")


def tokenizer_files(folder: Path) -> list[str]:
    """The names of the files that tokenizer.save_pretrained wrote in a folder (all but MODEL_FILES)."""
    return sorted(p.name for p in Path(folder).iterdir() if p.is_file() and p.name not in MODEL_FILES)


# --------------------------------------------------------------------------------------------------
# The folders

def trained_folder(family: str) -> Path:
    """The committed folder of a family, trained on the task (tests/fixtures/README.md)."""
    folder = TRAINED / family
    if not (folder / "model.safetensors").exists():
        raise FileNotFoundError(f"{folder} is not trained: run tests/fixtures/train_fixtures.py {family}")
    return folder


def random_folder(family: str, folder: Path, size: str = "tiny", seed: int = 0, wide: bool = True) -> Path:
    """A folder of the family with random weights, saved as published: save_pretrained's files, the
    published generation_config.json and the tokenizer files of the trained folder (its vocabulary).

    size "tiny": d_model 32, 2 + 2 layers (mt5: 3 + 2); "layers": the heads and layer structure of the
    family's checkpoint, narrow, at most 6 + 6 layers (mt5 8 + 6) (SHAPES). marian uses
    marian_fixtures.marian. Multilingual families: see LANGS and translate for the target language.
    `wide`: weights drawn wider than transformers' initialisation (Fixture.random_std), so that greedy
    output depends on the source; else transformers' own initialisation (what a fresh model has)."""
    record = fixture(family)
    if size not in ("tiny", "layers"):
        raise ValueError(f"size is 'tiny' or 'layers', not {size!r}")
    source = TRAINED / family
    if (source / "config.json").exists():
        vocab = json.loads((source / "config.json").read_text())["vocab_size"]
    else:  # no trained folder (yet): build the tokenizer here
        source = Path(folder) / ".tokenizer-build"
        vocab = model_vocab(family, build_tokenizer(family, source))
    shape = SHAPES[size][family]
    if record.marian:  # marian_fixtures' model: its 0.3 init and final_logits_bias noise
        d, enc, dec, heads, ffn, _ = shape
        model = marian_model(vocab=vocab, seed=seed, d_model=d, encoder_layers=enc, decoder_layers=dec,
                             encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                             decoder_ffn_dim=ffn, max_position_embeddings=record.max_positions, scale_embedding=True,
                             activation_function="swish", **record.legacy)
    else:
        model = build_model(family, vocab, shape, seed=seed, init_std=record.random_std if wide else None)
    save_folder(model, source, folder, family)
    if source.name == ".tokenizer-build":
        shutil.rmtree(source)
    return Path(folder)


# --------------------------------------------------------------------------------------------------
# The families: one record each. A new family is one more record (and, when its tokenizer is built
# another way, one more tokenizer function above).

@dataclass(frozen=True)
class Fixture:
    """Everything the fixtures know of one family: its transformers classes and published settings,
    its task, and the sizes of its folders."""

    name: str  # the family's name here (FAMILIES)
    kind: str  # "bart" (a BART-like config), "t5" (T5Config / MT5Config) or "marian" (marian_fixtures)
    config_class: str  # transformers' config class
    tokenizer: Callable[..., Any]  # (record, stage, sources, targets) -> the trained tokenizer (build_tokenizer)
    published: dict[str, Any]  # generation_config.json of the published checkpoint (PUBLISHED)
    layers: Shape  # SHAPES["layers"]: the published checkpoint's layer structure, narrow
    settings: dict[str, Any] = field(default_factory=dict)  # its config.json's (ids, activation, ...)
    legacy: dict[str, Any] = field(default_factory=dict)  # BartConfig-era keys it still carries (ignored)
    targets: tuple[str, ...] = ("en", "de")  # the task's target languages (TARGETS)
    codes: dict[str, str] | None = None  # multilingual: "en"/"de" -> its language code (LANGS)
    lang_token: str = "{}"  # a language code's vocabulary token
    prefix: dict[str, str] | None = None  # the task's source prefix by target language
    max_positions: int = 0  # max_position_embeddings (BART-like)
    vocab_multiple: int = 1  # the published vocab_size is padded to a multiple of this (T5: 128) ...
    extra_vocab: int = 0  # ... and has this many ids more than the tokenizer (m2m100's madeup words)
    random_std: float | None = None  # init_std (T5: initializer_factor) of wide random folders
    untied: bool = False  # an lm_head of its own (T5 v1.1)
    tiny: Shape = Shape(32, 2, 2, 4, 64, 8)  # SHAPES["tiny"]
    trained: Shape = Shape(64, 2, 2, 4, 128, 16)  # SHAPES["trained"]: the committed folders
    vocab_settings: Callable[[int], dict[str, Any]] | None = None  # config settings that follow the vocab size
    generation_ids: Callable[[int], dict[str, Any]] | None = None  # generation_config ids that follow the pad id

    @property
    def t5(self) -> bool:
        return self.kind == "t5"

    @property
    def marian(self) -> bool:
        return self.kind == "marian"


def fixture(family: str) -> Fixture:
    if family not in FIXTURES:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FIXTURES)}")
    return FIXTURES[family]


def _marian_vocab_ids(vocab: int) -> dict[str, Any]:
    """OPUS-MT: the pad id is the last id and the decoder start."""
    return dict(pad_token_id=vocab - 1, decoder_start_token_id=vocab - 1, decoder_vocab_size=vocab)


def _marian_generation_ids(pad: int) -> dict[str, Any]:
    """OPUS-MT's generation_config.json bans its pad id, which also starts the decoder."""
    return dict(bad_words_ids=[[pad]], forced_eos_token_id=0, decoder_start_token_id=pad, pad_token_id=pad,
                eos_token_id=0, bos_token_id=0)


_FAIRSEQ_IDS = dict(bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
# t5-small, google/flan-t5-base, google/mt5-small: no max_length (transformers then stops at 20)
_T5_PUBLISHED = dict(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)

# Sizes ("layers": Shape): the layer structure of the named checkpoint, narrow: its heads (of 8
# dimensions) and its ffn : d_model ratio (4; flan-t5-base 2.67, mt5-small 2). Depth is what export time
# grows with (on the loaded 2-core machine, tfm-export --no-validate took 18 s for marian "tiny", 2 + 2,
# and 30 s for marian "layers", 6 + 6), so the 12 + 12 and 16 + 16 checkpoints get 6 + 6; mt5-small's
# 8 + 8 gets 8 + 6, to keep num_layers != num_decoder_layers. max_positions: at least the
# generation_config's max_length (beyond it, generate fails with an index error), the real value where
# the table is not saved (sinusoidal, computed); bart, mbart50 (learned, offset 2) and pegasus (a
# stored sinusoidal table) have 1024, 1024 and 512: 1024 rows of each side would outweigh the rest of
# the trained models. random_std: far above the defaults (0.02; T5 1.0) so that greedy tokens depend on
# the source; marian gets marian_fixtures' 0.3 and its final_logits_bias noise (the pre-LN families with
# scaled embeddings need more than bart's 0.3: at 0.3 every source gave the same greedy tokens).
# published: generation_config.json of the checkpoint named in each comment (v5 writes these keys, and
# the special ids); bart-large-cnn's min_length is 56: 3 here, as the answers are short.
FIXTURES: dict[str, Fixture] = {record.name: record for record in (
    Fixture(  # Helsinki-NLP/opus-mt-en-de: post-LN, sinusoidal positions, scaled embeddings, swish, pad = start
        "marian", "marian", "MarianConfig", marian_tokenizer, dict(MARIAN_PUBLISHED), Shape(64, 6, 6, 8, 256),
        dict(scale_embedding=True, activation_function="swish", eos_token_id=0, forced_eos_token_id=0,
             share_encoder_decoder_embeddings=True),
        dict(normalize_before=False, normalize_embedding=False, add_final_layer_norm=False,
             static_position_embeddings=True, add_bias_logits=False),
        prefix=MARIAN_PREFIX, max_positions=512, vocab_settings=_marian_vocab_ids,
        generation_ids=_marian_generation_ids,  # bad_words_ids, pad ids: per model
        trained=Shape(64, 2, 2, 4, 96)),  # its two full-nmt_nfkc .spm files take 490 KB
    Fixture(  # facebook/bart-large-cnn (bart-base's layers): post-LN, learned positions (offset 2),
        # layernorm_embedding, unscaled, gelu
        "bart", "bart", "BartConfig", bart_tokenizer,
        dict(num_beams=4, length_penalty=2.0, no_repeat_ngram_size=3, min_length=3, max_length=142,
             early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2, decoder_start_token_id=2,
             bos_token_id=0, eos_token_id=2, pad_token_id=1), Shape(96, 6, 6, 12, 384),
        dict(scale_embedding=False, activation_function="gelu", **_FAIRSEQ_IDS, forced_eos_token_id=2,
             forced_bos_token_id=0),
        dict(normalize_before=False, normalize_embedding=True, add_final_layer_norm=False,
             static_position_embeddings=False, add_bias_logits=False),
        targets=("en",), max_positions=256, random_std=0.3),
    Fixture(  # facebook/mbart-large-50-many-to-many-mmt: pre-LN, final norms, layernorm_embedding, learned
        # positions, scaled, gelu
        "mbart50", "bart", "MBartConfig", mbart50_tokenizer,
        dict(num_beams=5, max_length=200, early_stopping=True, forced_eos_token_id=2, **_FAIRSEQ_IDS),
        Shape(128, 6, 6, 16, 512),
        dict(scale_embedding=True, activation_function="gelu", **_FAIRSEQ_IDS, forced_eos_token_id=2),
        dict(normalize_before=True, normalize_embedding=True, add_final_layer_norm=True,
             static_position_embeddings=False),
        codes={"en": "en_XX", "de": "de_DE"}, max_positions=256, random_std=1.0),
    Fixture(  # facebook/m2m100_418M: pre-LN, sinusoidal positions with the padding offset, scaled, relu
        "m2m100", "bart", "M2M100Config", m2m100_tokenizer,
        dict(num_beams=5, max_length=200, early_stopping=True, **_FAIRSEQ_IDS), Shape(128, 6, 6, 16, 512),
        dict(scale_embedding=True, activation_function="relu", **_FAIRSEQ_IDS),
        codes={"en": "en", "de": "de"}, lang_token="__{}__", max_positions=1024, extra_vocab=8, random_std=1.0),
    Fixture(  # facebook/nllb-200-distilled-600M (greedy): M2M100's model, NllbTokenizer
        "nllb", "bart", "M2M100Config", nllb_tokenizer, dict(max_length=200, **_FAIRSEQ_IDS),
        Shape(128, 6, 6, 16, 512),
        dict(scale_embedding=True, activation_function="relu", **_FAIRSEQ_IDS, tokenizer_class="NllbTokenizer"),
        codes={"en": "eng_Latn", "de": "deu_Latn"}, max_positions=1024, extra_vocab=2, random_std=1.0),
    Fixture(  # google/pegasus-xsum: pre-LN, final norms, sinusoidal positions, scaled, relu
        "pegasus", "bart", "PegasusConfig", partial(spiece_tokenizer, "PegasusTokenizer"),
        dict(num_beams=8, length_penalty=0.6, max_length=64, forced_eos_token_id=1, decoder_start_token_id=0,
             eos_token_id=1, pad_token_id=0), Shape(128, 6, 6, 16, 512),
        dict(scale_embedding=True, activation_function="relu", pad_token_id=0, eos_token_id=1,
             decoder_start_token_id=0, forced_eos_token_id=1),
        dict(normalize_before=True, normalize_embedding=False, add_final_layer_norm=True,
             static_position_embeddings=True),
        targets=("en",), max_positions=128, random_std=1.0),
    Fixture(  # t5-small: 6+6, 8 heads of 64, 512/2048
        "t5", "t5", "T5Config", partial(spiece_tokenizer, "T5Tokenizer"), _T5_PUBLISHED, Shape(64, 6, 6, 8, 256, 8),
        dict(feed_forward_proj="relu"), prefix=T5_PREFIX, vocab_multiple=128, random_std=5.0),
    Fixture(  # google/flan-t5-base: 12+12, 12 heads of 64, 768/2048
        "flan_t5", "t5", "T5Config", partial(spiece_tokenizer, "T5Tokenizer"), _T5_PUBLISHED,
        Shape(96, 6, 6, 12, 256, 8), dict(feed_forward_proj="gated-gelu"), prefix=T5_PREFIX, vocab_multiple=128,
        random_std=5.0, untied=True),
    Fixture(  # google/mt5-small: 8+8, 6 heads of 64 (384 != 512), 512/1024
        "mt5", "t5", "MT5Config", partial(spiece_tokenizer, "T5Tokenizer"), _T5_PUBLISHED,
        Shape(64, 8, 6, 6, 128, 8),
        dict(feed_forward_proj="gated-gelu", tokenizer_class="T5Tokenizer"),  # as google/mt5-small's config.json
        prefix=T5_PREFIX, vocab_multiple=128, random_std=5.0, untied=True,
        tiny=Shape(32, 3, 2, 3, 64, 8), trained=Shape(64, 3, 2, 3, 128, 16)),
)}

# The records' fields as the tables the tests read.
FAMILIES = tuple(FIXTURES)
T5_FAMILY = tuple(f for f, r in FIXTURES.items() if r.t5)
UNTIED = tuple(f for f, r in FIXTURES.items() if r.untied)
TARGETS = {f: r.targets for f, r in FIXTURES.items()}
LANGS = {f: (r.codes["en"], [r.codes[lang] for lang in r.targets]) for f, r in FIXTURES.items() if r.codes}
PUBLISHED = {f: r.published for f, r in FIXTURES.items()}
SHAPES = {size: {f: getattr(r, size) for f, r in FIXTURES.items()} for size in ("tiny", "trained", "layers")}
