"""Loading what people really hand us: NaN weights, damaged files that look like pickles, pickles
that hold no model, and a whole pickled Transformer. Every error is one line, raised at load time."""

import logging
import random
from dataclasses import dataclass

import pytest
import torch

import reference_models as ref
from helpers import run_cli
from tfm_export.errors import CheckpointError, ConfigError
from tfm_export.importers import IMPORTERS, load_any
from tfm_export.model.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from tfm_export.model.presets import init_model

IDS = {"heads": 4, "src_pad_id": 0, "bos_id": 1, "eos_id": 2}
CLI_IDS = ["--heads", "4", "--src-pad-id", "0", "--bos-id", "1", "--eos-id", "2"]
OURS = "decoder_layers.0.ffn.fc1.weight"  # the tensor spoiled below, by its name in our model


def one_line_error(call, error=CheckpointError) -> str:
    with pytest.raises(error) as info:
        call()
    assert "\n" not in str(info.value)
    return str(info.value)


def spoil(tensor: torch.Tensor, nan: int, inf: int = 0) -> None:
    flat = tensor.view(-1)
    flat[:nan] = float("nan")
    flat[nan:nan + inf] = float("inf")


def tutorial_file(tmp_path):
    torch.manual_seed(0)
    module = ref.TutorialTransformer(40, 44, 0, 0, embed_size=32, num_layers=2, forward_expansion=2, heads=4,
                                     max_length=30)
    state = module.state_dict()
    spoil(state["decoder.layers.0.transformer_block.feed_forward.0.weight"], 3)
    torch.save(state, tmp_path / "model.pt")
    return tmp_path / "model.pt"


def nn_transformer_file(tmp_path):
    torch.manual_seed(0)
    state = ref.Seq2SeqTransformer(2, 2, 32, 4, 40, 44, dim_feedforward=48, maxlen=64).state_dict()
    spoil(state["transformer.decoder.layers.0.linear1.weight"], 3)
    torch.save(state, tmp_path / "model.pt")
    return tmp_path / "model.pt"


def ours_file(tmp_path):
    model = init_model("tiny", seed=3)
    with torch.no_grad():
        spoil(model.state_dict()[OURS], 3)
    return save_checkpoint(model, tmp_path / "model.pt")


def marian_folder(tmp_path):
    pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    from marian_fixtures import marian

    marian().save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    spoil(state["model.decoder.layers.0.fc1.weight"], 3)
    save_file(state, tmp_path / "model.safetensors")
    return tmp_path


@pytest.mark.parametrize("make", [ours_file, tutorial_file, nn_transformer_file, marian_folder],
                         ids=["tfm-export", "tutorial", "nn_transformer", "marian"])
def test_nan_weights_are_named_at_load_time_for_every_layout(make, tmp_path):
    path = make(tmp_path)
    message = one_line_error(lambda: load_any(path, options=None if path.is_dir() else IDS))
    assert message == f"{path} has non-finite weights: {OURS} (3 NaN); fix or retrain the model"


def test_nan_and_inf_are_counted_and_the_cli_exports_nothing(tmp_path):
    model = init_model("tiny", seed=3)
    with torch.no_grad():
        spoil(model.state_dict()["lm_head.weight"], 1, inf=2)
        spoil(model.state_dict()["encoder_layers.0.norm1.bias"], 0, inf=1)
    path = save_checkpoint(model, tmp_path / "model.pt")
    message = one_line_error(lambda: load_checkpoint(path))
    assert "encoder_layers.0.norm1.bias (1 inf)" in message and "lm_head.weight (1 NaN, 2 inf)" in message
    result = run_cli(path)
    assert result.exit_code == 1 and "non-finite weights" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "model_onnx").exists()


def test_garbage_after_a_pickle_header_is_corrupt_not_code(tmp_path, caplog):
    rng = random.Random(0)
    for i in range(8):
        path = tmp_path / f"garbage{i}.pt"
        path.write_bytes(b"\x80" + bytes(rng.randrange(256) for _ in range(rng.randrange(2, 3000))))
        for trust in (False, True):
            with caplog.at_level(logging.WARNING):
                message = one_line_error(lambda: load_any(path, trust_pickle=trust, options=IDS))
            assert "is truncated or corrupt" in message and "needs code" not in message, message
            assert "--trust-pickle: unpickling" not in caplog.text  # never handed to the unsafe loader


@dataclass
class Thing:
    """Not a model: a class a pickle can reference."""

    value: int = 1


def test_a_real_code_pickle_names_the_class_it_needs(tmp_path):
    torch.save(Thing(), tmp_path / "thing.pt")
    message = one_line_error(lambda: load_checkpoint(tmp_path / "thing.pt"))
    assert "needs code to load (it references " in message and "Thing" in message


@pytest.mark.parametrize("data, kind", [
    ([torch.zeros(2)], "a list"), ("weights", "a str"), ({"epoch": 3, "lr": 0.1}, "a dict with non-tensor values (epoch, lr)"),
    ({}, "an empty dict"), (Thing(), "a Thing"), ({"w": torch.zeros(2), "note": "x"}, "a dict with non-tensor values (note)"),
], ids=["list", "str", "dict-of-numbers", "empty-dict", "object", "mixed-dict"])
def test_trusted_pickle_that_holds_no_model(data, kind, tmp_path):
    torch.save(data, tmp_path / "model.pt")
    message = one_line_error(lambda: load_any(tmp_path / "model.pt", trust_pickle=True, options=IDS))
    assert message.startswith(f"{tmp_path / 'model.pt'} holds {kind}, not a model or state_dict; re-save it")


@torch.no_grad()
def test_pickled_transformer_loads_with_its_own_config(tmp_path):
    model = init_model("tiny", seed=5).eval()
    torch.save(model, tmp_path / "whole.pt")
    message = one_line_error(lambda: load_any(tmp_path / "whole.pt"))
    assert "needs code to load (it references tfm_export.model.transformer.Transformer" in message
    ckpt = load_any(tmp_path / "whole.pt", trust_pickle=True)
    assert ckpt.config == model.config and ckpt.meta["layout"] == "tfm-export"
    src, tgt = torch.randint(3, 64, (2, 6)), torch.randint(3, 64, (2, 4))
    assert torch.equal(ckpt.build_model()(src, tgt), model(src, tgt))


def test_weights_that_do_not_fit_fail_at_load_time(tmp_path):
    """The one fit check runs for our own files and for a bare state_dict with --config."""
    model = init_model("tiny", seed=3)
    state = dict(model.state_dict(), **{"lm_head.bias": torch.zeros(3)})
    del state["encoder_layers.0.norm1.weight"]
    torch.save(state, tmp_path / "bare.pt")
    message = one_line_error(lambda: load_any(tmp_path / "bare.pt", options={"config": model.config.to_dict()}))
    assert "(layout tfm-export) does not fit the model config: missing keys: encoder_layers.0.norm1.weight" in message
    assert "mis-shaped: lm_head.bias (3,) != (64,)" in message
    data = torch.load(save_checkpoint(model, tmp_path / "model.pt"), weights_only=True)
    data["state_dict"] = state
    torch.save(data, tmp_path / "model.pt")
    message = one_line_error(lambda: load_checkpoint(tmp_path / "model.pt"))
    assert "missing keys: encoder_layers.0.norm1.weight" in message and "check the config saved with the weights" in message


def test_a_layout_of_the_wrong_kind_of_path(tmp_path):
    path = save_checkpoint(init_model("tiny", seed=3), tmp_path / "model.pt")
    assert "is not a folder; the marian layout reads a model folder" in one_line_error(
        lambda: load_any(path, layout="marian"))
    assert "layout 'tutorial' reads a file, not the folder" in one_line_error(
        lambda: load_any(tmp_path, layout="tutorial"), ConfigError)
    assert "has no config.json; pass a checkpoint file or a Hugging Face model folder" in one_line_error(
        lambda: load_any(tmp_path))


@dataclass(frozen=True)
class BrokenImporter:
    """An importer that forgets to check anything itself."""

    name: str = "broken"
    reads: str = "file"
    hint: str = "check the broken importer"

    def detect(self, source) -> bool:
        return False

    def load(self, source, options) -> Checkpoint:
        model = init_model("tiny", seed=3)
        state = dict(model.state_dict())
        state["encoder_layers.0.norm1.weight"] = torch.full_like(state["encoder_layers.0.norm1.weight"], float("inf"))
        return Checkpoint(config=model.config, state_dict=state, path=str(source.path))


def test_every_importer_in_the_table_gets_the_final_check(tmp_path, monkeypatch):
    monkeypatch.setitem(IMPORTERS, "broken", BrokenImporter())
    (tmp_path / "any.pt").write_bytes(b"unread")
    message = one_line_error(lambda: load_any(tmp_path / "any.pt", layout="broken"))
    assert message.endswith("has non-finite weights: encoder_layers.0.norm1.weight (32 inf); fix or retrain the model")
