"""`load`'s outputs: its JSON rows and its chart (latency and throughput against the offered rate), each
recognisable as ours, so that a rerun replaces only a file `load` wrote."""

from __future__ import annotations

from pathlib import Path
import json

from tfm_export.bench import harness
from tfm_export.files import write_file_atomically

SOFTWARE = "tfm-export `benchmarks load`"  # stamped into the PNG's metadata: marks the charts we wrote


def is_load_rows(path: Path) -> bool:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(rows, list) and all(isinstance(r, dict) and {"mode", "rate", "tokens_per_s"} <= r.keys()
                                          for r in rows)


def is_load_chart(path: Path) -> bool:
    try:
        return path.read_bytes().startswith(b"\x89PNG") and SOFTWARE.encode() in path.read_bytes()[:4096]
    except OSError:
        return False


LOAD_OURS = {"json": ("a `load` JSON report", is_load_rows), "plot": ("a `load` chart", is_load_chart)}


def medians(rows: list[dict]) -> list[dict]:
    """One row per rate: the median of each measure over the repeats."""
    keys = ("tokens_per_s", "p50_s", "p99_s")
    by_rate = {rate: [r for r in rows if r["rate"] == rate] for rate in dict.fromkeys(r["rate"] for r in rows)}
    return [{"rate": rate, **{k: harness.median(r[k] for r in mine) for k in keys}} for rate, mine in by_rate.items()]


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Latency (p50 solid, p99 dashed) and throughput against the offered rate, one colour per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(10, 3.8))
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = medians([r for r in rows if r["mode"] == mode])
        rates = [r["rate"] for r in mine]
        line, = lat.plot(rates, [r["p50_s"] for r in mine], marker="o", label=f"{mode} p50")
        lat.plot(rates, [r["p99_s"] for r in mine], marker="x", linestyle="--", color=line.get_color(),
                 label=f"{mode} p99")
        thr.plot(rates, [r["tokens_per_s"] for r in mine], marker="o", color=line.get_color(), label=mode)
    lat.set(xlabel="offered load (requests/s)", ylabel="latency (s)", yscale="log", title=f"{title}: latency")
    thr.set(xlabel="offered load (requests/s)", ylabel="tokens/s", title=f"{title}: throughput")
    lat.legend(fontsize=7)
    thr.legend(fontsize=7)
    fig.tight_layout()
    write_file_atomically(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png", metadata={"Software": SOFTWARE}),
                          LOAD_OURS["plot"])
    plt.close(fig)

