"""Quality of reduced precision on trained models: the quality table (float32, int8, int4, CTranslate2), its Markdown and verdicts, CTranslate2's rows, which weights the 4 bits cost, fixtures trained wide."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import numpy as np
import os
import random
import shutil
import tempfile

from benchmarks import fixtures
from tfm_export.bench import harness
from tfm_export.export.int4 import Int4Settings
from tfm_export.export.quality import KINDS, decode_set, identical, read_eval_file


# --- quality_table --------------------------------------------------------------------------------

QUALITY_TABLE_DOC = r"""The quality table of reduced precision (#41): every trained fixture, float32 against int8, int4 and CTranslate2.

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

ROOT = Path(__file__).resolve().parents[1]


MAX_NEW_TOKENS = 64  # the longest answer is under 30 tokens; a looping variant stops here
CALIBRATION, CALIBRATION_SEED = 256, 1  # training sources for --int4-method gptq (never the held-out ones)
BASELINE, BOOTSTRAP = "ct2 int8", 1000  # what each int4 row is tested against, and the bootstrap's samples
NUM2WORDS = ROOT / "models" / "num2words-de"
WHISPER = ROOT / "models" / "whisper-digits"
DEFAULT_INT4 = Int4Settings()
LEVELS = next(f for f in dataclasses.fields(Int4Settings) if f.name == "accuracy_level").metadata["choices"]

log = logging.getLogger("quality_table")


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


def decode_all(fixture: Fixture, decoders: dict[str, Decoder], modes: dict[str, dict[str, Any]]
               ) -> dict[str, dict[str, list[str]]]:
    """decoding -> variant -> the outputs of every group's sources, in order."""
    outputs: dict[str, dict[str, list[str]]] = {}
    for mode, options in modes.items():
        for variant, decode in decoders.items():
            texts: list[str] = []
            seconds = harness.timed(lambda: texts.extend(t for group in fixture.groups for t in decode(group, options)))
            outputs.setdefault(mode, {})[variant] = texts
            log.info("%s %s %s: %d outputs in %.1f s", fixture.name, mode, variant, len(texts), seconds)
    return outputs


def scores(kind: str, hypotheses: list[str], others: list[str]) -> dict[str, float]:
    """export.quality's scores of the kind (chrF and BLEU; WER) and the share of identical outputs."""
    return {**KINDS[kind][0](hypotheses, others), "identical": identical(hypotheses, others)}


def score_rows(fixture: Fixture, outputs: dict[str, dict[str, list[str]]]) -> list[dict[str, Any]]:
    """One row per decoding and variant: scores against the references and against float32's outputs; each int4
    row also its paired bootstrap against CTranslate2 int8 (`versus_ct2_int8`: chrF, or WER for speech)."""
    references = [r for group in fixture.groups for r in group.references]
    rows = []
    for mode, by_variant in outputs.items():
        float32 = by_variant["float32"]
        for variant, hypotheses in by_variant.items():
            row = {"fixture": fixture.name, "kind": fixture.kind, "decoding": mode, "variant": variant,
                   "size": len(hypotheses), "references": scores(fixture.kind, hypotheses, references),
                   "float32": scores(fixture.kind, hypotheses, float32)}
            if variant.startswith("int4") and BASELINE in by_variant:
                test = paired_bootstrap if fixture.kind == "text" else paired_bootstrap_wer
                row["versus_ct2_int8"] = test(by_variant[BASELINE], hypotheses, references)
            rows.append(row)
    return rows


def paired_bootstrap(baseline: list[str], hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """sacrebleu's paired bootstrap resampling of chrF (BOOTSTRAP samples, its fixed seed): `hypotheses`' chrF
    minus `baseline`'s, and the p-value of that difference (small: the sources' sampling does not explain it)."""
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    test = PairedTest([("baseline", baseline), ("variant", hypotheses)], {"chrf": CHRF()}, [references],
                      test_type="bs", n_samples=BOOTSTRAP)
    _, results = test()
    base, variant = next(value for key, value in results.items() if key != "System")
    return {"chrf_delta": round(variant.score - base.score, 2), "p": round(variant.p_value, 4)}


def paired_bootstrap_wer(baseline: list[str], hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """paired_bootstrap for speech: WER (in points) resampled by utterance as sacrebleu resamples sentences (the
    same seed, samples and p-value: its Moses-style paired bootstrap; sacrebleu has no WER). `wer_delta`: the
    variant's WER minus the baseline's (positive: worse)."""
    import jiwer
    import numpy as np

    def stats(outputs: list[str]) -> Any:  # (errors, reference words) per utterance
        words = [jiwer.process_words(r, h) for r, h in zip(references, outputs)]
        return np.array([(w.substitutions + w.deletions + w.insertions, w.hits + w.substitutions + w.deletions)
                         for w in words], dtype=np.float64)

    base, variant = stats(baseline), stats(hypotheses)
    wer = lambda s: 100 * s[..., 0].sum(-1) / np.maximum(s[..., 1].sum(-1), 1)  # noqa: E731
    rng = np.random.default_rng(int(os.environ.get("SACREBLEU_SEED", "12345")))
    idx = rng.choice(len(references), size=(BOOTSTRAP, len(references)), replace=True)
    diffs = np.abs(wer(variant[idx]) - wer(base[idx]))
    delta = float(wer(variant) - wer(base))
    # sacrebleu's p (its private _compute_p_value): centred resampled differences beyond the real one, plus one.
    p = (int(np.sum(diffs - diffs.mean() > abs(delta))) + 1) / (BOOTSTRAP + 1)
    return {"wer_delta": round(delta, 2), "p": round(p, 4)}


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


def chosen_fixtures(names: list[str], work: Path, numbers: int, utterances: int) -> list[Fixture]:
    hf_fixtures = fixtures.hf()
    made = {"num2words-de": lambda: num2words_fixture(numbers),
            "whisper-digits": lambda: whisper_fixture(work, utterances),
            **{family: (lambda f=family: trained_fixture(f, numbers)) for family in hf_fixtures.FAMILIES}}
    unknown = [n for n in names if n not in made]
    if unknown:
        raise SystemExit(f"unknown fixtures {unknown}; choose from {', '.join(made)}")
    return [made[n]() for n in names]


def quality_table_main(argv: list[str] | None = None) -> None:
    hf_fixtures = fixtures.hf()
    everything = [*hf_fixtures.FAMILIES, "num2words-de", "whisper-digits"]
    parser = argparse.ArgumentParser(description=QUALITY_TABLE_DOC.split("\n")[0])
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


# --- quality_report -------------------------------------------------------------------------------

QUALITY_REPORT_DOC = r"""The quality table's markdown (`quality-table`'s rows): the targets' verdicts first, then the scores.

A row: {"fixture", "kind" (text | speech), "decoding", "variant", "size", "references": scores, "float32":
scores}, the scores export.quality's (chrf, bleu; wer) plus "identical" (% of outputs equal to the other
side's). The targets (#41): int4 at most 1 chrF point below float32 (speech: at most 1 WER point above) and
at or above CTranslate2 int8, on every fixture and decoding.
"""

TARGET_DROP = 1.0  # points int4 may lose against float32
SIGNIFICANCE = 0.05  # p-value under which a shortfall against CT2 int8 counts as real
INT4, CT2 = "int4", "ct2 int8"
MAIN = ("float32", "int8", "int4", "ct2 float32", "ct2 int8")  # the detail table's variants
# kind -> (the score, higher is better, how it is named)
METRIC = {"text": ("chrf", True, "chrF"), "speech": ("wer", False, "WER")}


def cases(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(fixture, decoding) -> variant -> row, in the rows' order."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        out.setdefault((row["fixture"], row["decoding"]), {})[row["variant"]] = row
    return out


def loss(row: dict[str, Any], base: dict[str, Any]) -> float:
    """Points `row` loses against `base` on the references (chrF fallen, WER risen)."""
    metric, higher, _ = METRIC[row["kind"]]
    lost = base["references"][metric] - row["references"][metric]
    return round(lost if higher else -lost, 2) + 0.0  # no -0.0


def verdicts(variants: dict[str, dict[str, Any]]) -> tuple[bool | None, bool | None]:
    """(int4 within TARGET_DROP of float32, int4 at or above CT2 int8); None where a row is missing."""
    if INT4 not in variants:
        return None, None
    within = loss(variants[INT4], variants["float32"]) <= TARGET_DROP
    above = loss(variants[INT4], variants[CT2]) <= 0 if CT2 in variants else None
    return within, above


def significantly_below(row: dict[str, Any] | None) -> bool | None:
    """Whether the int4 row's chrF is below CT2 int8's (its WER above) by more than the sources' sampling explains
    (the paired bootstrap quality_table stores: worse, and p < SIGNIFICANCE, sacrebleu's two-sided p of the
    difference); None without one (no CT2 row)."""
    test = (row or {}).get("versus_ct2_int8")
    if test is None:
        return None
    worse = test["chrf_delta"] < 0 if "chrf_delta" in test else test["wer_delta"] > 0  # WER: higher is worse
    return worse and test["p"] < SIGNIFICANCE


def _mark(ok: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[ok]


def _lost(row: dict[str, Any] | None, base: dict[str, Any]) -> str:
    return "-" if row is None else f"{loss(row, base):.2f}"


def summary(rows: list[dict[str, Any]]) -> str:
    """Per fixture and decoding: float32's score against the references, the points each variant loses
    against it (chrF fallen, WER risen; negative: gained) and the two verdicts."""
    lines = ["| fixture | decoding | sources | float32 | int8 lost | int4 lost | int4 lost, other levels | "
             "CT2 int8 lost | int4 within 1 of float32 | int4 at or above CT2 int8 | int4 below it, p |",
             "|---" * 11 + "|"]
    counts = {"within": [0, 0], "above": [0, 0], "below": [0, 0]}
    for (fixture, decoding), variants in cases(rows).items():
        base = variants["float32"]
        metric, _, name = METRIC[base["kind"]]
        levels = [loss(r, base) for v, r in variants.items() if v.startswith("int4 level")]  # blocks: detail
        spread = _range(levels) if levels else "-"
        within, above = verdicts(variants)
        below = significantly_below(variants.get(INT4))
        for key, ok in (("within", within), ("above", above), ("below", below)):
            if ok is not None:
                counts[key][0] += ok
                counts[key][1] += 1
        lines.append(f"| {fixture} | {decoding} | {base['size']} | {name} {base['references'][metric]:.2f} | "
                     f"{_lost(variants.get('int8'), base)} | {_lost(variants.get(INT4), base)} | {spread} | "
                     f"{_lost(variants.get(CT2), base)} | {_mark(within)} | {_mark(above)} | "
                     f"{_below(variants.get(INT4), below)} |")
    head = (f"int4 within {TARGET_DROP:g} point of float32: {counts['within'][0]} of {counts['within'][1]} "
            f"cases; int4 at or above CTranslate2 int8: {counts['above'][0]} of {counts['above'][1]}; below it by "
            f"more than the sources' sampling explains (paired bootstrap, p < {SIGNIFICANCE:g}): "
            f"{counts['below'][0]} of {counts['below'][1]}.")
    return head + "\n\n" + "\n".join(lines) + "\n"


def _below(row: dict[str, Any] | None, below: bool | None) -> str:
    """The bootstrap's verdict and p-value: "**yes** (0.003)", "no (0.41)", or "-" without a test."""
    if below is None:
        return "-"
    test = row["versus_ct2_int8"]
    if not test.get("chrf_delta", test.get("wer_delta")):
        return "no (the same score)"  # sacrebleu's test gives no difference its smallest p
    return f"{'**yes**' if below else 'no'} ({test['p']:.3g})"


def _range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if low == high else f"{low:.2f} .. {high:.2f}"


def detail(rows: list[dict[str, Any]], variants: tuple[str, ...] = MAIN) -> str:
    """Every score of the chosen variants: against the references and against float32's outputs."""
    lines = ["| fixture | decoding | variant | chrF / WER | BLEU | exact % | against float32: chrF / WER | "
             "identical % |", "|---" * 8 + "|"]
    for row in rows:
        if row["variant"] not in variants:
            continue
        metric = METRIC[row["kind"]][0]
        refs, f32 = row["references"], row["float32"]
        bleu = f"{refs['bleu']:.2f}" if "bleu" in refs else "-"
        lines.append(f"| {row['fixture']} | {row['decoding']} | {row['variant']} | {refs[metric]:.2f} | {bleu} | "
                     f"{refs['identical']:.1f} | {f32[metric]:.2f} | {f32['identical']:.1f} |")
    return "\n".join(lines) + "\n"


def wide(rows: list[dict[str, Any]], variants: tuple[str, ...] = MAIN[1:]) -> str:
    """One line per fixture and decoding: float32's scores against the references, then per variant its
    score against the references / against float32's outputs / % identical to float32's outputs."""
    head = " | ".join(variants)
    lines = [f"| fixture | decoding | float32: chrF (WER) / BLEU / exact % | {head} |",
             "|---" * (3 + len(variants)) + "|"]
    for (fixture, decoding), by_variant in cases(rows).items():
        base = by_variant["float32"]
        metric = METRIC[base["kind"]][0]
        bleu = f"{base['references']['bleu']:.2f}" if "bleu" in base["references"] else "-"
        cells = [f"{r['references'][metric]:.2f} / {r['float32'][metric]:.2f} / {r['float32']['identical']:.1f}"
                 if (r := by_variant.get(v)) else "-" for v in variants]
        lines.append(f"| {fixture} | {decoding} | {base['references'][metric]:.2f} / {bleu} / "
                     f"{base['references']['identical']:.1f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary, the wide table of the quality_report_main variants, then every row (int4's settings apart)."""
    settings = tuple(dict.fromkeys(r["variant"] for r in rows if r["variant"].startswith("int4")))
    return "\n".join([summary(rows), wide(rows), detail(rows), "int4 by setting (accuracy level, block size):\n",
                      detail(rows, settings)])


# --- quality_ct2 ----------------------------------------------------------------------------------

QUALITY_CT2_DOC = r"""CTranslate2's rows of the quality table (`quality-table`): conversions and decoders on the export's ids.

Every CTranslate2 row reads the same token ids as the ONNX rows: the float32 export's tokenizer encodes the
source (its language tokens included) and decodes the output, and its language options give the forced first
token (CTranslate2's `target_prefix`). Only the model's arithmetic differs, so a lower score is the
quantisation's, not a tokenizer's. CTranslate2 quantises at load time (`compute_type`), so one float32
conversion serves both rows.

    convert_folder(folder, out)      a Hugging Face folder (text or Whisper): ctranslate2's TransformersConverter
    convert_native(checkpoint, out)  our own checkpoint: tfm_export.bench.ct2's spec writer
    TextDecoder / WhisperDecoder     (group, decoding options) -> output texts, as quality_table's decoders
"""

CT2_BATCH = 16  # sources per translate_batch call (the ONNX rows decode 16 at a time too: quality.TEXT_BATCH)


def prepared(out: Path, make: Callable[[Path], None]) -> Path:
    """`out` made by `make(partial)` and renamed into place, unless a previous run left it."""
    if not out.exists():
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted run's
        make(partial)
        partial.rename(out)
    return out


def convert_folder(folder: Path, out: Path) -> Path:
    """ctranslate2's TransformersConverter on a Hugging Face folder, float32 (its loaders: Marian, BART, mBART,
    M2M100 (NLLB too), Pegasus, T5, MT5, Whisper, ...)."""
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_model(self, *args: Any, **kwargs: Any) -> Any:
            model = super().load_model(*args, **kwargs)
            # transformers 5's T5Config always says tied (scale_decoder_outputs says whether the outputs are
            # scaled); CTranslate2 scales them when it reads tied (as `benchmarks families`).
            if hasattr(model.config, "scale_decoder_outputs"):
                model.config.tie_word_embeddings = model.config.scale_decoder_outputs
            # CTranslate2 tells mBART-50 from mBART-25 by config.tokenizer_class; without one (the fixture's
            # config.json) it takes mBART-25's decoder start, the language token instead of </s> then the language.
            if model.config.model_type == "mbart" and not getattr(model.config, "tokenizer_class", None):
                model.config.tokenizer_class = "MBart50Tokenizer"
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
    from tfm_export.bench.ct2 import convert

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

        from tfm_export.runtime.speech.whisper import speech_settings

        self.model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type=compute_type,
                                                inter_threads=1)
        self.settings, self.features = speech_settings(runner)
        self.runner, self.base = runner, base

    def __call__(self, group: Any, decoding: dict[str, Any]) -> list[str]:
        import ctranslate2

        from tfm_export.audio.features import log_mel
        from tfm_export.runtime.speech.whisper import read_samples
        from tfm_export.runtime.speech.prompt import init_tokens

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


# --- int4_sensitivity -----------------------------------------------------------------------------

INT4_SENSITIVITY_DOC = r"""Which weights does 4-bit rounding cost quality on? A trained fixture with some weights rounded to 4 bits (#41).

    .venv/bin/python -m benchmarks int4-sensitivity pegasus [--numbers 500] [--keep CLASSES[;CLASSES...]] [--json OUT]

The int4 export of the 64-wide trained fixtures stays below CTranslate2 int8's quality on some of them (BENCHMARKS.md,
Quality). This asks where the loss comes from, in transformers' eager model: each Linear weight (the vocabulary head
left float32, as int4 keeps it 8-bit) is fake-quantised as `--quantize int4` rounds it by default on these widths
(rtn: each block of 32 inputs of a column min/max-scaled to 0..15 with a zero point, as MatMulNBits stores it), and
greedy decodes of the held-out numbers (the first target language) are compared with float32's outputs (% identical)
and the references (chrF). Rows: every class rounded; one class only; every class but one. `--keep` instead rounds
everything but the listed classes (comma-separated; `;` between sets), e.g. the whole decoder kept: what the encoder's
4 bits cost alone. Classes are `encoder.` / `decoder.` + `self.` / `cross.` / `ffn.` + the Linear's name.
The fake quantisation reproduces the export's int4 (pegasus: 89.6 % identical and chrF 89.40, the export 89.6 and
89.38): activations at 8 bits (accuracy level 4) matter little next to the weights' 4.
"""

ROOT = Path(__file__).resolve().parents[1]


BLOCK = 32  # the block `--int4-block-size auto` gives weights under 1024 inputs (every fixture weight)
SENSITIVITY_BATCH = 50


def rtn(weight: Any, block: int = BLOCK) -> Any:
    """`weight` (out, in) rounded to 4 bits in blocks of `block` inputs and back (export.int4's rtn: ORT's packing)."""
    import torch

    out, k = weight.shape
    x = torch.nn.functional.pad(weight, (0, (-k) % block)).reshape(out, -1, block)
    low, high = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    scale = (high - low) / 15
    scale[scale == 0] = 1
    zero = torch.round(-low / scale).clamp(0, 15)
    return ((torch.clamp(torch.round(x / scale + zero), 0, 15) - zero) * scale).reshape(out, -1)[:, :k]


def weight_class(name: str) -> str:
    """encoder.self.q_proj, decoder.cross.out_proj, decoder.ffn.fc2, ... (BART-like and T5 module names)."""
    side = "encoder" if ".encoder." in f".{name}" and "encoder_attn" not in name else "decoder"
    part = ("cross" if "encoder_attn" in name or "EncDecAttention" in name else
            "self" if "self_attn" in name or "SelfAttention" in name else "ffn")
    return f"{side}.{part}.{name.split('.')[-1]}"


class Probe:
    """A fixture's eager model, its float32 outputs on the held-out sources, and decodes with weights rounded."""

    def __init__(self, family: str, numbers: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        folder = fixtures.hf().trained_folder(family)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if any(fixtures.hf().lang_code(family, lang) for lang in fixtures.hf().TARGETS[family]):
            raise SystemExit(f"{family} takes language tokens; this probe decodes families whose source says the "
                             f"target (marian, bart, pegasus, t5, flan_t5, mt5)")
        examples = [fixtures.hf().example(family, n, lang) for lang in fixtures.hf().TARGETS[family] for n in fixtures.hf().split_numbers()[1][:numbers]]
        self.sources, self.references = [e.source for e in examples], [e.target for e in examples]
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.original = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.linears = {name: weight_class(name) for name, m in self.model.named_modules()
                        if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
        self.float32 = self.decode()

    def decode(self) -> list[str]:
        import torch

        out: list[str] = []
        for i in range(0, len(self.sources), SENSITIVITY_BATCH):
            batch = self.tokenizer(self.sources[i:i + SENSITIVITY_BATCH], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = self.model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=64)
            out += [t.strip() for t in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        return out

    def rounded(self, classes: set[str]) -> dict[str, float]:
        """% of outputs identical to float32's and chrF against the references, the weights of `classes` 4-bit."""
        import sacrebleu
        import torch

        self.model.load_state_dict(self.original)
        modules = dict(self.model.named_modules())
        with torch.no_grad():
            for name, cls in self.linears.items():
                if cls in classes:
                    modules[name].weight.copy_(rtn(modules[name].weight))
        outs = self.decode()
        same = sum(a == b for a, b in zip(outs, self.float32))
        return {"identical": round(100 * same / len(outs), 1),
                "chrf": round(sacrebleu.corpus_chrf(outs, [self.references]).score, 2)}


def int4_sensitivity_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=INT4_SENSITIVITY_DOC.split("\n\n")[0])
    parser.add_argument("family", help="a trained fixture: marian, bart, pegasus, t5, ...")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers decoded")
    parser.add_argument("--keep", default="", help="class sets kept float32 (the rest 4-bit), ';' between sets")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    probe = Probe(args.family, args.numbers)
    classes = sorted(set(probe.linears.values()))
    rows: dict[str, Any] = {"float32 chrF": probe.rounded(set())["chrf"], "all 4-bit": probe.rounded(set(classes))}
    print(args.family, rows, flush=True)
    for keep in filter(None, args.keep.split(";")):
        rows[f"keep {keep}"] = probe.rounded(set(classes) - set(keep.split(",")))
        print(f"keep {keep}: {rows[f'keep {keep}']}", flush=True)
    if not args.keep:
        for cls in classes:
            rows[cls] = {"only": probe.rounded({cls}), "all but": probe.rounded(set(classes) - {cls})}
            print(cls, rows[cls], flush=True)
    if args.json:
        harness.write_text(args.json, json.dumps(rows, indent=1) + "\n")


# --- wide_fixture ---------------------------------------------------------------------------------

WIDE_FIXTURE_DOC = r"""int4 on weights of a real model's width (#41): a wide model trained on the fixtures' task, measured.

    .venv/bin/python -m benchmarks wide-fixture --work W [--family marian] [--d-model 512] [--ffn 2048] \
        [--steps 200] [--lr 1e-3] [--blocks 32,64,128] [--methods gptq] [--numbers 500] [--json OUT.json]

The trained fixtures (tests/fixtures/trained) are 64 wide: a block of 64 or 128 is a whole column there, the
coarsest a block can be, so their block-size rows say little about a model of NLLB's width (1024, blocks of 128
an eighth of a column), and the fixtures' shortfall against CTranslate2 int8 may be their width's. This trains a
family's fixture task (`--family`, marian by default; tests/fixtures/train_fixtures.py, the same data, tokenizer and
schedule; the fixture's layer counts) at `--d-model` (heads of 64, `--ffn`), saves it as the fixtures are saved
(W/trained/<family>-d512, reused when there), and runs quality_table's measurement on it: float32, int8, int4 at each
block size and CTranslate2 int8, greedy and the folder's default decoding, the held-out numbers in every target
language.
"""

ROOT = Path(__file__).resolve().parents[1]


def wide_fixture_main() -> None:
    parser = argparse.ArgumentParser(description=WIDE_FIXTURE_DOC.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="the trained folder, exports and conversions")
    parser.add_argument("--family", default="marian", help="the trained fixture whose task and layout to widen")
    parser.add_argument("--d-model", type=int, default=512, help="the model's width (heads of 64)")
    parser.add_argument("--ffn", type=int, default=2048, help="the feed-forward width")
    parser.add_argument("--steps", type=int, default=200, help="training steps of 64 pairs (200: 55 %% of held-out "
                        "numbers exact, as the fixtures stop on the way; 900: all of them)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (the fixtures': 2e-3)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for training")
    parser.add_argument("--blocks", default="32,64,128", help="int4 block sizes to measure")
    parser.add_argument("--methods", default="", help="int4 methods besides the default (e.g. gptq)")
    parser.add_argument("--numbers", type=int, default=500, help="held-out numbers per target language")
    parser.add_argument("--json", type=Path, help="write the training metrics and the rows here")
    args = parser.parse_args()
    name = f"{args.family}-d{args.d_model}"
    folder = args.work / "trained" / name  # beside, not under, work/<name> (the exports)
    metrics = None
    if folder.exists() and not (folder / "model.safetensors").exists():
        raise SystemExit(f"{folder} exists and holds no trained model; remove it or choose another --work")
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))  # train() replaces its folder
        layers = fixtures.hf().SHAPES["trained"][args.family]
        # heads of 64, as Marian's, NLLB's and T5's (d_kv)
        shape = fixtures.hf().Shape(args.d_model, layers.encoder_layers, layers.decoder_layers, args.d_model // 64, args.ffn,
                        64 if layers.d_kv else 0)
        metrics = fixtures.train().train(args.family, args.steps, folder=stage, shape=shape, lr=args.lr, threads=args.threads)
        stage.rename(folder)
    fixture = dataclasses.replace(trained_fixture(args.family, args.numbers), name=name, model=folder)
    blocks = tuple(int(b) for b in args.blocks.split(",") if b)
    methods = tuple(m for m in args.methods.split(",") if m)
    variants = variant_options((4,), blocks, methods, (), ())
    rows = measure(fixture, args.work, variants)
    if args.json:
        harness.write_text(args.json, json.dumps({"versions": versions(), "training": metrics, "rows": rows}, indent=1))
    print(markdown(rows))
