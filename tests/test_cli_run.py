"""`generate` and `bench` through Click."""

import json
import shutil
import sys

import pytest

from helpers import run_cli, run_cli_ok
from tfm_export.runtime import open_export


def test_generate_ids_json(tiny_export):
    result = run_cli_ok("generate", tiny_export, "--ids", "5 9 13", "--ids", "40", "--json", "--device", "cpu",
                        "--max-new-tokens", "7")
    records = [json.loads(line) for line in result.output.splitlines()]
    expected = open_export(tiny_export, device="cpu").generate_ids([[5, 9, 13], [40]], 7)
    assert [r["ids"] for r in records] == expected and records[0]["source"] == [5, 9, 13]
    assert "text" not in records[0]


@pytest.mark.parametrize("from_stdin", [False, True])
def test_generate_input_file_in_batches(tiny_export, tmp_path, from_stdin):
    sources = [[5 + i, 9, 13 + i] for i in range(7)]
    lines = "\n".join(" ".join(map(str, s)) for s in sources) + "\n"
    path = tmp_path / "in.txt"
    path.write_text(lines)
    result = run_cli_ok("generate", tiny_export, "--input", "-" if from_stdin else path, "--input-format", "ids",
                        "--batch-size", "3", "--json", "--device", "cpu", "--max-new-tokens", "5",
                        input=lines if from_stdin else None)
    records = [json.loads(ln) for ln in result.output.splitlines() if ln.startswith("{")]
    assert [r["ids"] for r in records] == open_export(tiny_export, device="cpu").generate_ids(sources, 5)


@pytest.mark.parametrize("args, fragment", [
    (["--ids", "5 999"], "out of range"),
    (["--ids", "5 x"], "must be integers"),
    (["--text", "hi"], "no tokenizer"),
    ([], "exactly one of --text, --ids, --input (- for standard input) or --features"),
    (["--ids", "5", "--device", "cuda:7"], "CUDA requested"),
])
def test_generate_errors(tiny_export, args, fragment):
    result = run_cli("generate", tiny_export, *args)
    assert result.exit_code != 0 and fragment in result.output and "Traceback" not in result.output


def test_generate_refuses_standard_input_that_is_not_text(tiny_export):
    result = run_cli("generate", tiny_export, "--input", "-", input=b"\xff\xfe\n")
    assert result.exit_code == 1 and "standard input is not UTF-8 text" in result.output


def test_a_reader_that_leaves_stops_the_command_quietly(tiny_export, tmp_path):
    """`tfm-export generate OUT --input big.txt | head -1`: the reader closes the pipe; the command stops with a
    shell's status for SIGPIPE (141) and no 'Error: Broken pipe' line (it printed one before)."""
    import subprocess
    import sys

    (tmp_path / "many.txt").write_text("5 9 13\n" * 2000)
    command = [sys.executable, "-m", "tfm_export", "generate", str(tiny_export), "--input", str(tmp_path / "many.txt"),
               "--input-format", "ids", "--max-new-tokens", "3", "--batch-size", "4"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip(), proc.stderr.read()
    proc.stdout.close()  # as `head -1` does
    assert proc.wait(timeout=300) == 141
    assert "Error" not in proc.stderr.read()


def test_generate_missing_folder(tmp_path):
    result = run_cli("generate", tmp_path / "nothing", "--ids", "5")
    assert result.exit_code == 1 and "export folder not found" in result.output


def test_bench_json_rows(tiny_checkpoint, tiny_export, tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli_ok("bench", tiny_export, "--model", tiny_checkpoint, "--batch", "1,2", "--src-len", "5",
                        "--new-tokens", "4", "--repeat", "2", "--threads", "1", "--json", out)
    report = json.loads(out.read_text())
    rows = [r for r in report["rows"] if r["backend"] in ("eager", "ort")]  # peers join when installed
    assert {(r["backend"], r["batch"]) for r in rows} == {("eager", 1), ("ort", 1), ("eager", 2), ("ort", 2)}
    for row in rows:
        for key in ("encoder_ms", "first_step_ms", "per_token_ms_p50", "per_token_ms_p90", "tokens_per_s"):
            assert row[key] > 0
        assert row["per_token_ms_p90"] >= row["per_token_ms_p50"]
    ort_row = next(r for r in rows if r["backend"] == "ort" and r["batch"] == 1)
    eager_row = next(r for r in rows if r["backend"] == "eager" and r["batch"] == 1)
    assert ort_row["speedup_vs_eager"] == pytest.approx(
        eager_row["per_token_ms_p50"] / ort_row["per_token_ms_p50"], rel=1e-2)
    assert report["machine"]["threads"] == 1 and "speedup_vs_eager" in result.output
    assert "cpu b1: repeat 1/2" in result.output and "cpu b2: repeat 2/2" in result.output  # live progress


def test_bench_export_folder_alone_gives_ort_rows(tiny_export):
    result = run_cli_ok("bench", tiny_export, "--batch", "1", "--new-tokens", "3", "--repeat", "1")
    assert "ORT rows only" in result.output and " eager " not in result.output


def test_bench_also_adds_a_row_per_peer_export(tiny_checkpoint, tiny_export, tmp_path):
    peer = tmp_path / "opt"
    assert run_cli(tiny_checkpoint, "-o", peer, "--optimize", "--no-validate").exit_code == 0
    out = tmp_path / "bench.json"
    run_cli_ok("bench", tiny_export, "--also", peer, "--batch", "1", "--src-len", "5", "--new-tokens", "3",
               "--repeat", "1", "--json", out)
    backends = [r["backend"] for r in json.loads(out.read_text())["rows"]]
    assert backends == ["ort", "ort:opt"]


def test_bench_refuses_a_peer_of_another_model(tiny_export, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_export, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["config"]["tgt_vocab_size"] += 1
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("bench", tiny_export, "--also", other, "--batch", "1", "--repeat", "1")
    assert result.exit_code == 1 and "holds a different model" in result.output
    assert "Traceback" not in result.output


def test_bench_model_may_be_a_hugging_face_folder(trained_export):
    """The eager rows of an imported folder's export: --model takes the folder itself."""
    import hf_fixtures

    result = run_cli_ok("bench", trained_export("marian"), "--model", hf_fixtures.trained_folder("marian"),
                        "--batch", "1", "--src-len", "4", "--new-tokens", "3", "--repeat", "1")
    assert " eager " in result.output and " ort " in result.output


@pytest.mark.parametrize("flag, name, message", [
    ("--json", "notes.json", "notes.json exists and is not a tfm-export bench report"),
    ("--plot", "chart.png", "--plot needs matplotlib: pip install 'tfm-export[plot]'")])
def test_bench_refuses_its_outputs_before_measuring(tiny_export, tmp_path, monkeypatch, flag, name, message):
    """A --json file the tool did not write, or --plot without matplotlib: one line before the run."""
    import tfm_export.bench.bench as bench

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails, installed or not
    monkeypatch.setattr(bench, "run_benchmark", lambda *a, **k: pytest.fail("measured before refusing"))
    (tmp_path / "notes.json").write_text('{"my": "data"}')
    result = run_cli("bench", tiny_export, flag, tmp_path / name, "--batch", "1", "--repeat", "1")
    assert result.exit_code == 1 and message in result.output, result.output
    assert result.output.count("\n") == 1 and "measuring" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]
    assert (tmp_path / "notes.json").read_text() == '{"my": "data"}'


def test_bench_table_shows_no_encoder_time_for_a_backend_without_one(tiny_export, monkeypatch):
    """CTranslate2 times its encoder inside the first step: its encoder_ms is `-` (JSON null), not 0.00."""
    from tfm_export.bench import bench
    from tfm_export.bench.report import format_table

    class Joined:  # a CT2Runner stand-in (ctranslate2 need not be installed): ORT with the encoder unseparated
        separate_encoder = False

        def __init__(self):
            self.ort = open_export(tiny_export, device="cpu")
            self.config = self.ort.config

        def generate_ids(self, sources, max_new_tokens=None, stop_at_eos=True, timings=None, config=None):
            ids = self.ort.generate_ids(sources, max_new_tokens, stop_at_eos, timings, config)
            if timings is not None:
                timings.encoder_s = 0.0  # what CT2Runner records
            return ids

    monkeypatch.setitem(bench.BACKENDS, "ctranslate2", lambda ctx, device: Joined())
    settings = bench.BenchSettings(batches=(1,), src_len=4, new_tokens=3, repeat=1, warmup=0, threads=1)
    report = bench.run_benchmark(None, tiny_export, settings)
    rows = {r["backend"]: r for r in report["rows"]}
    assert rows["ctranslate2"]["encoder_ms"] is None and rows["ort"]["encoder_ms"] > 0
    table = {line.split()[0]: line.split() for line in format_table(report).splitlines()}
    assert table["ctranslate2"][3] == "-" and table["ort"][3] != "-"
