"""The export/validate/init commands through Click: routing, --force, one-line errors, exit codes."""

import json
import shutil

import pytest

from helpers import run_cli, run_cli_ok
from tfm_export.cli import cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    run_cli_ok("init", folder / "model.pt", "--seed", "3")
    result = run_cli_ok(folder / "model.pt")  # routed to `export`
    return folder, result


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    error_lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(error_lines) == 1, result.output
    for fragment in fragments:
        assert fragment in error_lines[0]


def test_bare_path_exports_next_to_the_checkpoint(exported):
    folder, result = exported
    out = folder / "model_onnx"
    assert (out / "manifest.json").exists()
    for stage in ("load", "export encoder", "export decoder", "validate"):
        assert stage in result.output
    assert "greedy tokens: equal" in result.output
    assert json.loads((out / "manifest.json").read_text())["validation"]["greedy"]["equal"]


def test_existing_output_needs_force(exported):
    folder, _ = exported
    assert_one_line_error(run_cli("export", folder / "model.pt"), "already exists", "--force")
    run_cli_ok("export", folder / "model.pt", "-o", folder / "second", "--no-validate")
    run_cli_ok("export", folder / "model.pt", "-o", folder / "second", "--no-validate", "--force")


def test_validate_command_finds_the_checkpoint_and_stores_the_report(exported):
    folder, _ = exported
    out = folder / "model_onnx"
    result = run_cli_ok("validate", out)
    assert "validation passed" in result.output


def test_validate_finds_the_model_at_its_recorded_path_unless_it_changed(exported, tmp_path):
    """An export written away from its checkpoint is compared with the checkpoint at the path its manifest
    records (source.origin), while the weights there are the ones exported (their sha256); changed since, the
    model is named and not compared: the runtime checks alone run, exit 0."""
    folder, _ = exported
    checkpoint = tmp_path / "model.pt"
    shutil.copy2(folder / "model.pt", checkpoint)
    run_cli_ok(checkpoint, "-o", tmp_path / "elsewhere" / "out", "--no-validate")
    result = run_cli_ok("validate", tmp_path / "elsewhere" / "out")
    assert "greedy tokens: equal" in result.output and "validation passed" in result.output
    run_cli_ok("init", tmp_path / "other.pt", "--seed", "99")
    shutil.copy2(tmp_path / "other.pt", checkpoint)  # retrained in place, say
    result = run_cli_ok("validate", tmp_path / "elsewhere" / "out")
    assert "has changed since" in result.output and str(checkpoint) in result.output
    assert "runtime checks passed" in result.output and "validation passed" not in result.output


def test_validate_reports_a_different_model(exported, tmp_path):
    folder, _ = exported
    assert run_cli("init", tmp_path / "other.pt", "--seed", "99").exit_code == 0
    result = run_cli("validate", folder / "model_onnx", "--model", tmp_path / "other.pt")
    assert_one_line_error(result, "validation failed", "max abs diff")
    assert "logits" in result.output  # the per-output table is printed before the error


def test_validate_a_tampered_folder(exported, tmp_path):
    folder, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(folder / "model_onnx", copy)
    (copy / "encoder.onnx").write_bytes(b"garbage")
    assert_one_line_error(run_cli("validate", copy, "--model", folder / "model.pt"), "does not match the sha256")


@pytest.mark.parametrize("content, fragment", [
    (None, "checkpoint not found"),
    (b"not a checkpoint", "not a PyTorch checkpoint"),
    (b"PK\x03\x04broken", "truncated or corrupt"),
])
def test_bad_checkpoints_fail_cleanly(tmp_path, content, fragment):
    path = tmp_path / "model.pt"
    if content is not None:
        path.write_bytes(content)
    assert_one_line_error(run_cli(path), fragment)
    assert not (tmp_path / "model_onnx").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_init_refuses_to_overwrite(tmp_path):
    path = tmp_path / "m.pt"
    assert run_cli("init", path).exit_code == 0
    assert_one_line_error(run_cli("init", path), "exists", "--force")
    assert run_cli("init", path, "--force", "--preset", "tiny").exit_code == 0


def test_every_option_has_help():
    for command in cli.commands.values():
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{command.name} {param.name} has no help"


def test_the_cli_opsets_are_the_library_s():
    from tfm_export.cli.export_cmd import OPSETS
    from tfm_export.export.shared import OPSETS as LIBRARY

    assert (OPSETS.min, OPSETS.max) == LIBRARY
