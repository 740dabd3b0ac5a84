"""Hugging Face encoder-decoder folders saved the way the real ones are published (tests only).

Nine families, each with its real tokenizer class and files, its real special-token ids and the
`generation_config.json` of a published checkpoint (see FAMILIES and PUBLISHED):

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
from pathlib import Path
from typing import NamedTuple

import torch

from marian_fixtures import PUBLISHED as MARIAN_PUBLISHED
from marian_fixtures import marian as marian_model
from marian_fixtures import train_spm, write_vocab

HERE = Path(__file__).resolve().parent
TRAINED = HERE / "fixtures" / "trained"
FAMILIES = ("marian", "bart", "mbart50", "m2m100", "nllb", "pegasus", "t5", "flan_t5", "mt5")
T5_FAMILY = ("t5", "flan_t5", "mt5")
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


# The target languages of each family's task, and how the target is chosen.
TARGETS = {family: ("en", "de") for family in FAMILIES} | {"bart": ("en",), "pegasus": ("en",)}
# Multilingual families: (source code, [target codes]); the target is forced as the first token
# (forced_bos_token_id = tokenizer.convert_tokens_to_ids(lang_token(family, code))) and the
# source code is set with tokenizer.src_lang = code. Digits are tagged as English.
LANGS = {"mbart50": ("en_XX", ["en_XX", "de_DE"]), "m2m100": ("en", ["en", "de"]),
         "nllb": ("eng_Latn", ["eng_Latn", "deu_Latn"])}
_CODES = {"mbart50": {"en": "en_XX", "de": "de_DE"}, "m2m100": {"en": "en", "de": "de"},
          "nllb": {"en": "eng_Latn", "de": "deu_Latn"}}
_T5_PREFIX = {"en": "to English: ", "de": "to German: "}
_MARIAN_PREFIX = {"en": ">>en<< ", "de": ">>de<< "}


class Example(NamedTuple):
    number: int
    lang: str      # "en" or "de": the language of the answer
    source: str    # what the tokenizer is given (with the family's prefix, if it has one)
    target: str    # the answer: spell(number, lang)


def lang_code(family: str, lang: str) -> str | None:
    """The family's language code of "en"/"de" (en_XX, __en__'s "en", eng_Latn); None if it has none."""
    return _CODES[family][lang] if family in _CODES else None


def lang_token(family: str, code: str) -> str:
    """The vocabulary token of a language code: m2m100 wraps it (__de__), mbart50 and nllb do not."""
    return f"__{code}__" if family == "m2m100" else code


def example(family: str, number: int, lang: str) -> Example:
    text = str(number)
    if family in T5_FAMILY:
        text = _T5_PREFIX[lang] + text
    elif family == "marian":
        text = _MARIAN_PREFIX[lang] + text
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


def build_tokenizer(family: str, folder: Path):
    """Train the family's tokenizer on its task corpus (and UNICODE) and save_pretrained it in `folder`.

    Returns the tokenizer as AutoTokenizer loads it back from `folder`."""
    import transformers
    from tokenizers import AddedToken

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = folder / ".tokenizer"
    stage.mkdir()
    try:
        src, tgt = _corpus(family)
        if family == "marian":  # OPUS-MT: two unigram models (full nmt_nfkc), one joint vocab.json
            train_spm(stage, "source", [str(n) for n in range(10_000)] + UNICODE, 240)  # codes are not spm's
            train_spm(stage, "target", tgt, SP_VOCAB)
            write_vocab(stage / "vocab.json", [stage / "source.spm", stage / "target.spm"],
                        tuple(_MARIAN_PREFIX[lang].strip() for lang in TARGETS[family]))
            tok = transformers.MarianTokenizer(str(stage / "source.spm"), str(stage / "target.spm"),
                                               str(stage / "vocab.json"))
        elif family == "bart":  # byte-level BPE as GPT-2/RoBERTa/BART; <mask> the last id
            from tokenizers import ByteLevelBPETokenizer

            bpe = ByteLevelBPETokenizer(add_prefix_space=False)
            bpe.train_from_iterator(src + tgt, vocab_size=SP_VOCAB + 40, min_frequency=2, show_progress=False,
                                    special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
            vocab = json.loads(bpe.to_str())["model"]["vocab"]
            vocab["<mask>"] = len(vocab)
            merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(bpe.to_str())["model"]["merges"]]
            (stage / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
            (stage / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
            tok = transformers.BartTokenizer.from_pretrained(stage)
        elif family in ("mbart50", "nllb"):  # fairseq layout: spm <unk>=0 <s>=1 </s>=2, shifted by one
            kind, cls = ("unigram", transformers.MBart50Tokenizer) if family == "mbart50" else \
                ("bpe", transformers.NllbTokenizer)
            train_sentencepiece(stage / "sentencepiece.bpe.model", src + tgt, kind,
                                dict(unk_id=0, bos_id=1, eos_id=2))
            if family == "mbart50":
                tok = cls.from_pretrained(stage)  # codes then <mask> last, as the real one
            else:  # the codes are not added without extra_special_tokens; <mask> after them, as the real one
                from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

                tok = cls.from_pretrained(stage, extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES), mask_token=None)
                tok.add_special_tokens({"mask_token": AddedToken("<mask>", lstrip=True, normalized=True, special=True)})
        elif family == "m2m100":  # vocab.json (fairseq dictionary) + the spm; no tokenizer.json
            train_sentencepiece(stage / "sentencepiece.bpe.model", src + tgt, "bpe",
                                dict(unk_id=0, bos_id=1, eos_id=2))
            import sentencepiece as spm

            proc = spm.SentencePieceProcessor(model_file=str(stage / "sentencepiece.bpe.model"))
            vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
            for i in range(3, proc.get_piece_size()):
                vocab.setdefault(proc.id_to_piece(i), len(vocab))
            (stage / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
            from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

            # the language tokens are special only when named (as the published tokenizer_config.json does);
            # otherwise decode(..., skip_special_tokens=True) keeps __de__
            tok = transformers.M2M100Tokenizer(
                str(stage / "vocab.json"), str(stage / "sentencepiece.bpe.model"),
                extra_special_tokens=[f"__{code}__" for code in FAIRSEQ_LANGUAGE_CODES["m2m100"]])
        elif family == "pegasus":  # spm <pad>=0 </s>=1 <unk>=2; <mask_1>, <mask_2>, <unk_2>..<unk_102> then
            train_sentencepiece(stage / "spiece.model", src + tgt, "unigram", dict(pad_id=0, eos_id=1, unk_id=2))
            tok = transformers.PegasusTokenizer.from_pretrained(stage)
        elif family in T5_FAMILY:  # spm <pad>=0 </s>=1 <unk>=2, then <extra_id_99>..<extra_id_0>
            train_sentencepiece(stage / "spiece.model", src + tgt, "unigram", dict(pad_id=0, eos_id=1, unk_id=2))
            tok = transformers.T5Tokenizer.from_pretrained(stage)
        else:
            raise ValueError(f"unknown family {family!r}")
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

# generation_config.json of the published checkpoint named in each comment (v5 writes these keys, and
# the special ids). bart-large-cnn's min_length is 56: 3 here, as the answers are short.
PUBLISHED = {
    "marian": dict(MARIAN_PUBLISHED),  # Helsinki-NLP/opus-mt-*; bad_words_ids, pad ids: per model
    "bart": dict(num_beams=4, length_penalty=2.0, no_repeat_ngram_size=3, min_length=3, max_length=142,
                 early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2, decoder_start_token_id=2,
                 bos_token_id=0, eos_token_id=2, pad_token_id=1),  # facebook/bart-large-cnn
    "mbart50": dict(num_beams=5, max_length=200, early_stopping=True, forced_eos_token_id=2,
                    decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1),
    "m2m100": dict(num_beams=5, max_length=200, early_stopping=True, decoder_start_token_id=2, bos_token_id=0,
                   eos_token_id=2, pad_token_id=1),  # facebook/m2m100_418M
    "nllb": dict(max_length=200, decoder_start_token_id=2, bos_token_id=0, eos_token_id=2,
                 pad_token_id=1),  # facebook/nllb-200-distilled-600M: greedy
    "pegasus": dict(num_beams=8, length_penalty=0.6, max_length=64, forced_eos_token_id=1, decoder_start_token_id=0,
                    eos_token_id=1, pad_token_id=0),  # google/pegasus-xsum
    # t5-small, google/flan-t5-base, google/mt5-small: no max_length (transformers then stops at 20)
    "t5": dict(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0),
}
PUBLISHED["flan_t5"] = PUBLISHED["mt5"] = PUBLISHED["t5"]


class Shape(NamedTuple):
    d_model: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    ffn: int
    d_kv: int = 0  # T5 family: the size of a head (heads * d_kv need not be d_model)


# "layers": the layer structure of the named checkpoint, narrow: its heads (of 8 dimensions) and its
# ffn : d_model ratio (4; flan-t5-base 2.67, mt5-small 2). Depth is what export time grows with (on
# the loaded 2-core machine, tfm-export --no-validate took 18 s for marian "tiny", 2 + 2, and 30 s for
# marian "layers", 6 + 6), so the 12 + 12 and 16 + 16 checkpoints get 6 + 6; mt5-small's 8 + 8 gets
# 8 + 6, to keep num_layers != num_decoder_layers.
SHAPES = {
    "tiny": {family: Shape(32, 2, 2, 4, 64, 8) for family in FAMILIES} | {"mt5": Shape(32, 3, 2, 3, 64, 8)},
    # the committed folders; marian's ffn is 96 as its two full-nmt_nfkc .spm files take 490 KB
    "trained": {family: Shape(64, 2, 2, 4, 128, 16) for family in FAMILIES}
    | {"mt5": Shape(64, 3, 2, 3, 128, 16), "marian": Shape(64, 2, 2, 4, 96)},
    "layers": {
        "marian": Shape(64, 6, 6, 8, 256),         # opus-mt-en-de: 6+6, 8 heads, 512/2048
        "bart": Shape(96, 6, 6, 12, 384),          # bart-base: 6+6, 12 heads, 768/3072
        "mbart50": Shape(128, 6, 6, 16, 512),      # mbart-large-50: 12+12, 16 heads, 1024/4096
        "m2m100": Shape(128, 6, 6, 16, 512),       # m2m100_418M: 12+12, 16 heads, 1024/4096
        "nllb": Shape(128, 6, 6, 16, 512),         # nllb-200-distilled-600M: 12+12, 16 heads, 1024/4096
        "pegasus": Shape(128, 6, 6, 16, 512),      # pegasus-xsum: 16+16, 16 heads, 1024/4096
        "t5": Shape(64, 6, 6, 8, 256, 8),          # t5-small: 6+6, 8 heads of 64, 512/2048
        "flan_t5": Shape(96, 6, 6, 12, 256, 8),    # flan-t5-base: 12+12, 12 heads of 64, 768/2048
        "mt5": Shape(64, 8, 6, 6, 128, 8),         # mt5-small: 8+8, 6 heads of 64 (384 != 512), 512/1024
    },
}
# max_position_embeddings: at least the generation_config's max_length (beyond it, generate fails with
# an index error), the real value where the table is not saved (sinusoidal, computed); bart, mbart50
# (learned, offset 2) and pegasus (a stored sinusoidal table) have 1024, 1024 and 512: 1024 rows of
# each side would outweigh the rest of the trained models.
MAX_POSITIONS = {"marian": 512, "bart": 256, "mbart50": 256, "m2m100": 1024, "nllb": 1024, "pegasus": 128}


def model_vocab(family: str, tokenizer) -> int:
    """The model's vocab_size for a tokenizer, as the published configs have it: T5 pads to a multiple
    of 128 (t5-small 32128 for 32100 tokens), m2m100 adds 8 "madeup words" (128112), nllb 2 (256206)."""
    size = max(tokenizer.get_vocab().values()) + 1
    if family in T5_FAMILY:
        return -(-size // 128) * 128
    return size + {"m2m100": 8, "nllb": 2}.get(family, 0)


# Keys of the BartConfig era that the published config.json files still carry and transformers
# ignores (the model class fixes the layout): a reader must not trust them over the model type.
LEGACY_KEYS = {
    "marian": dict(normalize_before=False, normalize_embedding=False, add_final_layer_norm=False,
                   static_position_embeddings=True, add_bias_logits=False),  # opus-mt-en-de
    "bart": dict(normalize_before=False, normalize_embedding=True, add_final_layer_norm=False,
                 static_position_embeddings=False, add_bias_logits=False),  # bart-large-cnn
    "mbart50": dict(normalize_before=True, normalize_embedding=True, add_final_layer_norm=True,
                    static_position_embeddings=False),  # mbart-large-50-many-to-many-mmt
    "pegasus": dict(normalize_before=True, normalize_embedding=False, add_final_layer_norm=True,
                    static_position_embeddings=True),  # pegasus-xsum
}


def model_config(family: str, vocab: int, shape: Shape, **changes):
    """The family's transformers config (architecture settings of the published checkpoint)."""
    import transformers

    d, enc, dec, heads, ffn, d_kv = shape
    if family in T5_FAMILY:
        cls = transformers.MT5Config if family == "mt5" else transformers.T5Config
        settings = dict(vocab_size=vocab, d_model=d, d_kv=d_kv, d_ff=ffn, num_layers=enc, num_decoder_layers=dec,
                        num_heads=heads, dropout_rate=0.0, relative_attention_num_buckets=32,
                        relative_attention_max_distance=128, pad_token_id=0, eos_token_id=1,
                        decoder_start_token_id=0,
                        feed_forward_proj="relu" if family == "t5" else "gated-gelu",
                        tie_word_embeddings=family == "t5")
        if family == "mt5":
            settings["tokenizer_class"] = "T5Tokenizer"  # as google/mt5-small's config.json
        return cls(**(settings | changes))
    common = dict(vocab_size=vocab, d_model=d, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
                  decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, dropout=0.0,
                  attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=MAX_POSITIONS[family])
    if family == "marian":  # OPUS-MT: post-LN, sinusoidal positions, scaled embeddings, swish, pad = start
        cls, special = transformers.MarianConfig, dict(
            scale_embedding=True, activation_function="swish",
            pad_token_id=vocab - 1, eos_token_id=0, decoder_start_token_id=vocab - 1, forced_eos_token_id=0,
            decoder_vocab_size=vocab, share_encoder_decoder_embeddings=True)
    elif family == "bart":  # post-LN, learned positions (offset 2), layernorm_embedding, unscaled, gelu
        cls, special = transformers.BartConfig, dict(
            scale_embedding=False, activation_function="gelu", bos_token_id=0, pad_token_id=1, eos_token_id=2,
            decoder_start_token_id=2, forced_eos_token_id=2, forced_bos_token_id=0)
    elif family == "mbart50":  # pre-LN, final norms, layernorm_embedding, learned positions, scaled, gelu
        cls, special = transformers.MBartConfig, dict(
            scale_embedding=True, activation_function="gelu", bos_token_id=0, pad_token_id=1, eos_token_id=2,
            decoder_start_token_id=2, forced_eos_token_id=2)
    elif family in ("m2m100", "nllb"):  # pre-LN, sinusoidal positions with the padding offset, scaled, relu
        cls, special = transformers.M2M100Config, dict(
            scale_embedding=True, activation_function="relu", bos_token_id=0, pad_token_id=1, eos_token_id=2,
            decoder_start_token_id=2)
    elif family == "pegasus":  # pre-LN, final norms, sinusoidal positions, scaled, relu
        cls, special = transformers.PegasusConfig, dict(
            scale_embedding=True, activation_function="relu", pad_token_id=0,
            eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)
    else:
        raise ValueError(f"unknown family {family!r}")
    if family == "nllb":
        special["tokenizer_class"] = "NllbTokenizer"  # as facebook/nllb-200-distilled-600M's config.json
    special |= LEGACY_KEYS.get(family, {})
    return cls(**(common | special | changes))


def set_generation_config(model, family: str) -> None:
    """model.generation_config := the published generation_config.json of the family."""
    import transformers

    values = dict(PUBLISHED[family])
    if family == "marian":
        pad = model.config.pad_token_id
        values |= dict(bad_words_ids=[[pad]], forced_eos_token_id=0, decoder_start_token_id=pad, pad_token_id=pad,
                       eos_token_id=0, bos_token_id=0)
    model.generation_config = transformers.GenerationConfig(**values)


def build_model(family: str, vocab: int, shape: Shape, seed: int = 0, init_std: float | None = None):
    """A model of the family with random weights (seeded), its published generation_config set.

    init_std (T5: initializer_factor) defaults to the family's 0.02 (T5: 1.0)."""
    import transformers

    changes = {}
    if init_std is not None:
        changes["initializer_factor" if family in T5_FAMILY else "init_std"] = init_std
    config = model_config(family, vocab, shape, **changes)
    torch.manual_seed(seed)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    if family in UNTIED:
        untie_lm_head(model, (init_std or 1.0) * config.d_model ** -0.5)
    set_generation_config(model, family)
    return model.eval()


# T5 v1.1 (flan-t5, mt5) has an lm_head of its own. transformers 5 forces tie_word_embeddings=True on
# T5Config/MT5Config (scale_decoder_outputs keeps T5's d_model**-0.5 on the tied head) and unties on
# load only when the checkpoint holds a different lm_head.weight (with a warning): so the head is made
# a parameter of its own here, and save_folder writes the published "tie_word_embeddings": false.
UNTIED = ("flan_t5", "mt5")


def untie_lm_head(model, std: float) -> None:
    """Give a T5 model an lm_head of its own (random, seeded by the caller), saved as lm_head.weight."""
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * std)
    model.all_tied_weights_keys.pop("lm_head.weight", None)


def save_folder(model, tokenizer_from: Path | None, folder: Path, family: str) -> Path:
    """save_pretrained (safetensors, with the published generation_config.json) + the tokenizer files
    of the folder `tokenizer_from` (None: they are in `folder` already)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    set_generation_config(model, family)
    model.save_pretrained(folder)
    if family in T5_FAMILY:  # as published: tie_word_embeddings as is, no scale_decoder_outputs (UNTIED)
        config = json.loads((folder / "config.json").read_text())
        config["tie_word_embeddings"] = family not in UNTIED
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

# init_std of random folders (T5 family: initializer_factor), far above the defaults (0.02; 1.0) so that
# greedy tokens depend on the source; marian gets marian_fixtures' 0.3 and its final_logits_bias noise.
# (The pre-LN families with scaled embeddings need more than bart's 0.3: at 0.3 every source gave the
# same greedy tokens.)
RANDOM_STD = {"bart": 0.3, "mbart50": 1.0, "m2m100": 1.0, "nllb": 1.0, "pegasus": 1.0, "t5": 5.0, "flan_t5": 5.0,
              "mt5": 5.0}


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
    `wide`: weights drawn wider than transformers' initialisation (RANDOM_STD), so that greedy output
    depends on the source; else transformers' own initialisation (what a fresh model has)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    if size not in ("tiny", "layers"):
        raise ValueError(f"size is 'tiny' or 'layers', not {size!r}")
    source = TRAINED / family
    if (source / "config.json").exists():
        vocab = json.loads((source / "config.json").read_text())["vocab_size"]
    else:  # no trained folder (yet): build the tokenizer here
        source = Path(folder) / ".tokenizer-build"
        vocab = model_vocab(family, build_tokenizer(family, source))
    shape = SHAPES[size][family]
    if family == "marian":
        d, enc, dec, heads, ffn, _ = shape
        model = marian_model(vocab=vocab, seed=seed, d_model=d, encoder_layers=enc, decoder_layers=dec,
                             encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                             decoder_ffn_dim=ffn, max_position_embeddings=MAX_POSITIONS[family], scale_embedding=True,
                             activation_function="swish", **LEGACY_KEYS["marian"])
    else:
        model = build_model(family, vocab, shape, seed=seed, init_std=RANDOM_STD[family] if wide else None)
    save_folder(model, source, folder, family)
    if source.name == ".tokenizer-build":
        shutil.rmtree(source)
    return Path(folder)
