"""The documents scenario's cases (`python -m benchmarks documents --case`): a Hugging Face folder, a document,
its languages, and the new tokens every sentence decodes on both sides."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Callable

from . import fixtures, harness

ENG, DEU = "eng_Latn", "deu_Latn"
FOLDER = fixtures.TESTS / "fixtures" / "trained" / "nllb"


def paragraphs(sentences: list[str]) -> str:
    return "".join(s + ("\n\n" if n % 10 == 9 else " ") for n, s in enumerate(sentences))


def document(words: int, seed: int = 0) -> str:
    """`words` one-number sentences in paragraphs of 10 (the fixture's domain)."""
    rng = random.Random(seed)
    return paragraphs([f"{rng.randint(1, 9999)}." for _ in range(words)])


def phrases_document(words: int, seed: int = 0) -> str:
    """`words` sentences of 1 to 5 of the Marian fixture's English phrases (a document's spread of lengths), in
    paragraphs of 10."""
    rng = random.Random(seed)
    english = fixtures.marian().WORDS[:4]
    return paragraphs([" ".join(rng.choice(english) for _ in range(rng.randint(1, 5))).capitalize() + "."
                       for _ in range(words)])


def opus_mt_folder(work: Path) -> Path:
    """The opus-mt-sized random Marian folder (as `benchmarks opus-mt-folder WORK/opus-mt-hf`), unless there."""
    marian = fixtures.marian()
    folder = work / "opus-mt-hf"
    harness.prepared(folder, lambda path: marian.marian_folder(path, seed=0, vocab_size=15_600, **marian.OPUS_MT))
    return folder


@dataclasses.dataclass(frozen=True)
class Case:
    """A --case: its Hugging Face folder (from WORK), document (from WORDS), languages, and the new tokens every
    sentence decodes on both sides (0: as the model ends them)."""
    folder: Callable[[Path], Path]
    document: Callable[[int], str]
    source: str | None
    target: str
    new_tokens: int = 0
    export_flags: tuple[str, ...] = ()  # tfm-export's, beyond -o and --quantize

    def langs(self) -> dict[str, str | None]:
        return {"source_lang": self.source, "target_lang": self.target}

    def ours(self, new_tokens: int) -> dict[str, Any]:
        """Our translate()'s options: greedy as exported, or exactly `new_tokens` ids, EOS ignored."""
        return {"max_new_tokens": new_tokens, "stop_at_eos": False, "forced_eos": False,
                "num_beams": 1} if new_tokens else {}

    def ct2(self, new_tokens: int) -> dict[str, Any]:
        """TextDecoder's decoding: greedy, and with `new_tokens` min = max decoding length (EOS banned)."""
        return {"num_beams": 1, **({"max_new_tokens": new_tokens, "min_new_tokens": new_tokens} if new_tokens
                                   else {})}


CASES = {"fixture": Case(lambda work: FOLDER, document, ENG, DEU),
         # no validation: at opus-mt size, with the published beam 4, it took over 13 minutes on the loaded 2-core VM
         # (the run compares the outputs with CTranslate2's instead)
         "opus-mt": Case(opus_mt_folder, phrases_document, None, "de", new_tokens=24, export_flags=("--no-validate",))}


def splitting(runner: Any, case: Case) -> str | None:
    """The language translate() splits in: the source's, or the tokenizer's default source."""
    return case.source or runner.tokenizer.languages.source_default


def planned(runner: Any, case: Case, text: str) -> list[Any]:
    """The document's pieces as translate(split_sentences=True) plans them."""
    from tfm_export.text import sentences

    count = lambda s: len(runner.encode(s, **case.langs()))  # noqa: E731
    return sentences.plan(text, splitting(runner, case), count, runner.config.max_len)
