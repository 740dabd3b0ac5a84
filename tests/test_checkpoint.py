"""Checkpoint round trip and every loading error (one line, with the fix)."""

import collections

import pytest
import torch

from tfm_export.model.checkpoint import FORMAT, load_checkpoint, save_checkpoint
from tfm_export.errors import CheckpointError
from tfm_export.model.presets import init_model


@pytest.fixture()
def saved(tmp_path):
    model = init_model("tiny", seed=7)
    path = save_checkpoint(model, tmp_path / "model.pt", samples=["a b"])
    return model, path


def test_round_trip_gives_identical_outputs(saved):
    model, path = saved
    ckpt = load_checkpoint(path)
    again = ckpt.build_model()
    src = torch.randint(3, 64, (2, 6))
    tgt = torch.randint(3, 64, (2, 4))
    assert ckpt.config == model.config and ckpt.samples == ["a b"]
    assert torch.equal(model(src, tgt), again(src, tgt))


def expect_error(path, *fragments):
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    return message


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.pt", "checkpoint not found", "check the path")


def test_not_a_torch_file(tmp_path):
    path = tmp_path / "model.pt"
    path.write_text("hello, I am text")
    expect_error(path, "not a PyTorch checkpoint")


def test_empty_file(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"")
    expect_error(path, "is empty")


def test_truncated_file(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    expect_error(cut, "truncated or corrupt")


class NeedsCode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


def test_pickle_that_needs_code_is_refused(tmp_path):
    path = tmp_path / "module.pt"
    torch.save(NeedsCode(), path)
    expect_error(path, "needs code to load", "torch.save(model.state_dict()")


def test_bare_state_dict_names_the_options(saved, tmp_path):
    model, _ = saved
    path = tmp_path / "bare.pt"
    torch.save(model.state_dict(), path)
    expect_error(path, "bare state_dict without a config", "--config", "--heads")


def test_wrong_format_marker(saved, tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"format": "something/9", "weights": {}}, path)
    expect_error(path, "not a tfm-export checkpoint", FORMAT)


def test_missing_unexpected_and_misshaped_keys(saved, tmp_path):
    model, path = saved
    data = torch.load(path, weights_only=True)
    state = collections.OrderedDict(data["state_dict"])
    state.pop("lm_head.weight")
    state["extra.weight"] = torch.zeros(1)
    state["lm_head.bias"] = torch.zeros(3)
    data["state_dict"] = state
    bad = tmp_path / "bad.pt"
    torch.save(data, bad)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad).build_model()
    message = str(info.value)
    assert "missing keys: lm_head.weight" in message
    assert "unexpected keys: extra.weight" in message
    assert "mis-shaped: lm_head.bias (3,) != (64,)" in message


def test_invalid_config_in_checkpoint(saved, tmp_path):
    _, path = saved
    data = torch.load(path, weights_only=True)
    data["config"]["n_heads"] = 5
    bad = tmp_path / "badcfg.pt"
    torch.save(data, bad)
    expect_error(bad, "invalid config", "divisible")
