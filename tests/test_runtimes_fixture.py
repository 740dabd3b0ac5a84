"""runtimes/fixtures/expected.json is what the torch-free Python runtime produces on the bundled model.

The Node and browser runtimes (tests/test_runtimes.py, runtimes/run-tests.sh) compare themselves with
this committed file, so it must be current: regenerate it with
`.venv/bin/python runtimes/make_fixture.py --update`.
"""

import copy
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_make_fixture():
    """runtimes/ is not a package: load the script by path."""
    spec = importlib.util.spec_from_file_location("make_fixture", ROOT / "runtimes" / "make_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_fixture = load_make_fixture()


def test_committed_fixture_matches_the_python_runtime(bundled_export):
    assert make_fixture.same(make_fixture.build(bundled_export), make_fixture.load()), (
        "runtimes/fixtures/expected.json is stale: run `.venv/bin/python runtimes/make_fixture.py --update`")


def test_the_check_tolerates_float32_rounding_but_not_a_changed_score_or_token():
    fixture = make_fixture.load()
    hypothesis = fixture["searches"][3]["hypotheses"][0][0]  # a sampled score near -93
    rounded, changed = copy.deepcopy(fixture), copy.deepcopy(fixture)
    rounded["searches"][3]["hypotheses"][0][0]["score"] += 6e-6  # another CPU's rounding (make_fixture.py)
    changed["searches"][3]["hypotheses"][0][0]["score"] += 1e-3 * abs(hypothesis["score"])
    assert make_fixture.same(rounded, fixture) and not make_fixture.same(changed, fixture)
    changed = copy.deepcopy(fixture)
    changed["cases"][0]["ids"][0] += 1
    assert not make_fixture.same(changed, fixture)


def test_fixture_covers_padding_and_truncation():
    fixture = make_fixture.load()
    lengths = {len(case["source_ids"]) for case in fixture["cases"]}
    assert len(lengths) > 1, "the batch should need padding"
    short = fixture["truncated"]
    assert all(len(ids) == short["max_new_tokens"] for ids in short["ids"])
    full = {case["input"]: case["ids"] for case in fixture["cases"]}
    assert [full[text][: short["max_new_tokens"]] for text in short["inputs"]] == short["ids"]


def test_make_fixture_check_mode(bundled_export, capsys):
    assert make_fixture.main(["--export-dir", str(bundled_export)]) == 0
    assert "up to date" in capsys.readouterr().out


def readme_sketch() -> str:
    """The numpy + onnxruntime block of runtimes/README.md (the one after the marker comment)."""
    text = (ROOT / "runtimes" / "README.md").read_text(encoding="utf-8")
    after = text.split("<!-- tests/test_runtimes_fixture.py runs the next block -->", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_sketch_without_tfm_export_matches_the_fixture(bundled_export):
    namespace: dict = {}
    exec(compile(readme_sketch(), "runtimes/README.md", "exec"), namespace)  # noqa: S102 (our own README)
    assert "tfm_export" not in readme_sketch() and "torch" not in readme_sketch()
    fixture = make_fixture.load()
    translate = namespace["translate"]
    assert translate(bundled_export, [c["input"] for c in fixture["cases"]]) == [c["text"] for c in fixture["cases"]]
    short = fixture["truncated"]
    assert translate(bundled_export, short["inputs"], short["max_new_tokens"]) == short["texts"]
