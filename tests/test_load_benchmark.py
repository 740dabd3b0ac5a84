"""`python -m benchmarks load` against real servers: the modes take turns (A, B / B, A: the harness's
rotation), every request is answered, and the
paired ratios are reported. The plumbing only; the figures live in BENCHMARKS.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")  # the benchmark's client (the test extra)
ROOT = Path(__file__).resolve().parents[1]


def test_load_benchmark_takes_turns_answers_every_request_and_pairs_the_ratios(static_export, tmp_path):
    report = tmp_path / "load.json"
    cmd = [sys.executable, "-m", "benchmarks", "load", str(static_export), "--modes", "request,inflight", "--rates", "30",
           "--duration", "1", "--new-tokens", "2:6", "--repeat", "2", "--max-batch", "4", "--json", str(report)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(report.read_text())
    assert [(r["mode"], r["repeat"]) for r in rows] == [("request", 0), ("inflight", 0), ("inflight", 1), ("request", 1)]
    for row in rows:
        assert row["sent"] > 0 and row["done"] == row["sent"] and row["failed"] == 0 and row["tokens_per_s"] > 0
    assert "in-flight / request at 30/s:" in result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["load.json"]  # no temporary files left


def test_engine_benchmark_runs_both_engines_on_one_workload(static_export):
    """`python -m benchmarks engine`: both engines answer every job of the same workload with the same tokens
    (greedy rows equal serial decoding in either engine), and the paired ratio is printed."""
    cmd = [sys.executable, "-m", "benchmarks", "engine", str(static_export), "--jobs", "24", "--max-batch", "4",
           "--new-tokens", "2:9", "--repeat", "1"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in rows] == ["request", "inflight"] and all(r["jobs"] == 24 for r in rows)
    assert rows[0]["tokens"] == rows[1]["tokens"] > 0
    assert "in-flight / request: " in result.stdout


def test_plot_without_matplotlib_is_refused_before_the_run(static_export, tmp_path):
    hide = ("import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = ['benchmarks', *sys.argv[1:]]; "
            "runpy.run_module('benchmarks', run_name='__main__')")
    cmd = [sys.executable, "-c", hide, "load", str(static_export), "--rates", "30", "--duration", "60",
           "--plot", str(tmp_path / "load.png")]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout == ""  # no server started, no row measured
    assert result.stderr.strip() == "--plot needs matplotlib: pip install -c constraints.txt '.[plot]'"
    assert list(tmp_path.iterdir()) == []
