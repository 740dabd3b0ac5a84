"""The quality table of reduced precision (#41), `quality-table`: each trained fixture's held-out set (the sets
below) exported and decoded as float32, int8, int4 and CTranslate2, then scored. The scores, the bootstrap and the
report are tfm_export.bench.quality's, CTranslate2's conversions and decoders bench.ct2_decode's (re-exported
here: the tests and `documents` read them from this module); `int4-sensitivity` and `wide-fixture` are
benchmarks/forms.py."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from tfm_export.bench import fixtures, harness
from tfm_export.bench.ct2_decode import TextDecoder, WhisperDecoder, convert_folder, convert_native
from tfm_export.bench.quality import (  # noqa: F401 (the tests' names)
    Decoder, Fixture, Group, decode_all, markdown, paired_bootstrap, paired_bootstrap_wer, score_rows,
    significantly_below, verdicts)
from tfm_export.export.int4 import Int4Settings
from tfm_export.export.quality import decode_set, read_eval_file


# --- the sets: each trained fixture as groups of held-out sources and references (and the training sources
# `--int4-method gptq` calibrates on)

ROOT = Path(__file__).resolve().parents[1]

CALIBRATION, CALIBRATION_SEED = 256, 1  # training sources for --int4-method gptq (never the held-out ones)
NUM2WORDS = ROOT / "models" / "num2words-de"
WHISPER = ROOT / "models" / "whisper-digits"


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


QUALITY_TABLE_DOC = r"""The quality table of reduced precision (#41): every trained fixture, float32 against int8, int4
and CTranslate2.

    .venv/bin/python -m benchmarks quality-table --work /tmp/quality [--fixtures marian,nllb,whisper-digits] \
        [--numbers 500] [--utterances 120] [--int4-levels 0,1,2,3,4] [--int4-blocks 16] [--int4-methods k_quant,gptq] \
        [--int4-heads scan,int4] [--int4-encoders int8] [--json OUT.json] \
        [--markdown OUT.md]

Fixtures: the nine trained Hugging Face folders of tests/fixtures/trained (numbers in digits -> English or
German words; the `--numbers` first of the 500 held-out numbers, each in every target language the family
has), models/num2words-de (its heldout.tsv) and models/whisper-digits (its held-out digit strings spoken by
espeak-ng). Each is exported with the library's exporter (`tfm-export MODEL -o OUT [--quantize int8|int4]`,
without validation: this table is the measurement) as float32, int8, int4 at the shipped defaults and int4
at each other `--int4-accuracy-level` (and `--int4-blocks`' block sizes), and converted with CTranslate2
(py; rows "ct2 float32", a check that the conversion decodes like our float32, and "ct2 int8").
Exports and conversions are kept in --work and reused; each float32 graph is exported once (graphs_kept).
`--int4-methods gptq` calibrates on CALIBRATION training sources of each text fixture (never held-out ones).

Every variant decodes the same sources, greedily and (text, where the folder's generation_config.json
asks for beams) with the folder's default decoding, at most MAX_NEW_TOKENS new tokens. Per fixture, decoding
and variant: chrF and BLEU (sacrebleu) and exact matches against the references, chrF against float32's
outputs and agreement with float32 (% identical outputs); WER (jiwer) for speech. export.quality holds the
measures (text_scores, speech_scores, identical, decode_set). Each int4 row is also tested against CTranslate2
int8 by a paired bootstrap (sacrebleu's, of chrF; for speech the same test of WER): is int4's shortfall more than
the choice of sources explains?
"""


MAX_NEW_TOKENS = 64  # the longest answer is under 30 tokens; a looping variant stops here
DEFAULT_INT4 = Int4Settings()
LEVELS = next(f for f in dataclasses.fields(Int4Settings) if f.name == "accuracy_level").metadata["choices"]

log = logging.getLogger("quality_table")  # as bench.quality's: the progress this scenario shows


def variant_options(levels: tuple[int, ...], blocks: tuple[int, ...] = (), methods: tuple[str, ...] = (),
                    heads: tuple[str, ...] = (), encoders: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Variant name -> ExportOptions fields: float32, int8, int4 (the defaults), int4 at the other accuracy
    levels, block sizes, methods, heads and encoder precisions (one setting changed from the defaults at a time)."""
    variants: dict[str, dict[str, Any]] = {"float32": {}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}
    changes = ([("level", "accuracy_level", v) for v in levels] + [("block", "block_size", v) for v in blocks]
               + [("method", "method", v) for v in methods] + [("head", "head", v) for v in heads]
               + [("encoder", "encoder", v) for v in encoders])
    for name, setting, value in changes:
        if value != getattr(DEFAULT_INT4, setting):
            variants[f"int4 {name} {value}"] = {"quantize": "int4",
                                                "int4": dataclasses.replace(DEFAULT_INT4, **{setting: value})}
    return variants


def exported(fixture: Fixture, out: Path, options: dict[str, Any], checkpoint: Callable[[], Any]) -> Path:
    """The export of `fixture` with `options` in `out`, made unless a previous run left it (the exporter
    writes OUT whole or not at all)."""
    from tfm_export.export.exporter import ExportOptions, export_model

    if not (out / "manifest.json").exists():
        seconds = harness.timed(lambda: export_model(checkpoint(), out, ExportOptions(validate=False, **options)))
        log.info("exported %s %s in %.0f s", fixture.name, out.name, seconds)
    return out


@contextlib.contextmanager
def graphs_kept(cache: Path) -> Iterator[None]:
    """Export each float32 graph once per fixture: every variant exports the same float32 graphs and transforms
    them afterwards, and torch.onnx writes the same file for the same weights, spec and opset, so the first
    export of each graph is kept in `cache` and copied for the other variants (tests/conftest.py does the same
    for the test suite). The exporter's transforms, checks and manifest run on every variant as usual."""
    from tfm_export.export import exporter

    real = exporter.export_graph

    def export_graph(model: Any, spec: Any, folder: Path, opset: int, external: bool = False) -> list[str]:
        kept = cache / f"{spec.file}.opset{opset}"
        if external:  # weights in external files: not a model of this table's size
            return real(model, spec, folder, opset, external)
        if not kept.exists():
            extra = real(model, spec, folder, opset, external)
            cache.mkdir(parents=True, exist_ok=True)
            partial = cache / f".{kept.name}.partial"
            shutil.copy2(folder / spec.file, partial)
            partial.rename(kept)
            return extra
        shutil.copy2(kept, folder / spec.file)
        return []

    exporter.export_graph = export_graph
    try:
        yield
    finally:
        exporter.export_graph = real


def ort_decoder(folder: Path, fixture: Fixture, verify: bool = True) -> tuple[Decoder, Any]:
    """An export as a decoder (export.quality.decode_set on ONNX Runtime), and the opened export."""
    from tfm_export.runtime import open_export

    runner = open_export(folder, "cpu", verify=verify)

    def decode(group: Group, decoding: dict[str, Any]) -> list[str]:
        return decode_set(runner, group.sources, fixture.base, fixture.kind == "speech", **group.options,
                          **decoding)

    return decode, runner


def ct2_decoders(fixture: Fixture, out: Path, checkpoint: Callable[[], Any], runner: Any) -> dict[str, Decoder]:
    """"ct2 float32" and "ct2 int8" (CTranslate2 quantises at load time: one conversion)."""
    if fixture.native:
        model_dir = convert_native(checkpoint(), out)
    else:
        model_dir = convert_folder(fixture.model, out)
    if fixture.kind == "speech":
        return {f"ct2 {t}": WhisperDecoder(model_dir, t, runner, fixture.base) for t in ("float32", "int8")}
    return {f"ct2 {t}": TextDecoder(model_dir, t, runner) for t in ("float32", "int8")}


def decodings(fixture: Fixture, runner: Any) -> dict[str, dict[str, Any]]:
    """greedy, and the folder's default decoding where it is not greedy (text only)."""
    cap = {} if fixture.kind == "speech" else {"max_new_tokens": MAX_NEW_TOKENS}
    modes = {"greedy": {"num_beams": 1, **cap}}
    if fixture.kind == "text" and runner.generation.num_beams > 1:
        modes[f"default (beam {runner.generation.num_beams})"] = cap
    return modes


def measure(fixture: Fixture, work: Path, variants: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Export, convert, decode and score one fixture in each of `variants` (variant_options) and CTranslate2's (its
    exports kept in work/<fixture>)."""
    from tfm_export.importers import load_any

    @functools.cache
    def checkpoint() -> Any:  # loaded once, only when something is to be exported or converted
        return load_any(fixture.model)

    decoders, runner = {}, None
    with graphs_kept(work / fixture.name / "float32-graphs"):
        for variant, options in variants.items():
            if options.get("int4") and options["int4"].method == "gptq":
                if not fixture.calibration:
                    continue  # speech: gptq calibrates on texts
                options = {**options, "calibration_file": str(calibration_file(fixture, work))}
            folder = exported(fixture, work / fixture.name / variant.replace(" ", "-"), options, checkpoint)
            decoders[variant], opened = ort_decoder(folder, fixture)
            runner = runner or opened  # float32's: the CTranslate2 rows use its tokenizer and settings
    decoders.update(ct2_decoders(fixture, work / fixture.name / "ct2", checkpoint, runner))
    return score_rows(fixture, decode_all(fixture, decoders, decodings(fixture, runner)))


def calibration_file(fixture: Fixture, work: Path) -> Path:
    """The fixture's calibration sources, one a line, in work/<fixture>/calibration.txt."""
    path = work / fixture.name / "calibration.txt"
    path.write_text("".join(f"{source}\n" for source in fixture.calibration), encoding="utf-8")
    return path


def quality_table_main(argv: list[str] | None = None) -> None:
    hf_fixtures = fixtures.hf()
    everything = [*hf_fixtures.FAMILIES, "num2words-de", "whisper-digits"]
    parser = argparse.ArgumentParser(description=QUALITY_TABLE_DOC.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="exports and conversions, kept and reused")
    parser.add_argument("--fixtures", default=",".join(everything), help="comma-separated (default: all)")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers per target language")
    parser.add_argument("--utterances", type=int, default=120, help="held-out whisper-digits utterances")
    parser.add_argument("--int4-levels", default=",".join(map(str, LEVELS)), help="int4 accuracy levels")
    parser.add_argument("--int4-blocks", default="", help="int4 block sizes besides the default (e.g. 16)")
    parser.add_argument("--int4-methods", default="", help="int4 methods besides the default (e.g. k_quant)")
    parser.add_argument("--int4-heads", default="", help="int4 heads besides the default (e.g. scan,int4)")
    parser.add_argument("--int4-encoders", default="", help="int4 encoder precisions besides the default (int8)")
    parser.add_argument("--json", type=Path, help="write the rows (and the machine's versions) here")
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)  # this script's progress; the exporter's own logs stay quiet
    args.work.mkdir(parents=True, exist_ok=True)
    levels = tuple(int(v) for v in args.int4_levels.split(","))
    blocks = tuple(int(v) for v in args.int4_blocks.split(",") if v)
    methods = tuple(v for v in args.int4_methods.split(",") if v)
    heads = tuple(v for v in args.int4_heads.split(",") if v)
    encoders = tuple(v for v in args.int4_encoders.split(",") if v)
    variants = variant_options(levels, blocks, methods, heads, encoders)
    rows: list[dict[str, Any]] = []
    for fixture in chosen_fixtures(args.fixtures.split(","), args.work, args.numbers, args.utterances):
        rows += measure(fixture, args.work, variants)
        if args.json:  # after each fixture: a long run that stops keeps what it measured
            harness.write_text(args.json, json.dumps({"versions": versions(), "rows": rows}, indent=1) + "\n")
    table = markdown(rows)
    if args.markdown:
        harness.write_text(args.markdown, table)
    print(table)


def versions() -> dict[str, str]:
    import ctranslate2
    import onnxruntime
    import sacrebleu

    return {"onnxruntime": onnxruntime.__version__, "ctranslate2": ctranslate2.__version__,
            "sacrebleu": sacrebleu.__version__}
