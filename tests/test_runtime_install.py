"""The runtime-only install: the wheel without extras in a fresh venv has no PyTorch and still decodes.

`pip install tfm-export` (no extras) must give the runtime, `generate`, `validate` without --model and
the server's packages, with exactly the tokens of the full install; commands that need PyTorch say in
one line which extra to install. The container image (Dockerfile, `make image`: tools/build_image.py) is that
same install with the audio extra; its test builds it (installing podman where no engine runs and it can:
root with apt-get; it skips, saying so, only where it cannot) and serves the exports from it; it runs in
`make test-long` (minutes of image building, more than CI's budget allows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tfm_export.runtime import open_export
from tfm_export.runtime.verify import verify_export

from helpers import run_cli_ok
from install_helpers import ROOT, build_wheel, install_wheel, run
from tools.build_image import Engine, find_engine

HELDOUT = [line.split("\t") for line in (ROOT / "models/num2words-de/heldout.tsv").read_text().splitlines()]
INPUTS = [source for source, _ in HELDOUT[:6]]
EXTRA_MESSAGE = "needs PyTorch (torch, onnxscript, onnx_ir not installed): pip install 'tfm-export[export]'"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, built once for the module (the venv and the image install it)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def runtime_bin(wheel, tmp_path_factory) -> Path:
    """The bin folder of a fresh venv holding the wheel without extras (outside the checkout)."""
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


KEY = "container-test-key"
TAG = f"localhost/tfm-export-server:test-{os.getpid()}"


def readable_copy(export: Path, into: Path) -> Path:
    """A copy of `export` the image's user (uid 10001) can read: pytest's temporary folders are private."""
    copy = shutil.copytree(export, into)
    for folder, _, files in os.walk(copy):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(Path(folder, name), 0o644)
    return copy


class Containers:
    """The engine's calls for one test, and what it started: every container and the image removed at the end."""

    def __init__(self, engine: Engine):
        self.engine, self.names = engine, []

    def call(self, *args, check: bool = True, timeout: float = 300):
        done = subprocess.run(self.engine.cmd(*args), env=self.engine.env(), capture_output=True, text=True,
                              timeout=timeout)
        if check:
            assert done.returncode == 0, f"{args[:3]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def serve(self, export: Path) -> str:
        """The image's default command on `export`, published on a free port of 127.0.0.1 only; its URL."""
        name = f"tfm-export-test-{os.getpid()}-{len(self.names)}"
        self.names.append(name)
        self.call("run", "-d", "--name", name, "-p", "127.0.0.1::8080", "-v", f"{export}:/model:ro",
                  "-e", f"TFM_EXPORT_API_KEY={KEY}", TAG)
        (address,) = self.call("port", name, "8080").stdout.split()
        assert address.startswith("127.0.0.1:")  # never another address of the host
        url = f"http://{address}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            state = self.call("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
            assert state == "running" and time.monotonic() < deadline, self.call("logs", name).stderr[-3000:]
            time.sleep(1)

    def healthy(self, name: str) -> bool:
        """The image's HEALTHCHECK run now (podman runs it on demand; docker on its interval)."""
        if self.engine.name == "podman":
            return self.call("healthcheck", "run", name, check=False).returncode == 0
        for _ in range(60):
            if self.call("inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip() == "healthy":
                return True
            time.sleep(2)
        return False

    def stop(self, name: str) -> int:
        """SIGTERM (the engine's stop), then the exit status: 0 when the server stopped by itself."""
        self.call("stop", "-t", "60", name, timeout=120)
        return int(self.call("inspect", "-f", "{{.State.ExitCode}}", name).stdout)

    def remove_all(self) -> None:
        for name in self.names:
            self.call("rm", "-f", name, check=False)
        self.call("rmi", "-f", TAG, check=False)


def tone_wav(path: Path, seconds: float = 3.0) -> Path:
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * 16000)) / 16000
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * (300 + 80 * np.sin(0.7 * t)) * t)).astype(np.float32), 16000,
                    subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def engine() -> Engine:
    found = find_engine()  # podman from Debian's packages where none runs and we are root with apt-get
    if found is None:
        pytest.skip("SKIPPED: no docker or podman runs here, and podman cannot be installed (needs root and "
                    "apt-get); the image was not built")
    return found


@pytest.mark.long  # about 6 minutes (debootstrap, the image, two servers): `make test-long`, not CI's `make test`
def test_container_image(engine, wheel, bundled_export, whisper_export, tmp_path):
    started = time.perf_counter()
    built = run([sys.executable, ROOT / "tools/build_image.py", "--tag", TAG, "--wheel", wheel,
                 "--engine", engine.name], cwd=ROOT, timeout=1500)
    print("\n" + "\n".join(line for line in built.stderr.splitlines() if line.startswith("[image]")))
    containers = Containers(engine)
    try:
        size = int(containers.call("image", "inspect", "-f", "{{.Size}}", TAG).stdout)
        print(f"image {TAG}: {size / 2**20:.0f} MiB, built in {time.perf_counter() - started:.0f} s")
        check_the_image(containers, readable_copy(bundled_export, tmp_path / "text"),
                        readable_copy(whisper_export, tmp_path / "speech"), tmp_path)
    finally:
        containers.remove_all()
    assert containers.call("image", "inspect", TAG, check=False).returncode != 0  # nothing left behind


def check_the_image(containers: Containers, text: Path, speech: Path, tmp_path: Path) -> None:
    call, mount = containers.call, ["-v", f"{text}:/model:ro"]
    done = call("run", "--rm", *mount, "--entrypoint", "tfm-export", TAG, "generate", "/model",
                *(a for source in INPUTS for a in ("--text", source)))
    assert done.stdout.splitlines() == [f"{s}\t{t}" for s, t in HELDOUT[:6]]
    no_torch = call("run", "--rm", "--entrypoint", "python3", TAG, "-c", "import torch", check=False)
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr
    audio = call("run", "--rm", "--entrypoint", "python3", TAG, "-c", "import soundfile, soxr; print('ok')")
    assert audio.stdout == "ok\n"  # the speech extras are in
    assert call("run", "--rm", "--entrypoint", "id", TAG, "-u").stdout == "10001\n"  # not root
    keyless = call("run", "--rm", *mount, TAG, check=False)  # the default command, 0.0.0.0 without a key
    assert keyless.returncode != 0 and "TFM_EXPORT_API_KEY" in keyless.stderr, keyless.stderr

    url, name = containers.serve(text), containers.names[-1]
    bearer = {"Authorization": f"Bearer {KEY}"}
    sources = [source for source, _ in HELDOUT[6:12]]
    refused = httpx.post(f"{url}/v1/translate", json={"texts": sources}, timeout=60)
    assert refused.status_code == 401, refused.text
    reply = httpx.post(f"{url}/v1/translate", json={"texts": sources}, headers=bearer, timeout=120)
    assert reply.status_code == 200, reply.text
    assert [row["text"] for row in reply.json()["translations"]] == [t for _, t in HELDOUT[6:12]]
    assert containers.healthy(name)
    read_only = call("exec", name, "sh", "-c", "touch /model/x", check=False)
    assert read_only.returncode != 0 and "Read-only file system" in read_only.stderr
    assert containers.stop(name) == 0  # SIGTERM: stopped by itself, not killed

    url, name = containers.serve(speech), containers.names[-1]
    recording = tone_wav(tmp_path / "tone.wav")
    with open(recording, "rb") as upload:
        heard = httpx.post(f"{url}/v1/audio/transcriptions", headers=bearer, timeout=300,
                           files={"file": ("tone.wav", upload, "audio/wav")}, data={"model": "whisper"})
    assert heard.status_code == 200, heard.text
    from tfm_export.runtime.speech.fallback import openai_fallback
    from tfm_export.runtime.speech.whisper import speech_settings

    direct = open_export(speech, device="cpu")  # the form leaves temperature out: 0, OpenAI's default
    assert heard.json()["text"] == direct.transcribe(str(recording), **openai_fallback(speech_settings(direct)[0]))[
        "text"]
    with open(recording, "rb") as upload:
        assert httpx.post(f"{url}/v1/audio/transcriptions", files={"file": ("tone.wav", upload, "audio/wav")},
                          data={"model": "whisper"}, timeout=60).status_code == 401
    assert containers.stop(name) == 0
