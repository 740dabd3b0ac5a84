"""Hugging Face Hub ids (`tfm-export org/name`), through huggingface_hub's real download path against a Hub on
127.0.0.1 (tests/fake_hub.py; no network): the standard cache and HF_HUB_OFFLINE, revisions, gated and
missing repos and revisions, a download cut short, an unsupported family, a local folder of the same name,
and the manifest's record of where an export came from."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
from pathlib import Path

import pytest

from fake_hub import FakeHub
from helpers import free_port, run_cli, run_cli_ok
from marian_fixtures import marian_folder

REPO = "org/tiny-marian"


def one_line_error(result, *fragments: str) -> str:
    """The command failed with one `Error:` line holding every fragment, no traceback; that line."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # click's exit, no crash
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """v1: a downloaded-looking OPUS-MT folder; readme: the same files and a README (the same weights in
    another commit); v2: other output biases; bert: a config.json of a model type no family reads."""
    from safetensors.torch import load_file, save_file

    v1 = tmp_path_factory.mktemp("v1")
    marian_folder(v1)
    v2, readme = tmp_path_factory.mktemp("v2"), tmp_path_factory.mktemp("readme")
    for file in v1.iterdir():
        shutil.copy2(file, v2 / file.name)
        shutil.copy2(file, readme / file.name)
    (readme / "README.md").write_text("# tiny-marian\n")
    state = load_file(v2 / "model.safetensors")
    state["final_logits_bias"] = state["final_logits_bias"].flip(-1).contiguous()
    save_file(state, v2 / "model.safetensors", metadata={"format": "pt"})
    bert = tmp_path_factory.mktemp("bert")
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    (bert / "model.safetensors").write_bytes(b"weights a bert model would have")
    return {"v1": v1, "v2": v2, "readme": readme, "bert": bert}


@pytest.fixture(scope="module")
def hub(folders):
    with FakeHub() as server:
        # main: the weights every CLI export here uses (graphs exported once: tests/conftest.py reuses them)
        server.sha_readme = server.publish(REPO, folders["readme"], ref="with-readme")
        server.sha_v2 = server.publish(REPO, folders["v2"], ref="v2")
        server.sha_main = server.publish(REPO, folders["v1"], ref="main")
        server.publish("org/gated", folders["v1"], token="hf_secret")
        server.publish("org/bert-tiny", folders["bert"])
        yield server


def hub_settings(env: dict[str, str | None]) -> None:
    """huggingface_hub reads its environment once, into huggingface_hub.constants, when imported: set it,
    then read it again (as a new process would)."""
    import os

    from huggingface_hub import constants

    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    importlib.reload(constants)


@pytest.fixture
def use_hub(hub, tmp_path, monkeypatch):
    """A fresh Hugging Face cache under tmp_path, the fake Hub as the endpoint, no token; cwd tmp_path.
    `use_hub(offline=True, endpoint=...)` changes them mid-test; the real settings come back afterwards."""
    import os

    keys = ("HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_DISABLE_PROGRESS_BARS")
    saved = {key: os.environ.get(key) for key in keys}
    monkeypatch.chdir(tmp_path)
    # huggingface_hub waits a second before each of its 5 retries of a dropped download
    monkeypatch.setattr("huggingface_hub.file_download.time.sleep", lambda seconds: None)

    def settings(offline: bool = False, endpoint: str | None = None) -> None:
        hub_settings({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
                      "HF_ENDPOINT": endpoint or hub.url, "HF_HUB_OFFLINE": "1" if offline else None,
                      "HF_TOKEN": None, "HF_HUB_DISABLE_PROGRESS_BARS": "1"})

    settings()
    hub.requests.clear()
    hub.cut.clear()
    yield settings
    hub_settings(saved)


def snapshot(tmp_path: Path, repo: str, sha: str) -> Path:
    return tmp_path / "hf" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / sha


def test_export_downloads_then_works_offline_from_the_cache(use_hub, hub, tmp_path):
    # default output: tiny-marian_onnx/ here, not inside the cache; validated against eager below (`validate`)
    result = run_cli_ok(REPO, "--no-validate")
    assert f"downloaded {REPO}@{hub.sha_main}" in result.output
    manifest = json.loads((tmp_path / "tiny-marian_onnx" / "manifest.json").read_text())
    assert manifest["source"]["origin"] == {"hub": REPO, "revision": "main", "commit": hub.sha_main}
    # the cache as huggingface_hub lays it out: refs/main -> the commit, snapshot files linking to blobs/
    folder = snapshot(tmp_path, REPO, hub.sha_main)
    assert (folder.parents[1] / "refs" / "main").read_text() == hub.sha_main
    assert (folder / "model.safetensors").is_symlink() and (folder / "model.safetensors").resolve().parent.name == "blobs"
    # only what the export reads: no SentencePiece .vocab files (the repo has them)
    assert not (folder / "source.vocab").exists() and (folder.parents[1] / "blobs").is_dir()

    use_hub(offline=True, endpoint=f"http://127.0.0.1:{free_port()}")  # and nothing listens there
    hub.requests.clear()
    result = run_cli_ok(REPO, "-o", "offline_onnx", "--no-validate")
    assert f"using {REPO}@{hub.sha_main} from the Hugging Face cache" in result.output
    assert json.loads((tmp_path / "offline_onnx" / "manifest.json").read_text())["source"]["origin"]["commit"] == hub.sha_main
    # validate says where the export came from, and finds its snapshot in the cache for the eager comparison
    result = run_cli_ok("validate", "offline_onnx")
    assert f"exported from the Hugging Face Hub model {REPO} at commit {hub.sha_main} (revision main)" in result.output
    assert "validation passed" in result.output
    assert json.loads((tmp_path / "offline_onnx" / "manifest.json").read_text())["validation"]["greedy"]["equal"]
    one_line_error(run_cli("org/never-downloaded"), "not in the Hugging Face cache", "HF_HUB_OFFLINE")
    assert hub.requests == []


def test_revisions_resolve_to_their_commits(use_hub, hub, tmp_path):
    from tfm_export.importers.hub import resolve_model

    main, tag, commit = (resolve_model(REPO, revision) for revision in (None, "v2", hub.sha_v2))
    assert main.origin["commit"] == hub.sha_main and tag.origin == {"hub": REPO, "revision": "v2", "commit": hub.sha_v2}
    assert commit.path == tag.path == snapshot(tmp_path, REPO, hub.sha_v2) != main.path
    assert (tag.path / "model.safetensors").read_bytes() != (main.path / "model.safetensors").read_bytes()
    result = run_cli_ok(REPO, "--revision", hub.sha_readme, "-o", "old_onnx", "--no-validate")
    assert f"@{hub.sha_readme}" in result.output
    origin = json.loads((tmp_path / "old_onnx" / "manifest.json").read_text())["source"]["origin"]
    assert origin == {"hub": REPO, "revision": hub.sha_readme, "commit": hub.sha_readme}
    assert not (snapshot(tmp_path, REPO, hub.sha_readme) / "README.md").exists()  # not read, not fetched


def test_gated_missing_and_unsupported_repos_fail_in_one_line(use_hub, hub):
    from tfm_export.importers.hub import resolve_model

    one_line_error(run_cli("org/gated"), "gated", "hf auth login", "HF_TOKEN", "--token TOKEN")
    assert resolve_model("org/gated", token="hf_secret").origin["commit"]  # the repo's token gets through
    one_line_error(run_cli("org/missing"), "neither a local path nor a model on the Hugging Face Hub")
    one_line_error(run_cli(REPO, "--revision", "nope"), "has no revision 'nope'")
    hub.requests.clear()
    line = one_line_error(run_cli("org/bert-tiny"), "'bert'", "marian", "t5")
    assert "supported model types" in line
    assert hub.served("GET", "model.safetensors") == []  # refused on config.json, before the weights
    # not a path and not of the Hub's namespace/name form: the path's own error, no Hub request
    hub.requests.clear()
    for argument in ("runs/model.pt", "a/b/c", "../x"):
        one_line_error(run_cli(argument), "not found")
    assert hub.requests == []


def test_options_that_cannot_work_are_refused_before_a_download(use_hub, hub, tmp_path):
    """An impossible mix of variants, or an eval file that is not there, is refused before the model is looked
    up: a user would otherwise download gigabytes to learn that --dtype float16 and --quantize int4 clash."""
    hub.requests.clear()
    one_line_error(run_cli(REPO, "--quantize", "int4", "--dtype", "float16"), "cannot be combined")
    one_line_error(run_cli(REPO, "--int4-method", "gptq"), "apply to --quantize int4 only")
    (tmp_path / "empty.tsv").write_text("")
    one_line_error(run_cli(REPO, "--eval-file", "empty.tsv"), "empty.tsv")
    assert hub.requests == [] and not (tmp_path / "hf" / "hub").exists()


def test_no_network_says_how_to_use_the_cache(use_hub):
    use_hub(endpoint=f"http://127.0.0.1:{free_port()}")
    one_line_error(run_cli(REPO), "cannot download", "HF_HUB_OFFLINE=1")


def test_a_download_cut_short_is_not_used_and_the_next_run_completes(use_hub, hub, folders, tmp_path, monkeypatch):
    hub.cut["model.safetensors"] = 100  # every try of this run (huggingface_hub resumes 5 times)
    one_line_error(run_cli(REPO, "-o", "cut_onnx", "--no-validate"), "cannot download", "run again")
    assert not (tmp_path / "cut_onnx").exists()
    repo = snapshot(tmp_path, REPO, hub.sha_main).parents[1]
    assert not (repo / "snapshots" / hub.sha_main / "model.safetensors").exists()
    blob = hashlib.sha256((folders["v1"] / "model.safetensors").read_bytes()).hexdigest()  # its X-Linked-Etag
    assert not (repo / "blobs" / blob).exists() and not list(repo.rglob("*.incomplete"))  # nothing partial kept
    assert len(hub.served("GET", "model.safetensors")) == 6
    # one dropped connection: resumed from where it stopped (a Range request), in the same run; chunks of
    # 16 KB rather than 10 MB, so that the cut file has some written before the connection drops
    monkeypatch.setattr("huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE", 16 * 1024)
    hub.requests.clear()
    hub.cut["model.safetensors"] = 1
    run_cli_ok(REPO, "-o", "cut_onnx", "--no-validate")
    ranges = hub.served("GET", "model.safetensors")
    assert ranges[0] is None and ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-"


def test_a_local_folder_of_the_same_name_wins(use_hub, hub, folders, tmp_path):
    shutil.copytree(folders["v1"], tmp_path / REPO)
    result = run_cli_ok(REPO, "--no-validate")
    assert f"using local folder {REPO}" in result.output and hub.requests == []
    origin = json.loads((tmp_path / "org" / "tiny-marian_onnx" / "manifest.json").read_text())["source"]["origin"]
    weights = (tmp_path / REPO / "model.safetensors").read_bytes()
    assert origin == {"path": str(tmp_path / REPO), "sha256": {"model.safetensors": hashlib.sha256(weights).hexdigest()}}
    result = run_cli_ok("validate", tmp_path / "org" / "tiny-marian_onnx")
    assert f"exported from {tmp_path / REPO} (model.safetensors sha256 {hashlib.sha256(weights).hexdigest()[:12]})" \
        in result.output
    one_line_error(run_cli(REPO, "--revision", "v1", "-o", "x"), "--revision v1", "local path")


def test_bench_takes_a_hub_id(use_hub, hub):
    result = run_cli_ok("bench", REPO, "--batch", "1", "--src-len", "3", "--new-tokens", "2", "--repeat", "1",
                        "--warmup", "0", "--threads", "1")
    assert f"downloaded {REPO}@{hub.sha_main}" in result.output and "ort" in result.output
