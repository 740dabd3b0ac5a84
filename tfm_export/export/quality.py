"""Quality, measured where an export is made (#41): a held-out set decoded by the export and, for a
reduced-precision variant (int8, float16, --optimize), by its own float32 graphs, scored with the metrics
users quote: chrF and BLEU (sacrebleu) for text, word error rate (jiwer) for speech.

"Tokens differ" tells a user nothing; "int8 keeps chrF 99.1 against float32 and loses 0.3 chrF against
the references" does. The set is the user's (`--eval-file`: source, tab, reference per line; for speech the
source is an audio file) or, without one, the folder's own text (export.quality_sources: its samples, built-in
sentences the tokenizer encodes, or espeak-ng speaking them), scored against float32's outputs only; that
comparison is also stored typed (Manifest.quality, `variant_quality`). The report goes into the manifest's
validation (`quality`), and `max_quality_drop` fails the export when the variant loses more than that many
points.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ConfigError, InputError, ValidationError
from ..manifest import Manifest, VariantQuality

log = logging.getLogger(__name__)

TEXT_BATCH = 16  # texts decoded per call: bounds the memory of a large set


@dataclass(frozen=True)
class EvalSet:
    """A held-out set: sources (texts, or audio for a speech model: paths, or a recording's bytes) and, where
    given, references."""

    sources: tuple[Any, ...]
    references: tuple[str, ...] | None
    origin: str  # the file's name, "samples", "built-in sentences, en", ... (export.quality_sources)
    base: Path | None = None  # the folder audio paths are relative to (the eval file's)
    # Each output's length at most (None: the export's own default): the default sets cap it (quality_sources).
    max_new_tokens: int | None = None


def read_eval_file(path: str | Path) -> EvalSet:
    """`source<TAB>reference` per line (the reference may be left out on every line); blank lines are skipped.
    Audio sources are paths relative to the file's folder."""
    path = Path(path)
    try:
        lines = [line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the eval file {path}: {exc}") from None
    rows = [(n, line.split("\t")) for n, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise InputError(f"the eval file {path} is empty; write one `source<TAB>reference` per line")
    widths = {len(cells) for _, cells in rows}
    bad = next((n for n, cells in rows if len(cells) > 2), None)
    if bad is not None or len(widths) > 1:
        where = bad or next(n for n, cells in rows if len(cells) != len(rows[0][1]))
        raise InputError(f"{path}, line {where}: write `source<TAB>reference` on every line, or the source alone "
                         f"on every line")
    references = tuple(cells[1] for _, cells in rows) if widths == {2} else None
    return EvalSet(tuple(cells[0] for _, cells in rows), references, path.name, path.parent)


def text_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    import sacrebleu

    return {"chrf": round(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score, 2),
            "bleu": round(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score, 2)}


EMPTY = "<empty>"  # an empty transcription, as one word: jiwer refuses empty references


def speech_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    import jiwer

    hypotheses, references = [h or EMPTY for h in hypotheses], [r or EMPTY for r in references]
    return {"wer": round(100 * jiwer.wer(references, hypotheses), 2)}  # in points, as chrF


# kind -> (scores, the score whose loss is the drop, and whether higher is better)
KINDS: dict[str, tuple[Callable[..., dict[str, float]], str, bool]] = {
    "text": (text_scores, "chrf", True), "speech": (speech_scores, "wer", False)}


def identical(hypotheses: Sequence[str], others: Sequence[str]) -> float:
    """The share of outputs equal, text for text, to the other side's, in percent: agreement with float32's
    outputs, or exact matches of the references."""
    if len(hypotheses) != len(others):
        raise ValueError(f"{len(hypotheses)} outputs against {len(others)}: score the same sources")
    same = sum(h == o for h, o in zip(hypotheses, others))
    return round(100 * same / len(others), 2) if others else 100.0


def decode_set(runner: Any, sources: Sequence[str], base: Path | None, speech: bool, **options: Any) -> list[str]:
    """Each source's best output text, with the runner's default decoding changed by `options` (transcribe's
    or translate's: num_beams, target_lang, ...)."""
    if speech:  # a path relative to the eval file, or a recording's bytes (export.quality_sources)
        return [runner.transcribe((base or Path()) / s if isinstance(s, str) else s, **options)["text"].strip()
                for s in sources]
    out: list[str] = []
    for i in range(0, len(sources), TEXT_BATCH):
        out += [t.strip() for t in runner.translate(list(sources[i:i + TEXT_BATCH]), **options)]
    return out


def measure_quality(folder: Path, manifest: Manifest, eval_set: EvalSet,
                    float32: tuple[Path, Manifest] | None = None, device: str = "cpu") -> dict[str, Any]:
    """Decode `eval_set` with the export in `folder` (and with the float32 export `float32`); the report:
    scores against float32's outputs and against the references, and `drop`, the points lost (against the
    references when there are some, else against float32; None when there is nothing to compare with)."""
    from ..runtime import RuntimeOptions, open_export
    from .decoding_checks import checking_options

    kind = "speech" if manifest.speech or manifest.filterbank else "text"
    scores, main, higher = KINDS[kind]
    if manifest.tokenizer is None and kind == "text":
        raise ConfigError("measuring quality needs the export's tokenizer; this export takes token ids only")
    limit = {"max_new_tokens": eval_set.max_new_tokens} if eval_set.max_new_tokens else {}
    hypotheses = decode_set(open_export(folder, device=device, options=checking_options(manifest, RuntimeOptions()),
                                        manifest=manifest), eval_set.sources, eval_set.base, kind == "speech", **limit)
    report: dict[str, Any] = {"kind": kind, "set": eval_set.origin, "size": len(eval_set.sources), "metric": main}
    reference = None
    if float32 is not None:
        runner = open_export(float32[0], device=device, options=checking_options(float32[1], RuntimeOptions()),
                             manifest=float32[1])
        reference = decode_set(runner, eval_set.sources, eval_set.base, kind == "speech", **limit)
        report["against_float32"] = against_float32(kind, hypotheses, reference)
    if eval_set.references is not None:
        report["against_references"] = {"export": scores(hypotheses, eval_set.references)}
        if reference is not None:
            report["against_references"]["float32"] = scores(reference, eval_set.references)
    report["drop"] = quality_drop(report, main, higher)
    log.info("quality on %s (%d sources): %s", eval_set.origin, len(eval_set.sources), report)
    return report


def against_float32(kind: str, hypotheses: Sequence[str], float32: Sequence[str]) -> dict[str, float]:
    """The variant's outputs scored against float32's, and the share identical (`identical`, percent). Pairs
    where both are empty agree and are left out of the metric (chrF gives empty strings 0); all of them: a
    perfect score."""
    scores = KINDS[kind][0]
    pairs = [(h, f) for h, f in zip(hypotheses, float32) if h or f]
    if pairs:
        scored = scores([h for h, _ in pairs], [f for _, f in pairs])
    else:
        scored = {"chrf": 100.0, "bleu": 100.0} if kind == "text" else {"wer": 0.0}
    return {**scored, "identical": identical(hypotheses, float32)}


def variant_quality(report: dict[str, Any] | None) -> VariantQuality | None:
    """The manifest's typed record of a quality report's comparison with float32 (None: there was none)."""
    if not report or "against_float32" not in report:
        return None
    against = report["against_float32"]
    return VariantQuality(report["metric"], float(against[report["metric"]]), float(against["identical"]),
                          report["set"], int(report["size"]))


def format_variant_quality(manifest: Manifest) -> str:
    """One line: the variant's score against float32's outputs (Manifest.quality; the CLI prints it after the
    validation, `tfm-export validate` again)."""
    quality, variant = manifest.quality, manifest.variant
    if quality is None:
        return ""
    name = (variant.quantize or variant.dtype) + (" optimized" if variant.optimized else "")
    metric = {"chrf": "chrF", "wer": "WER"}[quality.metric]
    return (f"quality: {name} against float32 on {quality.size} sources ({quality.sources}): {metric} "
            f"{quality.score:.2f}, {quality.identical:.0f} % of outputs identical")


def quality_drop(report: dict[str, Any], main: str, higher: bool) -> float | None:
    """Points lost: float32's score minus the export's against the references (WER: the rise), or, without
    references, the distance from float32's own outputs (100 - chrF; WER itself)."""
    refs = report.get("against_references", {})
    if "float32" in refs:
        lost = refs["float32"][main] - refs["export"][main]
        return round(lost if higher else -lost, 2)
    if "against_float32" in report:
        score = report["against_float32"][main]
        return round(100 - score if higher else score, 2)
    return None


def check_drop(report: dict[str, Any], max_drop: float | None) -> None:
    """ValidationError (carrying the validation `report`) when its quality report lost more than `max_drop`
    points."""
    quality = report.get("quality") or {}
    drop = quality.get("drop")
    if max_drop is None or drop is None or drop <= max_drop:
        return
    raise ValidationError(f"the export loses {drop:g} {quality['metric']} points on {quality['set']} "
                          f"(--max-quality-drop {max_drop:g}); keep float32 or try another variant", report)


def format_quality(report: dict[str, Any]) -> str:
    """One line per comparison (the CLI prints it after the validation table)."""
    lines = [f"quality on {report['set']} ({report['size']} {report['kind']} sources):"]
    show = lambda s: ", ".join(f"{k} {v:.2f}" for k, v in s.items())  # noqa: E731
    if "against_float32" in report:
        lines.append(f"  against float32's outputs: {show(report['against_float32'])}")
    for who, s in report.get("against_references", {}).items():
        lines.append(f"  {who} against the references: {show(s)}")
    if report.get("drop") is not None:
        lines.append(f"  drop: {report['drop']:g} {report['metric']} points")
    return "\n".join(lines)
