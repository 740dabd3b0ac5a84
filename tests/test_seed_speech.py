"""#39, seed 001: a user's own speech Transformer (filterbank frames through a Linear front end, Conv1d
feed-forward, post-LN, masks from frame lengths) exported from its plain state_dict.

The tutorial's model (tests/seed_speech.py), trained briefly on synthetic frames, is saved as its readers save
it; `tfm-export model.pt` recognises the layout (speech_tutorial), maps it onto the one config (source
"frames"), validates the graphs against our eager model, and the export's greedy and beam tokens on
held-out utterances of different lengths, decoded in one padded batch, equal the tutorial's own forward
decoding each utterance alone. `generate --features` feeds .npy files; bad files are one line each.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import seed_speech as ss
from helpers import run_cli, run_cli_ok
from tfm_export.config import TransformerConfig
from tfm_export.errors import CheckpointError, InputError
from tfm_export.export.specs import TOKEN_IDS, frames
from tfm_export.importers import load_any
from tfm_export.manifest import load_manifest
from tfm_export.model.eager import EagerModel
from tfm_export.runtime import open_export
from tfm_export.runtime.sources import read_feature_file

STEPS = 12  # new tokens per utterance
BEAMS = 3
OPTIONS = {"heads": ss.HEADS, "bos_id": ss.BOS, "eos_id": ss.EOS}


@pytest.fixture(scope="module")
def tutorial():
    return ss.train_001(ss.seed_001())


@pytest.fixture(scope="module")
def state_dict_file(tutorial, tmp_path_factory):
    return ss.save_state_dict(tutorial, tmp_path_factory.mktemp("seed001") / "model.pt")


@pytest.fixture(scope="module")
def export(state_dict_file):
    out = state_dict_file.parent / "model_onnx"
    run_cli_ok(state_dict_file, "--heads", ss.HEADS, "--bos-id", ss.BOS, "--eos-id", ss.EOS, "-o", out)
    return out


@pytest.fixture(scope="module")
def utterances():
    return ss.held_out(8)


def test_state_dict_maps_onto_the_frames_source(state_dict_file):
    checkpoint = load_any(state_dict_file, options=OPTIONS)
    cfg = checkpoint.config
    assert checkpoint.meta["layout"] == "speech_tutorial"
    assert (cfg.source, cfg.n_feats, cfg.d_model, cfg.d_ff) == ("frames", ss.FBANK_DIM, ss.HIDDEN, ss.DFF)
    assert (cfg.positions, cfg.encoder_positions, cfg.max_len) == ("sinusoidal", None, ss.TGT_LEN)
    assert (cfg.norm_first, cfg.scale_embeddings, cfg.attention_scale, cfg.final_norm) == (
        False, False, "head_dim", False)
    # Conv1d (d_ff, d_model, 1) became the Linear (d_ff, d_model) it computes
    state = torch.load(state_dict_file, weights_only=True)
    assert torch.equal(checkpoint.state_dict["encoder_layers.1.ffn.fc1.weight"],
                       state["encoder.layers.1.poswise_ffn.conv1.weight"][:, :, 0])


def test_encoder_input_is_declared_as_variable_length_frames(export):
    manifest = load_manifest(export)
    assert manifest.encoder_input == frames(manifest.config)
    assert manifest.encoder_input.to_dict() == {"name": "input_frames", "dtype": "float32",
                                                "shape": ["batch", "src_len", ss.FBANK_DIM]}
    report = manifest.validation
    assert report["greedy"]["equal"] and all(row["ok"] for row in report["outputs"].values())


def test_greedy_and_beam_equal_the_tutorials_own_decoding(tutorial, export, utterances):
    """One padded batch of different lengths on ONNX Runtime against the tutorial, one utterance at a time."""
    model = open_export(export, device="cpu")
    sources = [x for x, _ in utterances]
    assert len({len(x) for x in sources}) > 2  # the batch is padded and masked
    greedy = model.generate_ids(sources, max_new_tokens=STEPS)
    beam = model.generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS)
    assert greedy == [ss.tutorial_greedy(tutorial, x, STEPS) for x in sources]
    assert beam == [ss.tutorial_beam(tutorial, x, STEPS, BEAMS) for x in sources]
    # the model learned the words: the decoding is not trivial
    assert sum(ids == words for ids, (_, words) in zip(greedy, utterances)) >= len(utterances) - 2


def test_eager_runner_reads_the_same_frames(state_dict_file, export, utterances):
    sources = [x for x, _ in utterances[:4]]
    eager = EagerModel.from_checkpoint(load_any(state_dict_file, options=OPTIONS))
    assert eager.generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS) == open_export(
        export, device="cpu").generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS)


def test_generate_features_cli(tutorial, export, utterances, tmp_path):
    paths = []
    for i, (x, _) in enumerate(utterances[:3]):
        paths += ["--features", tmp_path / f"u{i}.npy"]
        np.save(paths[-1], x)
    result = run_cli_ok("generate", export, *paths, "--num-beams", BEAMS, "--json", "--device", "cpu")
    records = [json.loads(line) for line in result.output.splitlines()]
    assert [r["source"] for r in records] == [str(p) for p in paths[1::2]]
    assert [r["ids"] for r in records] == [ss.tutorial_beam(tutorial, x, STEPS, BEAMS) for x, _ in utterances[:3]]


def test_generate_features_batch_file(export, utterances, tmp_path):
    """A (sources, frames, n_feats) file: one source per row, all of its frames real."""
    short = min(len(x) for x, _ in utterances[:2])
    np.save(tmp_path / "two.npy", np.stack([x[:short] for x, _ in utterances[:2]]))
    lines = run_cli_ok("generate", export, "--features", tmp_path / "two.npy", "--device", "cpu").output.splitlines()
    want = open_export(export, device="cpu").generate_ids([x[:short] for x, _ in utterances[:2]])
    assert lines == [f"{tmp_path / 'two.npy'}[{i}]\t{' '.join(map(str, ids))}" for i, ids in enumerate(want)]


BAD_FEATURES = {
    "wrong n_feats": (lambda p: np.save(p, np.zeros((5, 40), np.float32)), "holds float32 (5, 40)"),
    "not .npy": (lambda p: p.write_text("0.1 0.2\n"), "is not a .npy array file"),
    "integers": (lambda p: np.save(p, np.zeros((5, ss.FBANK_DIM), np.int64)), "holds int64"),
    "4-d": (lambda p: np.save(p, np.zeros((1, 1, 5, ss.FBANK_DIM), np.float32)), "(1, 1, 5, 80)"),
    "NaN": (lambda p: np.save(p, np.full((5, ss.FBANK_DIM), np.nan, np.float32)), "NaN or infinite"),
    "too long": (lambda p: np.save(p, np.zeros((ss.TGT_LEN + 1, ss.FBANK_DIM), np.float32)), "more than the model's max_len"),
    "no frames": (lambda p: np.save(p, np.zeros((0, ss.FBANK_DIM), np.float32)), "(0, 80)"),
}


@pytest.mark.parametrize("case", BAD_FEATURES)
def test_bad_features_file_is_one_line(export, tmp_path, case):
    write, expected = BAD_FEATURES[case]
    path = tmp_path / "x.npy"
    write(path)
    result = run_cli("generate", export, "--features", path, "--device", "cpu")
    assert result.exit_code != 0 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.output


def test_token_export_refuses_a_features_file(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((3, 8), np.float32))
    with pytest.raises(InputError, match="reads token ids"):
        read_feature_file(tmp_path / "x.npy", TOKEN_IDS)


def test_python_api_refuses_ids_for_a_frames_export(export):
    with pytest.raises(InputError, match=r"reads float features \(input_frames: \(frames, 80\) a source\), not token ids"):
        open_export(export, device="cpu").generate_ids([[3, 4, 5]])


@pytest.mark.parametrize("changes, message", [
    ({}, r"config.n_feats must be an integer of at least 1 with a frames source, got 0"),
    ({"n_feats": 80, "share_embeddings": True}, "share_embeddings needs a token source"),
])
def test_frames_config_is_checked(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, source="frames", **changes)


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update({"encoder.layers.0.poswise_ffn.conv1.weight":
                         s["encoder.layers.0.poswise_ffn.conv1.weight"].repeat(1, 1, 3)}), "not a Conv1d of kernel size 1"),
    (lambda s: s.update({"frontend.weight": s["frontend.weight"][:, :, None]}), "frontend is not one nn.Linear"),
])
def test_unmappable_variants_are_one_line(state_dict_file, tmp_path, change, message):
    state = torch.load(state_dict_file, weights_only=True)
    change(state)
    torch.save(state, tmp_path / "variant.pt")
    with pytest.raises(CheckpointError, match=message) as info:
        load_any(tmp_path / "variant.pt", options=OPTIONS)
    assert "\n" not in str(info.value)


def test_cuda_graph_buckets_pad_frames_as_the_runtime_does(export):
    """Capturing on CUDA pads sources to a bucket of lengths (runtime.states.static): frames with NaN, the padding the
    encoder masks (not the token padding id). The bucketing alone, on any machine."""
    from types import SimpleNamespace

    from tfm_export.runtime.states.static import SRC_BUCKET, StaticCache

    config = load_manifest(export).config
    src = np.zeros((2, 3, ss.FBANK_DIM), np.float32)
    padded = StaticCache._bucket(SimpleNamespace(capture=True, config=config), src)
    assert padded.shape == (2, min(config.max_len, SRC_BUCKET), ss.FBANK_DIM)
    assert not np.isnan(padded[:, :3]).any() and np.isnan(padded[:, 3:]).all()
