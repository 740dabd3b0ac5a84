"""The words of a validation report (export.validate): the one-line failure a ValidationError carries, and the
table the CLI prints (per output, the greedy and default decodings, the quality report)."""

from __future__ import annotations

from typing import Any

from .quality import format_quality


def _settings(default: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in default["config"].items())


def failure_message(stats: dict[str, Any], failed: list[str], greedy: dict, default: dict | None) -> str:
    parts = [f"{k} ({stats[k].graph}) max abs diff {stats[k].max_abs:.3g} at shape {stats[k].shape}"
             + (f", {stats[k].mismatches} mismatched ids" if stats[k].mismatches else "") for k in failed]
    if not greedy["equal"]:
        parts.append(f"greedy tokens differ on rows {greedy['mismatched_rows']}")
    if greedy.get("static_cache_mismatched_rows"):
        rows = greedy["static_cache_mismatched_rows"]
        parts.append(f"the static-cache decoder's greedy tokens differ on rows {rows}")
    if default and default["mismatched_rows"]:
        parts.append(f"the default decoding ({_settings(default)}) differs from the {default['reference']} "
                     f"on rows {default['mismatched_rows']}")
    numeric = (default or {}).get("logits")
    if numeric and not numeric["ok"]:
        parts.append(f"the default decoding's logits differ from eager's by {numeric['max_abs']:.3g} "
                     f"(searches apart at {numeric['missing']} steps)")
    return "validation failed: " + "; ".join(parts)


def format_report(report: dict[str, Any]) -> str:
    """The validation report as a text table (the CLI prints it)."""
    rows = report.get("outputs", {})
    w = max([24, *(len(name) + 1 for name in rows)])  # extra graphs' outputs have longer names
    g = max([8, *(len(row["graph"]) for row in rows.values())])
    # Under agreement (int8, int4) the differences from float32 are the point of the variant: shown, not judged.
    judged = report.get("mode") != "agreement"
    lines = [f"{'output':<{w}} {'graph':<{g}} {'max abs':>10} {'max rel':>10}  {'worst shape':<22} "
             f"{'ok' if judged else 'ok (not checked: quantised)'}"]
    for name, row in rows.items():
        verdict = ("yes" if row["ok"] else "NO") if judged else "-"
        lines.append(f"{name:<{w}} {row['graph']:<{g}} {row['max_abs']:>10.2e} {row['max_rel']:>10.2e}  "
                     f"{str(row['worst_shape']):<22} {verdict}")
    greedy = report.get("greedy")
    if greedy and report.get("mode") in ("agreement", "tolerance"):
        lines.append(f"greedy tokens vs float32 eager: {greedy['row_agreement']:.1%} of rows and "
                     f"{greedy['token_agreement']:.1%} of tokens agree on {greedy['sources']} {greedy['from']} "
                     f"sources ({report['mode']}: greedy differences are reported, not failed)")
    elif greedy:
        lines.append(f"greedy tokens: {'equal' if greedy['equal'] else 'DIFFER'} on {greedy['sources']} "
                     f"{greedy['from']} sources ({greedy['max_new_tokens']} new tokens max)")
    default = report.get("default")
    if default:
        lines.append(f"default decoding ({_settings(default)}): {_default_verdict(default, report.get('mode'))}")
    if greedy and "static_cache_mismatched_rows" in greedy:
        bad = greedy["static_cache_mismatched_rows"]
        lines.append(f"static-cache decoder (--cuda-graph): {'same rows' if not bad else f'DIFFERS on rows {bad}'}")
    # Against references (--eval-file) in full; against float32 alone, the caller prints Manifest.quality's line
    # (quality.format_variant_quality).
    if (report.get("quality") or {}).get("against_references"):
        lines.append(format_quality(report["quality"]))
    return "\n".join(lines)


def _default_verdict(default: dict[str, Any], mode: str | None) -> str:
    """How the default decoding compared with its reference (tokens, and the logits along its search, where
    recorded); only parity fails on a difference (export.validate), the other modes report it."""
    numeric = default.get("logits")
    logits = f"its logits within {numeric['max_abs']:.2e} of eager's" if numeric else ""
    if default["equal"]:
        return f"equal to the {default['reference']} on {default['sources']} sources" + (logits and f"; {logits}")
    reported = mode in ("agreement", "tolerance")
    note = f" ({mode}: reported, not failed)" if reported else ""
    if default["mismatched_rows"]:
        verdict = "differs" if reported else "DIFFERS"
        return (f"{verdict} from the {default['reference']} on rows {default['mismatched_rows']}{note}"
                + (logits and f"; {logits}"))
    return (f"the same tokens as the {default['reference']} on {default['sources']} sources; its logits up to "
            f"{numeric['max_abs']:.2e} from eager's, beyond the tolerance{note}")
