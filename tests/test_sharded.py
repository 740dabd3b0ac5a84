"""Sharded Hugging Face weights: model.safetensors.index.json and pytorch_model.bin.index.json with their shards
read into the one state dict, exported equal to the unsharded folder; a broken index or a missing shard is one
clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from helpers import run_cli
from marian_fixtures import marian, save

from tfm_export.errors import CheckpointError
from tfm_export.importers import load_model
from tfm_export.importers.hf_folder import read_weights


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """One random Marian model saved whole, in safetensors shards, and in .bin shards (as transformers 4 wrote
    them: transformers 5 writes safetensors only, so the .bin shards are the safetensors shards re-saved)."""
    from safetensors.torch import load_file

    model = marian(vocab=40, seed=3)
    whole = save(model, tmp_path_factory.mktemp("whole"))
    sharded = tmp_path_factory.mktemp("sharded")
    model.save_pretrained(sharded, max_shard_size="20KB")
    pickles = tmp_path_factory.mktemp("pickles")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    names = {shard: shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
             for shard in set(index["weight_map"].values())}
    for shard, name in names.items():
        torch.save(load_file(sharded / shard), pickles / name)
    index["weight_map"] = {k: names[v] for k, v in index["weight_map"].items()}
    (pickles / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    for name in ("config.json", "generation_config.json"):
        shutil.copy2(sharded / name, pickles / name)
    return {"whole": whole, "sharded": sharded, "pickles": pickles}


def test_shards_read_into_the_same_state_dict(folders):
    shards = sorted(p.name for p in folders["sharded"].glob("model-*.safetensors"))
    assert len(shards) >= 3 and not (folders["sharded"] / "model.safetensors").exists()
    whole = read_weights(folders["whole"])
    for kind in ("sharded", "pickles"):
        state = read_weights(folders[kind])
        assert state.keys() == whole.keys()
        assert all(torch.equal(state[k], whole[k]) for k in whole), kind
        converted = load_model(folders[kind]).state_dict
        reference = load_model(folders["whole"]).state_dict
        assert all(torch.equal(converted[k], reference[k]) for k in reference)


def test_sharded_folders_export_as_the_whole_one(folders, tmp_path):
    graphs = {}
    for kind in ("whole", "sharded", "pickles"):
        out = tmp_path / kind
        result = run_cli(folders[kind], "-o", out, *(() if kind == "sharded" else ("--no-validate",)))
        assert result.exit_code == 0, result.output
        manifest = json.loads((out / "manifest.json").read_text())
        graphs[kind] = {name: g["sha256"] for name, g in manifest["graphs"].items()}
        if kind == "sharded":
            assert manifest["validation"]["greedy"]["equal"]
            assert sorted(manifest["source"]["origin"]["sha256"]) == sorted(
                p.name for p in folders["sharded"].glob("model-*.safetensors"))
    assert graphs["sharded"] == graphs["whole"] == graphs["pickles"]


@pytest.mark.parametrize("kind, index", [("sharded", "model.safetensors.index.json"),
                                         ("pickles", "pytorch_model.bin.index.json")])
def test_broken_indexes_and_missing_shards_are_one_line(folders, tmp_path, kind, index):
    folder = tmp_path / kind
    shutil.copytree(folders[kind], folder)
    data = json.loads((folder / index).read_text())
    last = sorted(set(data["weight_map"].values()))[-1]
    (folder / last).unlink()
    with pytest.raises(CheckpointError, match=f"names the shard {last}, which is missing"):
        read_weights(folder)
    result = run_cli(folder, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert [ln for ln in result.output.splitlines() if ln.startswith("Error:")] == [
        f"Error: {folder / index} names the shard {last}, which is missing from {folder}; re-download the model"]
    shutil.copy2(folders[kind] / last, folder / last)
    data["weight_map"] = {**data["weight_map"], "extra.weight": "../model.safetensors"}
    (folder / index).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="not a file beside it"):
        read_weights(folder)
    data["weight_map"] = {**data["weight_map"], "extra.weight": last}
    (folder / index).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"names tensors its shards do not hold \(extra.weight\)"):
        read_weights(folder)
    (folder / index).write_text("{}")
    with pytest.raises(CheckpointError, match="has no weight_map"):
        read_weights(folder)
