"""Writing never removes or overwrites a file tfm-export did not write itself."""

import json
import shutil

import pytest

from helpers import run_cli
from tfm_export.bench.report import write_report
from tfm_export.errors import OutputError
from tfm_export.files import prepare_output_dir
from tfm_export.model.checkpoint import is_checkpoint
from tfm_export.serve.engine import ServeSettings
from tfm_export.serve.ray_config import write_config


def test_files_put_into_the_output_during_an_export_are_kept(tiny_export, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)  # a previous export: replaceable with force
    target = prepare_output_dir(out, force=True)
    (target.tmp / "manifest.json").write_text("{}")
    (out / "notes.txt").write_text("mine")  # appears while the long export runs
    with pytest.raises(OutputError, match=r"holds files that are not a tfm-export export \(notes.txt\)"):
        target.commit()
    target.discard()
    assert (out / "notes.txt").read_text() == "mine" and (out / "decoder.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_replacing_a_previous_export_removes_only_its_files(tiny_export, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    target = prepare_output_dir(out, force=True)
    (target.tmp / "new.txt").write_text("new")
    target.commit()
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_unreadable_manifest_is_named_and_nothing_is_replaced(tiny_export, tmp_path):
    """A damaged manifest no longer says which files are the export's: refused, naming the manifest (not
    "files that are not a tfm-export export", which sent users looking for files they had added)."""
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    with open(out / "manifest.json", "a") as manifest:
        manifest.write("appended")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(OutputError, match=r"out/manifest.json cannot be read as a tfm-export manifest"):
        prepare_output_dir(out, force=True)
    assert sorted(p.name for p in out.iterdir()) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def replace_with_force(out):
    """Replace the export at `out` (a new one holding new.txt); the hidden folders kept beside it."""
    target = prepare_output_dir(out, force=True)
    (target.tmp / "new.txt").write_text("new")
    target.commit()
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.old-")]


def test_a_graph_file_changed_since_the_export_is_kept(tiny_export, tmp_path):
    """The manifest names the file, but its content is no longer what the export wrote: kept, with the
    hidden folder it was moved to (nothing the user changed is deleted)."""
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    (out / "encoder.onnx").write_bytes(b"edited by the user")
    kept = replace_with_force(out)
    assert len(kept) == 1 and [p.name for p in kept[0].iterdir()] == ["encoder.onnx"]
    assert (kept[0] / "encoder.onnx").read_bytes() == b"edited by the user"


def test_a_tokenizer_file_without_a_recorded_hash_is_kept(tiny_export, tmp_path):
    """Exports from before manifest.files name tokenizer files without hashes: they are the export's (the
    folder is replaceable) but cannot be told unchanged, so replacing it keeps them."""
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"] = {"type": "marian", "source_spm": "source.spm"}
    manifest.pop("files", None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "source.spm").write_bytes(b"a model")
    kept = replace_with_force(out)
    assert len(kept) == 1 and [p.name for p in kept[0].iterdir()] == ["source.spm"]
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]


@pytest.mark.parametrize("kind", ["folder", "symlink"])
def test_an_entry_that_is_not_a_plain_file_is_foreign_even_when_the_manifest_names_it(tiny_export, tmp_path, kind):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    (out / "decoder.onnx").unlink()
    if kind == "folder":
        (out / "decoder.onnx").mkdir()
        (out / "decoder.onnx" / "mine.txt").write_text("mine")
    else:
        (tmp_path / "mine.onnx").write_text("mine")
        (out / "decoder.onnx").symlink_to(tmp_path / "mine.onnx")
    with pytest.raises(OutputError, match=r"not a tfm-export export \(decoder.onnx\)"):
        prepare_output_dir(out, force=True)
    assert (out / "decoder.onnx").exists() and (tmp_path / "mine.onnx").exists() == (kind == "symlink")


def test_a_symlinked_output_folder_is_refused(tiny_export, tmp_path):
    (tmp_path / "link").symlink_to(tiny_export, target_is_directory=True)
    with pytest.raises(OutputError, match="is a symbolic link"):
        prepare_output_dir(tmp_path / "link", force=True)
    assert (tiny_export / "manifest.json").exists()


def test_init_force_replaces_only_a_checkpoint(tmp_path):
    notes = tmp_path / "notes.pt"
    notes.write_text("not a checkpoint")
    result = run_cli("init", notes, "--force")
    assert result.exit_code == 1 and "exists and is not a tfm-export checkpoint" in result.output
    assert notes.read_text() == "not a checkpoint" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.pt"]
    ours = tmp_path / "model.pt"
    assert run_cli("init", ours).exit_code == 0
    assert run_cli("init", ours, "--force", "--seed", "3").exit_code == 0 and is_checkpoint(ours)


def test_reports_and_configs_replace_only_their_own_kind(tmp_path):
    report = {"machine": {}, "settings": {}, "rows": []}
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "data"}')
    with pytest.raises(OutputError, match="is not a tfm-export bench report"):
        write_report(report, mine)
    assert json.loads(mine.read_text()) == {"my": "data"}
    ours = tmp_path / "bench.json"
    write_report(report, ours)
    write_report({**report, "rows": [1]}, ours)  # an earlier report is replaced
    assert json.loads(ours.read_text())["rows"] == [1]

    serve_yaml = tmp_path / "serve.yaml"
    serve_yaml.write_text("my: settings\n")
    with pytest.raises(OutputError, match="is not a Ray Serve config tfm-export wrote"):
        write_config(serve_yaml, ServeSettings("MODEL"), 2, "127.0.0.1", 8000)
    assert serve_yaml.read_text() == "my: settings\n"
    written = tmp_path / "ours.yaml"
    write_config(written, ServeSettings("MODEL"), 2, "127.0.0.1", 8000)
    write_config(written, ServeSettings("MODEL"), 3, "127.0.0.1", 8000)
    assert "num_replicas: 3" in written.read_text()
