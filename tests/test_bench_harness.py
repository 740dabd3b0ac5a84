"""The benchmark harness (tfm_export.bench.harness): the interleaving order, the statistics, the rows' JSON and
Markdown, a fake scenario run end to end, and every scenario of `python -m benchmarks` at least importable (the
cheap ones run in their smoke mode), and the layout: no benchmark puts a folder on sys.path, and the package's bench
code imports neither the benchmarks nor the tests. No timing is asserted: only what the harness computes from the
values it is given."""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfm_export.bench import harness
from tfm_export.errors import InputError, OutputError

ROOT = Path(__file__).resolve().parents[1]


def test_two_sides_alternate_which_goes_first():
    assert harness.rotation(["A", "B"], 4) == [["A", "B"], ["B", "A"], ["A", "B"], ["B", "A"]]


def test_more_sides_take_every_place_equally_often():
    order = harness.rotation(["A", "B", "C"], 3)
    assert order == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"]]
    for place in range(3):
        assert sorted(r[place] for r in order) == ["A", "B", "C"]


def test_interleave_warms_up_each_side_then_runs_the_rounds_in_rotation():
    calls: list[str] = []
    values = {"A": iter([100, 1, 2, 3]), "B": iter([200, 10, 20, 30])}  # the first value: the warm-up's

    def side(name: str):
        def run() -> float:
            calls.append(name)
            return next(values[name])
        return run

    progress: list[str] = []
    samples = harness.interleave({"A": side("A"), "B": side("B")}, harness.Plan(rounds=3, warmup=1), progress.append)
    assert calls == ["A", "B", "A", "B", "B", "A", "A", "B"]
    assert samples == {"A": [1, 2, 3], "B": [10, 20, 30]}  # warm-up values dropped, round order kept
    assert len(progress) == 3 and progress[1].startswith("round 2/3: B 20")


def test_a_plan_needs_a_round():
    with pytest.raises(InputError):
        harness.Plan(rounds=0)


def test_medians_quantiles_and_ratios():
    assert harness.median([3, 1, 2]) == 2 and harness.median(iter([1, 2, 3, 4])) == 2.5
    assert math.isnan(harness.median([]))
    values = list(range(1, 11))  # 1..10
    assert harness.quantile(values, 0.5) == 6 and harness.quantile(values, 0.9) == 10
    assert harness.summary([4, 1, 3, 2]) == {"median": 2.5, "p90": 4, "min": 1, "max": 4, "n": 4}
    assert harness.ratio([2, 4, 6], [1, 2, 3]) == 2
    assert math.isnan(harness.ratio([1], []))
    assert harness.paired_ratios([2, 3], [1, 3]) == [2, 1]


def test_best_of_keeps_the_fastest_call(monkeypatch):
    clock = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # calls of 5, 1 and 3 seconds
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))
    assert harness.best_of(lambda: None, 3) == 1.0


def test_timed_call_returns_the_seconds_and_the_result():
    clock = iter([2.0, 2.5])
    assert harness.timed_call(lambda: "text", clock=lambda: next(clock)) == (0.5, "text")


def test_summing_adds_each_calls_seconds_a_raising_one_too():
    clock, spent = iter([0.0, 1.0, 10.0, 13.0, 20.0, 24.0]), []

    def run(x):
        if x is None:
            raise ValueError("bad")
        return 2 * x

    wrapped = harness.summing(run, spent.append, clock=lambda: next(clock))
    assert wrapped(3) == 6 and wrapped(x=4) == 8
    with pytest.raises(ValueError, match="bad"):
        wrapped(None)
    assert spent == [1.0, 3.0, 4.0]
    assert wrapped.__name__ == "run"


def test_machine_info_names_the_cpu_the_load_and_the_libraries():
    info = harness.machine_info(threads=2)
    assert info["cores"] and info["threads"] == 2 and info["cpu"]
    assert info["numpy"] and info["onnxruntime"] and info["torch"]  # read from metadata, not imported
    assert info["load"] is None or len(info["load"]) == 3


def test_markdown_table_shows_missing_values_as_a_dash():
    rows = [{"case": "greedy", "ms": 1.23456}, {"case": "beam 4", "ms": None}]
    table = harness.markdown_table(rows, [harness.Column("case"), harness.Column("ms", "ms/token", "{:.2f}")])
    assert table.splitlines() == ["| case | ms/token |", "|---|---|", "| greedy | 1.23 |", "| beam 4 | - |"]


def test_report_json_replaces_only_its_own_kind(tmp_path):
    report = harness.Report("fake", {"rounds": 2}, [{"case": "x", "ms": 1.0}])
    path = tmp_path / "out.json"
    report.write(path)
    data = json.loads(path.read_text())
    assert data["scenario"] == "fake" and data["rows"] == [{"case": "x", "ms": 1.0}] and "cpu" in data["machine"]
    report.write(path)  # a harness report: replaced
    other = tmp_path / "mine.json"
    other.write_text('{"mine": 1}')
    with pytest.raises(OutputError):
        report.write(other)
    assert other.read_text() == '{"mine": 1}'
    with pytest.raises(OutputError):
        harness.write_text(other, "table")  # a table never replaces a file


def test_run_json_returns_the_last_json_line_and_names_a_failure():
    code = "import json; print('noise'); print(json.dumps({'a': 1})); print(json.dumps({'a': 2}))"
    assert harness.run_json([sys.executable, "-c", code]) == {"a": 2}
    with pytest.raises(InputError, match="failed"):
        harness.run_json([sys.executable, "-c", "import sys; sys.exit(3)"])


def test_a_fake_scenario_end_to_end(tmp_path):
    """A scenario as the benchmarks write one: sides interleaved, rows with the after / before ratio, the
    report and its table written."""
    fake = {"before": iter([9.0, 2.0, 4.0, 6.0]), "after": iter([9.0, 1.0, 2.0, 3.0])}
    samples = harness.interleave({name: (lambda it=it: next(it)) for name, it in fake.items()},
                                 harness.Plan(rounds=3, warmup=1))
    row = {"case": "greedy", "before": harness.median(samples["before"]), "after": harness.median(samples["after"]),
           "ratio": harness.ratio(samples["after"], samples["before"]),
           "paired": harness.median(harness.paired_ratios(samples["after"], samples["before"]))}
    assert row == {"case": "greedy", "before": 4.0, "after": 2.0, "ratio": 0.5, "paired": 0.5}
    report = harness.Report("fake", rows=[row])
    report.write(tmp_path / "r.json")
    columns = [harness.Column(k, fmt="{}" if k == "case" else "{:.2f}") for k in row]
    harness.write_text(tmp_path / "r.md", harness.markdown_table(report.rows, columns))
    assert (tmp_path / "r.md").read_text().splitlines()[-1] == "| greedy | 4.00 | 2.00 | 0.50 | 0.50 |"
    assert "cores" in report.machine_line()


# --- the scenarios of python -m benchmarks ---------------------------------------------------------------

def scenarios():
    from benchmarks.__main__ import SCENARIOS

    return SCENARIOS


def test_the_listing_names_every_scenario():
    out = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for s in scenarios():
        assert f"  {s.name} " in out.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "nope"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "no scenario 'nope'" in bad.stderr


@pytest.mark.parametrize("name", [s.name for s in scenarios()])
def test_every_scenario_resolves_to_its_entry_point(name):
    pytest.importorskip("transformers")
    scenario = next(s for s in scenarios() if s.name == name)
    assert callable(scenario.entry())


# the smoke modes that take half a minute or more (speculative-served: its export) run in `make test-long`, to keep CI's time
SLOW_SMOKE = {"nocache", "decode-core", "speculative-served"}


@pytest.mark.parametrize("name", [pytest.param(s.name, marks=[pytest.mark.long] if s.name in SLOW_SMOKE else [])
                                  for s in scenarios() if s.quick is not None])
def test_the_cheap_scenarios_run_in_their_smoke_mode(name):
    scenario = next(s for s in scenarios() if s.name == name)
    out = subprocess.run([sys.executable, "-m", "benchmarks", name, *scenario.quick], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip()


# --- the layout: data flows down, from benchmarks/ into the package, never back ------------------------------

def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


SYS_PATH = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*(\+?=|\[)")  # a folder put on it
UPWARD = {"benchmarks", "tests", "conftest"}  # and the tests' flat fixture modules, *_fixtures


def upward(path: Path) -> set[str]:
    return {name for name in imported_modules(path) if name.split(".")[0] in UPWARD or name.endswith("_fixtures")}


def test_no_benchmark_puts_a_folder_on_sys_path():
    """Test fixtures reach the benchmarks through tfm_export/bench/fixtures.py, which loads them by path."""
    found = [str(p.relative_to(ROOT)) for p in python_files(ROOT / "benchmarks") if SYS_PATH.search(p.read_text())]
    assert found == []


MOST_FILES = 15  # issue #59: scenarios in a few modules; what they share is the package's (tfm_export/bench)


def test_benchmarks_holds_at_most_15_files():
    files = sorted(p.relative_to(ROOT / "benchmarks").as_posix() for p in (ROOT / "benchmarks").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert len(files) <= MOST_FILES, f"{len(files)} files under benchmarks/: {files}"


def test_the_package_bench_imports_neither_the_benchmarks_nor_the_tests():
    found = {f"{p.relative_to(ROOT)}: {sorted(upward(p))}" for p in python_files(ROOT / "tfm_export" / "bench")
             if upward(p)}
    assert found == set()


def test_the_checks_find_a_sys_path_insert_and_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import sys\nfrom benchmarks import fixtures\nimport hf_fixtures\nsys.path.insert(0, 'x')\n")
    assert upward(module) == {"benchmarks", "hf_fixtures"} and SYS_PATH.search(module.read_text())
    module.write_text("import sys\nprint(sys.path)  # reading it is fine\n")
    assert upward(module) == set() and not SYS_PATH.search(module.read_text())


def test_prepared_stages_in_a_folder_of_its_own(tmp_path):
    """harness.prepared: made once, renamed into place; a failure removes only its own staging folder, and a
    folder named like a staging one that someone else left (`<out>.partial`) is never touched."""
    from tfm_export.bench.harness import prepared

    foreign = tmp_path / "out.partial"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("the user's")

    def fails(stage):
        stage.mkdir()
        (stage / "half").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        prepared(tmp_path / "out", fails)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.partial"]
    assert (foreign / "keep.txt").read_text() == "the user's"
    assert prepared(tmp_path / "out", lambda stage: stage.mkdir()) is not None
    assert (tmp_path / "out").is_dir() and prepared(tmp_path / "out", fails) is None  # reused, not remade
