"""A benchmark report's outputs: the text table, the JSON file, the bar chart. Written files replace
only a previous report of the same kind (a bench JSON report); a chart never overwrites a file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import check_file_target, write_file_atomically

REPORT_KEYS = ("machine", "settings", "rows")  # what makes a JSON file a bench report


COLUMNS = (("backend", "{}"), ("device", "{}"), ("batch", "{}"), ("encoder_ms", "{:.2f}"),
           ("first_step_ms", "{:.2f}"), ("per_token_ms_p50", "{:.2f}"), ("per_token_ms_p90", "{:.2f}"),
           ("tokens_per_s", "{:.0f}"), ("peak_mem_mb", "{:.0f}"), ("speedup_vs_eager", "{}"))


def format_table(report: dict[str, Any]) -> str:
    """The rows as an aligned text table."""
    header = [name for name, _ in COLUMNS]
    body = [[fmt.format(r[name]) if r.get(name) is not None else "-" for name, fmt in COLUMNS]
            for r in report["rows"]]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def check_outputs(json_file: str | os.PathLike | None, plot_file: str | os.PathLike | None) -> None:
    """Before measuring (minutes): refuse what writing the report or the chart would refuse after it."""
    if json_file is not None:
        check_file_target(json_file, REPORT)
    if plot_file is not None:
        _pyplot()
        check_file_target(plot_file)  # a chart never replaces a file


def _pyplot() -> Any:
    """matplotlib.pyplot drawing to files (Agg), or the one line saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'tfm-export[plot]'") from None
    return plt


def plot(report: dict[str, Any], path: str | os.PathLike) -> None:
    """Per-token p50 by backend, device and batch, as a bar chart (needs matplotlib)."""
    plt = _pyplot()
    rows = report["rows"]
    labels = [f"{r['backend']}\n{r['device']} b{r['batch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(4, len(rows) * 1.2), 3.5))
    ax.bar(labels, [r["per_token_ms_p50"] for r in rows])
    ax.set_ylabel("per-token ms (p50)")
    fig.tight_layout()
    write_file_atomically(Path(path), lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)


def write_report(report: dict[str, Any], path: str | os.PathLike) -> None:
    """The report as JSON at `path` (atomically; replaces only an earlier bench report)."""
    text = json.dumps(report, indent=2) + "\n"
    write_file_atomically(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"), REPORT)


def is_report(path: Path) -> bool:
    """True when `path` holds a JSON report `tfm-export bench --json` wrote."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(key in data for key in REPORT_KEYS)


REPORT = ("a tfm-export bench report", is_report)  # the existing files a report may replace
