"""What the user reads stays true: the docs' links lead somewhere, each command's --help fits that command,
and the device log says what happened."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfm_export.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), the target without a title; code spans are removed first
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown page outside fenced code blocks (a `# comment` in one is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and markup dropped) lowercased, every character but
    letters, digits, spaces, - and _ removed, each space a -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of `page`, a repeated heading's as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_anchor(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """The targets of `page`'s links that are neither web addresses nor mail."""
    prose = "\n".join(CODE_SPAN.sub("", line) for line in prose_lines(page.read_text(encoding="utf-8")))
    # a link's text may wrap onto the next line
    return [target for target in LINK.findall(prose)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)]  # not http:, https:, mailto:, ...


def test_anchor_rule_matches_github():
    assert github_anchor("manifest.json (format `tfm-export-manifest/1`)") == "manifestjson-format-tfm-export-manifest1"
    assert github_anchor("4-bit weights (`--quantize int4`)") == "4-bit-weights---quantize-int4"
    assert github_anchor("Node.js") == "nodejs"


def test_the_pages_have_links():
    assert sum(len(relative_links(page)) for page in PAGES) >= 10
    assert sum("#" in target for page in PAGES for target in relative_links(page)) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    """Every relative link of README.md and docs/*.md names a file (or folder) of the checkout, and every
    #anchor a heading of the page it leads to."""
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
        elif anchor and linked.suffix != ".md" and not re.fullmatch(r"L\d+(-L\d+)?", anchor):
            broken.append(f"{target}: #{anchor} in a file that is not Markdown")
    assert not broken, "\n".join(broken)


def test_benchmarks_md_is_a_report_with_its_summary_first():
    """#59: BENCHMARKS.md reports what holds today (about 450 lines at most), its summary table before any
    section; dated run logs live in git history."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(text.splitlines()) <= 450 and headings[0] == "## Summary", (len(text.splitlines()), headings[:1])
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert summary.count("\n| ") >= 10  # a table: one row per area


def option_help(command: str, option: str) -> str:
    """The --help text of `option` in `tfm-export COMMAND --help`, its lines joined (empty: no such option)."""
    result = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(option + " ") or line.strip() == option:
            text = [line.strip()[len(option):]]
            for more in lines[i + 1:]:  # continuation lines: indented further, no option of their own
                if not more.startswith(" " * 8) or more.strip().startswith("-"):
                    break
                text.append(more.strip())
            return " ".join(" ".join(text).split())
    return ""


@pytest.mark.parametrize("command", ["generate", "transcribe", "serve"])
def test_threads_help_names_only_onnx_runtime(command):
    text = option_help(command, "--threads")
    assert "ONNX Runtime" in text
    assert "PyTorch" not in text and "bench" not in text, text


def test_bench_threads_help_names_what_bench_measures():
    from tfm_export.bench import bench

    text = option_help("bench", "--threads")
    # bench.run_benchmark sets PyTorch's threads with --threads: its help says so
    assert "torch.set_num_threads" in Path(bench.__file__).read_text(encoding="utf-8")
    assert "ONNX Runtime" in text and "PyTorch" in text, text


def test_validate_frontend_help_records_nothing():
    for option in ("--frontend", "--fbank"):
        assert "recorded in the manifest" not in option_help("validate", option)
        assert option_help("validate", option)
    assert "recorded in the manifest" in option_help("export", "--frontend")


def test_auto_device_log_gives_no_cuda_advice(tiny_export, caplog, monkeypatch):
    """device auto on a machine where ONNX Runtime can use no GPU: CPU, logged without the advice meant for an
    explicit --device cuda (no CUDA was requested)."""
    from tfm_export.errors import DeviceError
    from tfm_export.runtime import device as device_module
    from tfm_export.runtime import open_export

    # As on a machine without onnxruntime-gpu (or without a GPU), whatever this one has.
    monkeypatch.setattr(device_module.ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with caplog.at_level(logging.INFO, logger=device_module.__name__):
        assert open_export(tiny_export, device="auto").device.name == "cpu"
    messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("device auto")]
    assert messages == ["device auto: using CPU (no GPU ONNX Runtime can use: this onnxruntime has no CUDA "
                        "provider)"], messages
    # an explicit request keeps its advice
    with pytest.raises(DeviceError, match=r"^CUDA requested but .*use --device cpu$"):
        open_export(tiny_export, device="cuda")


def test_auto_device_log_when_the_gpu_cannot_be_used(caplog, monkeypatch):
    """The CUDA provider is there but no GPU works: the reason, without the --device cpu advice."""
    from tfm_export.errors import DeviceError
    from tfm_export.runtime import device as device_module

    class CpuOnlySession:
        def __init__(self, path, options, providers):
            self.path = path

        def get_providers(self):
            return ["CPUExecutionProvider"]

    monkeypatch.setattr(device_module.ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(device_module.ort, "InferenceSession", CpuOnlySession)
    options = device_module.RuntimeOptions(huge_pages=False)
    with caplog.at_level(logging.INFO, logger=device_module.__name__):
        chosen, sessions = device_module.open_sessions({"encoder": Path("encoder.onnx")}, "auto", options)
    assert chosen.name == "cpu" and list(sessions) == ["encoder"]
    messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("device auto")]
    assert messages == ["device auto: using CPU (no GPU ONNX Runtime can use: GPU 0: no GPU, driver or CUDA "
                        "libraries found)"], messages
    with pytest.raises(DeviceError, match=r"^CUDA requested but ONNX Runtime could not use GPU 0 .*use --device cpu$"):
        device_module.open_sessions({"encoder": Path("encoder.onnx")}, "cuda", options)
