"""The quality table's sets: each trained fixture as groups of held-out sources and references (and the
training sources `--int4-method gptq` calibrates on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
import random

from benchmarks import fixtures
from tfm_export.export.quality import read_eval_file

ROOT = Path(__file__).resolve().parents[2]

CALIBRATION, CALIBRATION_SEED = 256, 1  # training sources for --int4-method gptq (never the held-out ones)
NUM2WORDS = ROOT / "models" / "num2words-de"
WHISPER = ROOT / "models" / "whisper-digits"

@dataclass(frozen=True)
class Group:
    """Sources decoded together: one target language's (translate's `options` name it)."""

    lang: str | None
    sources: tuple[str, ...]
    references: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fixture:
    name: str
    model: Path  # what the exporter and CTranslate2's converter read
    kind: str  # "text" or "speech" (export.quality.KINDS)
    groups: tuple[Group, ...]
    base: Path | None = None  # speech: the folder of the audio files
    native: bool = False  # our own checkpoint (bench.ct2's converter), not a Hugging Face folder
    calibration: tuple[str, ...] = ()  # training sources `--int4-method gptq` calibrates on (none: speech)


Decoder = Callable[[Group, dict[str, Any]], list[str]]  # (group, decoding options) -> output texts


def trained_fixture(family: str, numbers: int) -> Fixture:
    """A trained Hugging Face fixture: the first `numbers` held-out numbers in each of its target languages."""
    hf_fixtures = fixtures.hf()
    held_out = hf_fixtures.split_numbers()[1][:numbers]
    groups = []
    for lang in hf_fixtures.TARGETS[family]:
        examples = [hf_fixtures.example(family, n, lang) for n in held_out]
        code = hf_fixtures.lang_code(family, lang)  # None: the source says it (marian's >>de<<, T5's prefix)
        options = {"target_lang": code, "source_lang": hf_fixtures.LANGS[family][0]} if code else {}
        groups.append(Group(lang, tuple(e.source for e in examples), tuple(e.target for e in examples), options))
    langs = hf_fixtures.TARGETS[family]
    trained = random.Random(CALIBRATION_SEED).sample(hf_fixtures.split_numbers()[0], CALIBRATION)
    calibration = tuple(hf_fixtures.example(family, n, langs[i % len(langs)]).source for i, n in enumerate(trained))
    return Fixture(family, hf_fixtures.trained_folder(family), "text", tuple(groups), calibration=calibration)


def num2words_fixture(numbers: int) -> Fixture:
    held_out = read_eval_file(NUM2WORDS / "heldout.tsv")
    group = Group("de", held_out.sources[:numbers], held_out.references[:numbers])  # type: ignore[index]
    # Its training numbers are 0..99999 less 2000 held out, of which the first 200 ship: calibrate on others.
    pool = sorted(set(range(100_000)) - {int(s) for s in held_out.sources})
    calibration = tuple(str(n) for n in random.Random(CALIBRATION_SEED).sample(pool, CALIBRATION))
    return Fixture("num2words-de", NUM2WORDS / "model.pt", "text", (group,), native=True, calibration=calibration)


def whisper_fixture(work: Path, utterances: int) -> Fixture:
    """models/whisper-digits' held-out digit strings spoken by espeak-ng (written once into `work`), by
    language, which is given: CTranslate2 takes a Whisper vocabulary this small for an English-only model and
    refuses to detect the language."""
    speech = fixtures.whisper_digits_speech()
    Spoken, write_eval_set = speech.Spoken, speech.write_eval_set

    folder = work / "whisper-digits-heldout"
    spoken = [Spoken.from_row(row) for row in (WHISPER / "heldout.tsv").read_text().splitlines()]
    if not (folder / "heldout.tsv").exists():  # all of them, whatever `utterances` is
        write_eval_set([(s, s.samples()) for s in spoken], folder)
    pairs = list(zip(read_eval_file(folder / "heldout.tsv").sources, spoken))[:utterances]  # (file, utterance)
    groups = tuple(Group(lang, tuple(f for f, s in pairs if s.language == lang),
                         tuple(s.text() for _, s in pairs if s.language == lang), {"language": lang})
                   for lang in dict.fromkeys(s.language for _, s in pairs))
    return Fixture("whisper-digits", WHISPER, "speech", groups, base=folder)


def chosen_fixtures(names: list[str], work: Path, numbers: int, utterances: int) -> list[Fixture]:
    hf_fixtures = fixtures.hf()
    made = {"num2words-de": lambda: num2words_fixture(numbers),
            "whisper-digits": lambda: whisper_fixture(work, utterances),
            **{family: (lambda f=family: trained_fixture(f, numbers)) for family in hf_fixtures.FAMILIES}}
    unknown = [n for n in names if n not in made]
    if unknown:
        raise SystemExit(f"unknown fixtures {unknown}; choose from {', '.join(made)}")
    return [made[n]() for n in names]


