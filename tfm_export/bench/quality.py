"""The quality table's measures apart from its fixtures (`quality-table`, `wide-fixture`, `documents`): a set of
held-out sources as groups (Group, Fixture), the decoders' outputs scored (export.quality's chrF, BLEU, WER and
identical outputs), each int4 row against CTranslate2 int8 by a paired bootstrap (sacrebleu's, of chrF; for speech
the same test of WER), and the table's Markdown with the targets' verdicts first.

A row: {"fixture", "kind" (text | speech), "decoding", "variant", "size", "references": scores, "float32":
scores}, the scores export.quality's (chrf, bleu; wer) plus "identical" (% of outputs equal to the other
side's). The targets (#41): int4 at most 1 chrF point below float32 (speech: at most 1 WER point above) and
at or above CTranslate2 int8, on every fixture and decoding.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..export.quality import KINDS, identical
from . import harness

log = logging.getLogger("quality_table")
BOOTSTRAP = 1000  # the bootstrap's samples
BASELINE = "ct2 int8"  # what each int4 row is tested against


# --- the sets


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


Decoder = Callable[[Group, dict[str, Any]], list[str]]  # (group, decoding options) -> output texts


# --- scores


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


# --- the report


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
