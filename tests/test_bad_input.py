"""Bad input of every kind: one error line, no traceback, nothing left behind, no user file touched.

Each case runs in its own tmp_path holding a user's project (a checkpoint, a notes file, a copy of
the tiny export); the sha256 of every file there (and of the shared export) must be the same after
the failed command, and no `.partial-*`, `*.tmp` or new folder may remain.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import run_cli, run_cli_ok
from tfm_export.cli.progress import StageDisplay
from tfm_export.manifest import load_manifest, write_manifest
from tfm_export.text.tokenizer import SPECIALS, CharTokenizer

ROOT = Path(__file__).resolve().parents[1]


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file (sha256) and folder under `roots`, hidden ones included."""
    seen = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            seen[str(path)] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


@pytest.fixture
def project(tmp_path, tiny_checkpoint, tiny_export, monkeypatch):
    """A user's folder: proj/model.pt, proj/notes.txt, other/a.txt, export/ (a copy), a binary file."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(tiny_checkpoint, proj / "model.pt")
    (proj / "notes.txt").write_text("my notes\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("keep me\n")
    shutil.copytree(tiny_export, tmp_path / "export")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def assert_clean_failure(result, before: dict[str, str], roots: tuple[Path, ...], fragment: str) -> None:
    assert result.exit_code not in (0, None), result.output
    assert "Traceback" not in result.output, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not an unhandled exception
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert fragment in errors[0], errors[0]
    assert snapshot(*roots) == before


# (arguments, fragment of the one error line); "{p}" is the project folder, "{e}" the shared export.
CASES = {
    # Output folders: never lose a user's file, refuse before any work.
    "out holds the input": (["{p}/proj/model.pt", "-o", "{p}/proj", "--force"], "holds the input"),
    "out is the input": (["{p}/proj/model.pt", "-o", "{p}/proj/model.pt", "--force"], "is a file"),
    "out has user files": (["{p}/proj/model.pt", "-o", "{p}/other", "--force"], "not a tfm-export export (a.txt)"),
    "out has user files, no force": (["{p}/proj/model.pt", "-o", "{p}/other"], "not a tfm-export export"),
    "demo into user files": (["demo", "--model", "{p}/proj/model.pt", "--out", "{p}/other"],
                             "not a tfm-export export (a.txt); choose another --out folder"),  # demo has no -o
    "demo held-out without pairs": (["demo", "--model", "{p}/proj/model.pt", "--heldout", "{p}/proj/notes.txt",
                                     "--out", "{p}/d2"], "notes.txt has no source<TAB>expected lines"),
    "demo binary held-out": (["demo", "--model", "{p}/proj/model.pt", "--heldout", "{p}/binary.txt",
                              "--out", "{p}/d2"], "binary.txt is not UTF-8 text"),
    "demo into the input": (["demo", "--model", "{p}/proj/model.pt", "--out", "{p}/proj"], "holds the input"),
    "export without force": (["{p}/proj/model.pt", "-o", "{p}/export"], "already exists"),
    "an export as the model": (["{e}", "-o", "{p}/again"], "is an export already"),
    "out is cwd": (["{p}/proj/model.pt", "-o", ".", "--force"], "the current directory"),
    "out is home": (["{p}/proj/model.pt", "-o", "{p}/home", "--force"], "your home directory"),
    "out is root": (["{p}/proj/model.pt", "-o", "/", "--force"], "the root folder"),
    "out is a mount point": (["{p}/proj/model.pt", "-o", "/proc", "--force"], "a mount point"),
    "out under /proc": (["{p}/proj/model.pt", "-o", "/proc/x"], "/proc is not writable"),
    "out parent is a file": (["{p}/proj/model.pt", "-o", "{p}/proj/notes.txt/out"], "notes.txt is not a folder"),
    "opset too new": (["{p}/proj/model.pt", "-o", "{p}/new", "--opset", "99"], "17<=x<=25"),
    "opset too old": (["{p}/proj/model.pt", "-o", "{p}/new", "--opset", "16"], "17<=x<=25"),
    "negative atol": (["{p}/proj/model.pt", "-o", "{p}/new", "--atol", "-1"], "x>0"),
    # Checkpoints.
    "missing checkpoint": (["{p}/nothing.pt"], "checkpoint not found"),
    "empty checkpoint": (["{p}/empty.pt"], "is empty"),
    "truncated checkpoint": (["{p}/truncated.pt"], "truncated or corrupt"),
    "random checkpoint": (["{p}/binary.txt"], "not a PyTorch checkpoint"),
    "code pickle": (["{p}/module.pt"], "needs code to load"),
    "a file of a Hugging Face folder": (["{p}/hfmodel/config.json", "-o", "{p}/new"],
                                        "is a file of the Hugging Face folder {p}/hfmodel; pass the folder"),
    "options the checkpoint contradicts": (["{p}/proj/model.pt", "-o", "{p}/new", "--bos-id", "999"],
                                           "--bos-id 999 does not apply: this tfm-export checkpoint's config sets"),
    "misspelled command": (["genrate", "{e}", "--ids", "5"], "no such command 'genrate'; did you mean 'generate'?"),
    # init.
    "init existing": (["init", "{p}/proj/model.pt"], "exists"),
    "init under /proc": (["init", "/proc/x/z.pt"], "/proc is not writable"),
    "init parent is a file": (["init", "{p}/proj/notes.txt/z.pt"], "notes.txt is not a folder"),
    # generate.
    "huge id": (["generate", "{e}", "--ids", "3 99999999999999999999999"], "out of range"),
    "id out of range": (["generate", "{e}", "--ids", "5 999"], "out of range"),
    "negative id": (["generate", "{e}", "--ids", "5 -1"], "out of range"),
    "over-long input": (["generate", "{e}", "--ids", " ".join(["5"] * 200)], "exceeds the model's max_len"),
    "empty ids": (["generate", "{e}", "--ids", ""], "source 1 is empty"),
    "blank ids": (["generate", "{e}", "--ids", "5", "--ids", " "], "source 2 is empty"),
    "binary input file": (["generate", "{e}", "--input", "{p}/binary.txt"], "not UTF-8 text"),
    "too many threads": (["generate", "{e}", "--ids", "5", "--threads", "100000"], "between 1 and"),
    "zero threads": (["generate", "{e}", "--ids", "5", "--threads", "0"], "between 1 and"),
    "max new tokens 0": (["generate", "{e}", "--ids", "5", "--max-new-tokens", "0"], "x>=1"),
    "sampling flags without sampling": (["generate", "{e}", "--ids", "5", "--top-k", "5", "--greedy"],
                                        "--top-k only applies to sampling; add --sample"),
    "max new tokens too many": (["generate", "{e}", "--ids", "5", "--max-new-tokens", "1000"], "does not fit"),
    "batch size 0": (["generate", "{e}", "--ids", "5", "--batch-size", "0"], "x>=1"),
    "cuda without a GPU": (["generate", "{e}", "--ids", "5", "--device", "cuda:7"], "CUDA requested"),
    "bad device": (["generate", "{e}", "--ids", "5", "--device", "tpu"], "unknown device"),
    "tampered graph": (["generate", "{p}/tampered", "--ids", "5"], "does not match the sha256"),
    "manifest not JSON": (["generate", "{p}/notjson", "--ids", "5"], "not valid JSON"),
    "manifest random bytes": (["generate", "{p}/randombytes", "--ids", "5"], "not valid JSON"),
    "missing export": (["generate", "{p}/nothing", "--ids", "5"], "export folder not found"),
    "a checkpoint for an export": (["generate", "{p}/truncated.pt", "--ids", "5"], "is a model, not an export"),
    "a model folder for an export": (["serve", "{p}/hfmodel"], "export it first"),
    "a manifest for its export": (["generate", "{e}/manifest.json", "--ids", "5"], "manifest; pass its folder, {e}"),
    "transcribe a text export": (["transcribe", "{e}", "{p}/binary.txt"], "decode text with `tfm-export generate`"),
    "run a seq2seq export": (["run", "{e}", "--ids", "5"], "decode with `tfm-export generate`"),
    "stream and json": (["generate", "{e}", "--ids", "5", "--stream", "--json"], "--stream prints text"),
    "json and srt": (["transcribe", "{e}", "{p}/binary.txt", "--json", "--format", "srt"],
                     "--json is --format json; pick it or --format srt"),
    # bench, serve-web.
    "bench repeat 0": (["bench", "{e}", "--repeat", "0"], "x>=1"),
    "bench threads -1": (["bench", "{e}", "--threads", "-1"], "between 1 and"),
    "bench batch 0": (["bench", "{e}", "--batch", "0"], "at least 1"),
    "bench src-len 0": (["bench", "{e}", "--src-len", "0"], "x>=1"),
    "serve-web port 70000": (["serve-web", "{e}", "--port", "70000"], "0<=x<=65535"),
    "serve-web port -1": (["serve-web", "{e}", "--port", "-1"], "0<=x<=65535"),
}


def _broken_files(root: Path, tiny_export: Path) -> None:
    (root / "empty.pt").write_bytes(b"")
    data = (root / "proj" / "model.pt").read_bytes()
    (root / "truncated.pt").write_bytes(data[: len(data) // 2])
    torch.save(torch.nn.Linear(2, 2), root / "module.pt")
    (root / "hfmodel").mkdir()
    (root / "hfmodel" / "config.json").write_text("{}")
    for name in ("tampered", "notjson", "randombytes"):
        shutil.copytree(tiny_export, root / name)
    with open(root / "tampered" / "decoder.onnx", "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02\x03")
    (root / "notjson" / "manifest.json").write_text("{not json")
    (root / "randombytes" / "manifest.json").write_bytes(bytes(range(128, 256)))


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_cleanly(case, project, tiny_export):
    if case == "out is a mount point" and not os.path.ismount("/proc"):
        pytest.skip("/proc is not a mount point here")
    _broken_files(project, tiny_export)
    args, fragment = CASES[case]
    args = [a.replace("{p}", str(project)).replace("{e}", str(tiny_export)) for a in args]
    roots = (project, tiny_export)
    before = snapshot(*roots)
    fragment = fragment.replace("{p}", str(project)).replace("{e}", str(tiny_export))
    assert_clean_failure(run_cli(*args), before, roots, fragment)


def test_demo_checks_its_model_before_naming_the_output(project):
    """A missing --model is the one line: no "1. export ... -> demo_out/..." first, no demo_out/."""
    before = snapshot(project)
    result = run_cli("demo", "--model", "nofile.pt")
    assert_clean_failure(result, before, (project,), "checkpoint not found: nofile.pt")
    assert result.output.strip().splitlines() == ["Error: checkpoint not found: nofile.pt; check the path"]


def test_usage_errors_are_one_line_naming_the_help(tiny_export):
    """Click's usage errors (a bad value, an unknown option, a missing argument) are one line, as every other
    error, with where the command's help is; exit code 2."""
    for args, message in ((["generate", tiny_export, "--bogus"], "Error: No such option '--bogus'."),
                          (["generate"], "Error: Missing argument 'FOLDER'."),
                          (["generate", tiny_export], "Error: give exactly one of --text")):
        result = run_cli(*args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert result.output.startswith(message) and "(see `" in result.output and "generate --help`)" in result.output


def test_a_line_the_tokenizer_cannot_encode_is_named_by_its_file_and_line(chars_export, tmp_path):
    """generate --input encodes every line before decoding any: a bad one is named by the file's own line number
    (blank lines count); a byte order mark (Windows editors write one) is not part of the first line."""
    path = tmp_path / "mixed.txt"
    path.write_bytes("\ufeff12\n\nabc\n34\n".encode())
    result = run_cli("generate", chars_export, "--input", path, "--max-new-tokens", 3)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip() == f"Error: {path} line 3: cannot encode 'abc' in 'abc': the model knows only " \
                                    "the characters ' 0123456789'"
    path.write_bytes(b"\n \n")  # no line with text: said so, exit 0 (a pipeline with nothing to translate)
    result = run_cli_ok("generate", chars_export, "--input", path)
    assert result.output == f"{path} has no sources (no line with text): nothing to decode\n"
    path.write_bytes("\ufeff12\n\n34\n".encode())
    result = run_cli_ok("generate", chars_export, "--input", path, "--max-new-tokens", 3)
    assert [line.split("\t")[0] for line in result.output.splitlines() if "\t" in line] == ["12", "34"]


def test_a_file_named_like_a_command_still_exports(project):
    (project / "genrate").write_bytes(b"not a checkpoint")
    before = snapshot(project)
    assert_clean_failure(run_cli("genrate"), before, (project,), "not a PyTorch checkpoint")


def test_read_only_output_is_refused_before_work(project, monkeypatch):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.name.startswith(".tfm-export-probe") or ".partial-" in self.name:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    before = snapshot(project)
    result = run_cli(project / "proj" / "model.pt", "-o", project / "new" / "out")
    assert_clean_failure(result, before, (project,), "is not writable (Read-only file system)")
    assert "layout" not in result.output  # refused before the checkpoint was even loaded


def _full_disk_after_writing(partial: Path) -> None:
    partial.write_bytes(b"half a graph")
    raise OSError(errno.ENOSPC, "No space left on device", str(partial))


def test_full_disk_during_export_leaves_nothing(project, monkeypatch):
    import tfm_export.export.exporter as exporter

    monkeypatch.setattr(exporter, "export_graph",
                        lambda model, spec, folder, opset, external: _full_disk_after_writing(folder / spec.file))
    before = snapshot(project)
    result = run_cli(project / "proj" / "model.pt", "-o", project / "new" / "deeper" / "out")
    assert_clean_failure(result, before, (project,), "no space left on device while writing")
    assert not (project / "new").exists()  # the parents it created are gone too


def test_full_disk_during_init_leaves_nothing(project, monkeypatch):
    import tfm_export.model.checkpoint as checkpoint

    def save(payload, path):  # what torch.save does when the disk fills: a partial file, then an error
        _full_disk_after_writing(Path(path))

    monkeypatch.setattr(checkpoint.torch, "save", save)
    before = snapshot(project)
    result = run_cli("init", project / "proj" / "new.pt")
    assert_clean_failure(result, before, (project,), "no space left on device while writing")


def test_init_creates_parents(project):
    run_cli_ok("init", project / "a" / "b" / "z.pt")
    assert [p.name for p in (project / "a" / "b").iterdir()] == ["z.pt"]


def test_force_replaces_a_previous_export_only(project, tiny_export):
    out = project / "export"
    (out / "extra.txt").write_text("mine\n")
    before = snapshot(project)
    assert_clean_failure(run_cli(project / "proj" / "model.pt", "-o", out, "--force"), before, (project,),
                         "not a tfm-export export (extra.txt)")


def test_empty_folder_is_used(project):
    (project / "empty").mkdir()
    result = run_cli_ok(project / "proj" / "model.pt", "-o", project / "empty", "--no-validate")
    load_manifest(project / "empty")
    assert "  export encoder ..." in result.output  # the stage is named when it starts (not a TTY)
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".")) == []


def _tokenizer_export(tiny_export: Path, folder: Path) -> Path:
    shutil.copytree(tiny_export, folder)
    tokenizer = CharTokenizer([*SPECIALS, *"0123456789"], [*SPECIALS, *"abcdefghij"]).to_dict()
    write_manifest(folder, load_manifest(folder).replace(tokenizer=tokenizer))
    return folder


def test_ids_follow_the_tokenizers_eos_convention(tiny_export, tmp_path):
    folder = _tokenizer_export(tiny_export, tmp_path / "chars")
    encoded = CharTokenizer.from_dict(load_manifest(folder).tokenizer).encode("4718")
    assert encoded[-1] == 2  # the chars tokenizer ends sources with EOS
    outputs = [json.loads(run_cli("generate", folder, *args, "--json", "--device", "cpu").output)["ids"]
               for args in (["--text", "4718"], ["--ids", " ".join(map(str, encoded[:-1]))],
                            ["--ids", " ".join(map(str, encoded))])]
    assert outputs[0] == outputs[1] == outputs[2]
    before = snapshot(folder)
    assert_clean_failure(run_cli("generate", folder, "--text", ""), before, (folder,), "source 1 is empty")


def test_stage_display_on_a_terminal():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with StageDisplay(stream) as show:
        show("export encoder", None)
        time.sleep(0.25)
        show("export encoder", 1.5)
        show("validate", None)  # a failing stage: the spinner stops when the display closes
    text = stream.getvalue()
    assert "\r  export encoder" in text and text.count("  export encoder      1.5 s\n") == 1
    assert text.endswith("\r\033[K")


def test_sigterm_during_export_removes_the_partial_folder(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tfm_export", str(tiny_checkpoint), "-o", str(out)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.partial-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(1.0)  # inside the export now
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode != 0, output
    assert "Traceback" not in output
    assert list(tmp_path.iterdir()) == [], output
