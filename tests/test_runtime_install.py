"""The runtime-only install: the wheel without extras in a fresh venv has no PyTorch and still decodes.

`pip install tfm-export` (no extras) must give the runtime, `generate`, `validate` without --model and
the server's packages, with exactly the tokens of the full install; commands that need PyTorch say in
one line which extra to install. The container recipe (Dockerfile) builds that same install; its test
needs a running docker or podman and skips, saying so, without one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tfm_export.runtime import open_export
from tfm_export.runtime.verify import verify_export

from helpers import run_cli_ok
from install_helpers import ROOT, build_wheel, install_wheel, run

HELDOUT = [line.split("\t") for line in (ROOT / "models/num2words-de/heldout.tsv").read_text().splitlines()]
INPUTS = [source for source, _ in HELDOUT[:6]]
EXTRA_MESSAGE = "needs PyTorch (torch, onnxscript, onnx_ir not installed): pip install 'tfm-export[export]'"


@pytest.fixture(scope="module")
def runtime_bin(tmp_path_factory) -> Path:
    """The bin folder of a fresh venv holding the wheel without extras (outside the checkout)."""
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    return install_wheel(wheel, tmp_path_factory.mktemp("runtime-venv"))


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """An empty working folder outside the checkout."""
    return tmp_path


@pytest.mark.slow
def test_no_pytorch_but_the_runtime_and_the_server_packages(runtime_bin, elsewhere):
    probe = ("import importlib.util as u, json; print(json.dumps({m: u.find_spec(m) is not None for m in "
             "('torch', 'onnx', 'onnxscript', 'onnxruntime', 'numpy', 'fastapi', 'uvicorn', 'prometheus_client')}))")
    found = json.loads(run([runtime_bin / "python", "-c", probe], cwd=elsewhere).stdout)
    assert found == {"torch": False, "onnx": True, "onnxscript": False, "onnxruntime": True, "numpy": True,
                     "fastapi": True, "uvicorn": True, "prometheus_client": True}
    failed = run([runtime_bin / "python", "-c", "import torch"], cwd=elsewhere, check=False)
    assert failed.returncode == 1 and "No module named 'torch'" in failed.stderr
    where = run([runtime_bin / "python", "-c", "import tfm_export; print(tfm_export.__file__)"], cwd=elsewhere)
    assert str(runtime_bin.parent) in where.stdout  # the installed copy, not the checkout


@pytest.mark.slow
def test_generate_gives_the_full_install_tokens(runtime_bin, bundled_export, elsewhere):
    args = ["generate", str(bundled_export), *(a for text in INPUTS for a in ("--text", text)), "--json",
            "--device", "cpu"]
    full = run_cli_ok(*args)
    runtime_only = run([runtime_bin / "tfm-export", *args], cwd=elsewhere)
    assert runtime_only.stdout == full.stdout
    rows = [json.loads(line) for line in runtime_only.stdout.splitlines()]
    assert [r["text"] for r in rows] == [expected for _, expected in HELDOUT[:6]]  # and the model is right


@pytest.mark.slow
def test_python_api_gives_the_full_install_tokens(runtime_bin, bundled_export, elsewhere):
    script = textwrap.dedent("""
        import json, sys
        from tfm_export.runtime import open_export
        model = open_export(sys.argv[1], device="cpu")
        texts = json.loads(sys.argv[2])
        ids = model.generate_ids([model.tokenizer.encode(t) for t in texts])
        print(json.dumps({"ids": ids, "texts": model.translate(texts), "torch": "torch" in sys.modules}))
    """)
    got = json.loads(run([runtime_bin / "python", "-c", script, bundled_export, json.dumps(INPUTS)],
                         cwd=elsewhere).stdout)
    model = open_export(bundled_export, device="cpu")
    assert got == {"ids": model.generate_ids([model.tokenizer.encode(t) for t in INPUTS]),
                   "texts": model.translate(INPUTS), "torch": False}


@pytest.mark.slow
@pytest.mark.parametrize("args, command", [
    (["export", "x.pt"], "export"),
    (["x.pt", "-o", "out"], "export"),  # routed to `export`
    (["init", "m.pt"], "init"),
    (["demo"], "demo"),
    (["bench", "."], "bench"),
    (["validate", ".", "--model", "m.pt"], "validate --model"),
])
def test_commands_that_need_pytorch_name_the_extra(runtime_bin, elsewhere, args, command):
    done = run([runtime_bin / "tfm-export", *args], cwd=elsewhere, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == f"Error: tfm-export {command} {EXTRA_MESSAGE}\n"
    assert list(elsewhere.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_validate_without_a_checkpoint_runs_the_runtime_checks(runtime_bin, bundled_export, tmp_path):
    copy = tmp_path / "model_onnx"
    shutil.copytree(bundled_export, copy)
    (tmp_path / "model.pt").write_bytes(b"")  # the recorded checkpoint is there, but PyTorch is not
    before = (copy / "manifest.json").read_bytes()
    done = run([runtime_bin / "tfm-export", "validate", copy], cwd=tmp_path)
    assert "greedy decoding on cpu: 8 sample sources" in done.stdout
    assert (f"{copy}: runtime checks passed; not compared with the eager model: PyTorch is not installed "
            "(pip install 'tfm-export[export]', then pass --model MODEL.pt)") in done.stdout
    assert (copy / "manifest.json").read_bytes() == before  # the eager report stays as it was
    (copy / "decoder.onnx").write_bytes((copy / "decoder.onnx").read_bytes() + b"\0")
    tampered = run([runtime_bin / "tfm-export", "validate", copy], cwd=tmp_path, check=False)
    assert tampered.returncode == 1 and "does not match the sha256" in tampered.stderr


def test_validate_without_a_checkpoint_in_the_full_install(bundled_export):
    """No checkpoint beside the folder: the runtime checks run and the output says how to add eager."""
    result = run_cli_ok("validate", bundled_export)
    assert "eager comparison recorded at export: parity on cpu, greedy tokens equal" in result.stdout
    assert result.stdout.rstrip().endswith("not compared with the eager model: cannot find the checkpoint "
                                           f"{bundled_export} was exported from; pass --model MODEL.pt")


def test_verify_export_decodes_random_sources_without_samples(tiny_export):
    report = verify_export(tiny_export)
    assert report["from"] == "random" and report["sources"] == 8 and report["tokens"] > 0
    assert report["eager_report"].startswith("none recorded")  # the fixture skips validation


def container_engine() -> str | None:
    """docker or podman, when one is installed and its daemon answers."""
    for engine in ("docker", "podman"):
        if shutil.which(engine) and subprocess.run([engine, "info"], capture_output=True,
                                                   timeout=60).returncode == 0:
            return engine
    return None


@pytest.mark.slow
def test_container_image(bundled_export, elsewhere):
    engine = container_engine()
    if engine is None:
        pytest.skip("SKIPPED: no docker or podman with a running daemon here; the Dockerfile was not built")
    tag = "tfm-export-server:test"
    run([engine, "build", "-t", tag, ROOT], cwd=ROOT, timeout=1800)
    size = int(run([engine, "image", "inspect", "-f", "{{.Size}}", tag], cwd=ROOT).stdout)
    print(f"\nimage {tag}: {size / 2**20:.0f} MiB")
    mount = ["-v", f"{bundled_export}:/model:ro"]
    done = run([engine, "run", "--rm", *mount, "--entrypoint", "tfm-export", tag, "generate", "/model",
                *(a for text in INPUTS for a in ("--text", text))], cwd=elsewhere)
    assert done.stdout.splitlines() == [f"{s}\t{t}" for s, t in HELDOUT[:6]]
    no_torch = run([engine, "run", "--rm", "--entrypoint", "python", tag, "-c", "import torch"], cwd=elsewhere,
                   check=False)
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr
    keyless = run([engine, "run", "--rm", *mount, tag], cwd=elsewhere, check=False)  # the default command
    assert keyless.returncode != 0 and "set TFM_EXPORT_API_KEY" in keyless.stderr
