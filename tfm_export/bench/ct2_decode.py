r"""CTranslate2 decoding an export's ids: the quality table's CTranslate2 rows (`quality-table`) and `documents`'s
peer; conversions and decoders.

Every CTranslate2 row reads the same token ids as the ONNX rows: the float32 export's tokenizer encodes the
source (its language tokens included) and decodes the output, and its language options give the forced first
token (CTranslate2's `target_prefix`). Only the model's arithmetic differs, so a lower score is the
quantisation's, not a tokenizer's. CTranslate2 quantises at load time (`compute_type`), so one float32
conversion serves both rows.

    convert_folder(folder, out)      a Hugging Face folder (text or Whisper): ctranslate2's TransformersConverter
    convert_native(checkpoint, out)  our own checkpoint: bench.ct2's spec writer
    TextDecoder / WhisperDecoder     (group, decoding options) -> output texts, as the quality table's decoders
    converted, id_tokens             a Marian folder converted as it is (`step`, `ct2-batch`), its ids as tokens
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import InputError
from . import harness


CT2_BATCH = 16  # sources per translate_batch call (the ONNX rows decode 16 at a time too: quality.TEXT_BATCH)

# CTranslate2 tells a family's variants apart by config.tokenizer_class (mBART-50 from mBART-25); a folder whose
# config.json has none gets the variant our fixtures are, by model_type (a table: only importers.families branch)
CT2_TOKENIZER_CLASS = {"mbart": "MBart50Tokenizer"}


def prepared(out: Path, make: Callable[[Path], None]) -> Path:
    """`out` made by `make(stage)` and renamed into place, unless a previous run left it (harness.prepared)."""
    harness.prepared(out, make)
    return out


def convert_folder(folder: Path, out: Path) -> Path:
    """ctranslate2's TransformersConverter on a Hugging Face folder, float32 (its loaders: Marian, BART, mBART,
    M2M100 (NLLB too), Pegasus, T5, MT5, Whisper, ...)."""
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_model(self, *args: Any, **kwargs: Any) -> Any:
            model = super().load_model(*args, **kwargs)
            # transformers 5's T5Config always says tied (scale_decoder_outputs says whether the outputs are
            # scaled); CTranslate2 scales them when it reads tied (as bench.families' convert_ct2).
            if hasattr(model.config, "scale_decoder_outputs"):
                model.config.tie_word_embeddings = model.config.scale_decoder_outputs
            # CTranslate2 tells mBART-50 from mBART-25 by config.tokenizer_class; without one (the fixture's
            # config.json) it takes mBART-25's decoder start, the language token instead of </s> then the language.
            wanted = CT2_TOKENIZER_CLASS.get(model.config.model_type)
            if wanted and not getattr(model.config, "tokenizer_class", None):
                model.config.tokenizer_class = wanted
            return model

        def load_tokenizer(self, *args: Any, **kwargs: Any) -> Any:
            tokenizer = super().load_tokenizer(*args, **kwargs)
            # transformers 5's MBart50Tokenizer has no bos_token (id 0 is <s> all the same); CTranslate2's
            # config needs its name
            if tokenizer.bos_token is None and "<s>" in tokenizer.get_vocab():
                tokenizer.bos_token = "<s>"
            return tokenizer

    def make(path: Path) -> None:
        with trained_pad_marian():
            Converter(str(folder)).convert(str(path), force=True)

    return prepared(out, make)


@contextlib.contextmanager
def trained_pad_marian() -> Iterator[None]:
    """CTranslate2's Marian loader, starting the decoder from the pad token's embedding where it is not zero.

    OPUS-MT folders are converted from Marian with a zero pad row, and Marian starts the decoder from a zero
    vector; CTranslate2 relies on that (it drops the pad row and starts from zeros). A folder trained with
    transformers (tests/fixtures/trained/marian) has a trained pad row, which transformers' decoder starts
    from: kept here, with the pad token as the decoder start (and banned as output: TextDecoder's suppress)."""
    from ctranslate2.converters import transformers as loaders

    class PadStart(loaders.MarianMTLoader):
        def get_model_spec(self, model: Any) -> Any:
            self.pad_start = bool(model.get_input_embeddings().weight[model.config.pad_token_id].any())
            if not self.pad_start:
                return super().get_model_spec(model)  # a zero pad row: CTranslate2's own way
            model.config.normalize_before = model.config.normalize_embedding = False
            return loaders.BartLoader.get_model_spec(self, model)

        def set_config(self, config: Any, model: Any, tokenizer: Any) -> None:
            super().set_config(config, model, tokenizer)
            if getattr(self, "pad_start", False):
                config.decoder_start_token = tokenizer.pad_token

        def set_decoder(self, spec: Any, decoder: Any) -> None:
            super().set_decoder(spec, decoder)
            spec.start_from_zero_embedding = not getattr(self, "pad_start", False)

        def get_vocabulary(self, model: Any, tokenizer: Any) -> list[str]:
            tokens = loaders.BartLoader.get_vocabulary(self, model, tokenizer)
            return tokens if getattr(self, "pad_start", False) or tokens[-1] != "<pad>" else tokens[:-1]

    real = loaders._MODEL_LOADERS["MarianConfig"]
    loaders._MODEL_LOADERS["MarianConfig"] = PadStart()  # the registry holds loader instances
    try:
        yield
    finally:
        loaders._MODEL_LOADERS["MarianConfig"] = real


def convert_native(checkpoint: Any, out: Path) -> Path:
    """Our own checkpoint through tfm_export.bench.ct2 (token names t<id>, <s>, </s>), float32."""
    from .ct2 import convert

    return prepared(out, lambda path: convert(checkpoint.build_model(), path))


def vocabularies(model_dir: Path) -> tuple[list[str], list[str]]:
    """(source, target) token strings of a converted model, in id order."""
    shared = model_dir / "shared_vocabulary.json"
    if shared.exists():
        vocab = json.loads(shared.read_text(encoding="utf-8"))
        return vocab, vocab
    return tuple(json.loads((model_dir / f"{side}_vocabulary.json").read_text(encoding="utf-8"))
                 for side in ("source", "target"))  # type: ignore[return-value]


class TextDecoder:
    """ctranslate2.Translator on the float32 export's ids; `decoding`: GenerationConfig options (num_beams,
    max_new_tokens) over the export's defaults, of which beams, length penalty, no-repeat n-grams and the
    minimum length are CTranslate2's too (forced EOS and early stopping are not)."""

    def __init__(self, model_dir: Path, compute_type: str, runner: Any, threads: int = 0):
        import ctranslate2

        self.translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type,
                                                 inter_threads=1, intra_threads=threads)  # 0: CT2's default
        self.source_vocab, self.target_vocab = vocabularies(model_dir)
        self.index = {token: i for i, token in enumerate(self.target_vocab)}
        self.runner = runner

    def __call__(self, group: Any, decoding: dict[str, Any]) -> list[str]:
        tokens, prefix, settings = self.request(group.sources, group.options, decoding)
        out: list[str] = []
        for i in range(0, len(tokens), CT2_BATCH):
            batch = tokens[i:i + CT2_BATCH]
            results = self.translator.translate_batch(batch, target_prefix=[prefix] * len(batch) if prefix else None,
                                                      **settings)
            out += [self.text(result, prefix) for result in results]
        return out

    def request(self, sources: Sequence[str], options: dict[str, Any], decoding: dict[str, Any]
                ) -> tuple[list[list[str]], list[str], dict[str, Any]]:
        """(the sources' tokens, the target prefix, CTranslate2's decoding options) for texts with the group
        `options` (source_lang, target_lang) under `decoding`."""
        config = self.runner.generation_config(None, **decoding)
        langs = {k: options.get(k) for k in ("source_lang", "target_lang")}
        forced = self.runner.language_options(langs["target_lang"]).get("forced_bos_token_id")
        prefix = [self.target_vocab[forced]] if forced is not None else []
        tokens = [[self.source_vocab[i] for i in self.runner.encode(text, **langs)] for text in sources]
        settings = dict(beam_size=config.num_beams, length_penalty=config.length_penalty,
                        no_repeat_ngram_size=config.no_repeat_ngram_size,
                        min_decoding_length=config.min_new_tokens + len(prefix),
                        max_decoding_length=self.runner.steps_for(config) + len(prefix))
        if self.runner.config.suppress_ids:  # ids the export never outputs (Marian's pad: bad_words_ids)
            settings["suppress_sequences"] = [[self.target_vocab[i]] for i in self.runner.config.suppress_ids
                                              if i < len(self.target_vocab)]
        return tokens, prefix, settings

    def text(self, result: Any, prefix: list[str]) -> str:
        """A TranslationResult's best hypothesis as text (the export's tokenizer), the prefix left off."""
        ids = [self.index[t] for t in result.hypotheses[0]][len(prefix):]
        return self.runner.tokenizer.decode(ids).strip()


class WhisperDecoder:
    """ctranslate2.models.Whisper on the float32 export's log-mel features (one window per utterance) and
    prompt (init_tokens, the group's language), greedy without timestamps as the ONNX rows' transcribe."""

    def __init__(self, model_dir: Path, compute_type: str, runner: Any, base: Path):
        import ctranslate2

        from ..runtime.speech.whisper import speech_settings

        self.model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type=compute_type,
                                                inter_threads=1)
        self.settings, self.features = speech_settings(runner)
        self.runner, self.base = runner, base

    def __call__(self, group: Any, decoding: dict[str, Any]) -> list[str]:
        import ctranslate2

        from ..audio.features import log_mel
        from ..runtime.speech.prompt import init_tokens
        from ..runtime.speech.whisper import read_samples

        if decoding.get("num_beams", 1) != 1:
            raise ValueError("the Whisper rows decode greedily")
        out = []
        for source in group.sources:
            samples = read_samples(self.base / source, self.features.sampling_rate)
            features = ctranslate2.StorageView.from_array(np.ascontiguousarray(log_mel(samples, self.features)[None]))
            prompt = init_tokens(self.settings, language=group.options["language"], task="transcribe")
            result = self.model.generate(features, [prompt], beam_size=1, max_length=self.runner.config.max_len)
            out.append(self.runner.tokenizer.decode(result[0].sequences_ids[0]).strip())
        return out


# --- a Marian folder as `step` and `ct2-batch` read it: converted as it is, its ids by its vocab.json


def converted(hf_folder: Path, ct2_dir: Path) -> float | None:
    """Convert into ct2_dir unless it holds a model already; seconds taken, or None when reused."""
    if (ct2_dir / "model.bin").exists():
        return None
    if ct2_dir.exists() and any(ct2_dir.iterdir()):
        raise InputError(f"{ct2_dir} is neither empty nor a CTranslate2 model; choose another --ct2-dir")
    from ctranslate2.converters import TransformersConverter

    from . import harness

    # float32: no quantization
    return harness.timed(lambda: TransformersConverter(str(hf_folder)).convert(str(ct2_dir), force=True))


def ct2_vocabulary(ct2_dir: Path) -> list[str]:
    for name in ("shared_vocabulary.json", "source_vocabulary.json"):
        if (ct2_dir / name).exists():
            return json.loads((ct2_dir / name).read_text(encoding="utf-8"))
    for name in ("shared_vocabulary.txt", "source_vocabulary.txt"):
        if (ct2_dir / name).exists():
            return (ct2_dir / name).read_text(encoding="utf-8").split("\n")[:-1]
    raise InputError(f"{ct2_dir}: no vocabulary file")


def id_tokens(hf_folder: Path, ct2_dir: Path) -> list[str]:
    """The folder's vocab.json as a list (id -> token), checked against the converted vocabulary
    (CTranslate2 drops Marian's trailing <pad>, the decoder start it replaces with a zero embedding)."""
    vocab = json.loads((hf_folder / "vocab.json").read_text(encoding="utf-8"))
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    theirs = ct2_vocabulary(ct2_dir)
    if tokens[: len(theirs)] != theirs or len(tokens) - len(theirs) not in (0, 1):
        raise InputError(f"{ct2_dir}'s vocabulary ({len(theirs)} tokens) is not {hf_folder}/vocab.json's "
                         f"({len(tokens)}); a --ct2-dir converted from another folder?")
    return tokens
