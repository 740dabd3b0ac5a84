"""Whisper folders (tests/whisper_fixtures.py: random weights, the tiny, base.en and large-v3-turbo layouts
at d_model 64) export with `tfm-export FOLDER` and default flags (validation on), and the export equals
transformers' WhisperForConditionalGeneration: the encoder's cross-attention keys/values, the decoder's
logits, and greedy tokens from decoder_start_token_id (a plain greedy loop over transformers' logits with
the folder's suppress_tokens banned; Whisper's prompt and timestamp rules are not part of this)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from whisper_fixtures import LAYOUTS, Layout, whisper_folder  # noqa: E402
from tfm_export.audio.features import load_feature_config  # noqa: E402
from tfm_export.cli import cli  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.model.eager import EagerModel  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.text.tokenizer import tokenizer_from_dict  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
ATOL = 1e-4  # as the export's own validation
STEPS = 20  # greedy tokens compared per row


# CI exports tiny's windows, mels and vocabulary on 2 + 2 layers ("tiny-2x2": the same checks, the export and its
# validation in half the time); the layouts themselves, tiny's 4 + 4, base.en (English-only: also
# tests/test_transcribe.py) and large-v3-turbo (128 mels, 32 encoder layers, the slowest export of the suite), run in
# `make test-long`.
CASES = {"tiny-2x2": Layout(2, 2, 80, True, 1500), **LAYOUTS}
IN_CI = ("tiny-2x2",)


@pytest.fixture(scope="module", params=[pytest.param(name, marks=() if name in IN_CI else pytest.mark.long)
                                        for name in CASES])
def exported(request, tmp_path_factory):
    """(layout, folder, export folder, transformers' model) for each layout, exported by the CLI."""
    base = tmp_path_factory.mktemp(request.param)
    folder = whisper_folder(CASES[request.param], base / "model")
    out = base / "onnx"
    result = CliRunner().invoke(cli, [str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).eval()
    return request.param, folder, out, model


def features(model, batch: int, seed: int = 0) -> np.ndarray:
    """Random features (batch, n_mels, frames) of the model's window."""
    cfg = model.config
    return np.random.default_rng(seed).standard_normal((batch, cfg.num_mel_bins, 2 * cfg.max_source_positions),
                                                       dtype=np.float32)


def test_manifest_declares_features(exported):
    layout, folder, out, model = exported
    manifest = json.loads((out / "manifest.json").read_text())
    encoder = manifest["graphs"]["encoder"]
    frames = 2 * model.config.max_source_positions
    assert encoder["inputs"] == [{"name": "input_features", "dtype": "float32",
                                  "shape": ["batch", CASES[layout].n_mels, frames]}]
    assert encoder["outputs"][0] == {"name": "src_mask", "dtype": "bool", "shape": ["batch", frames // 2]}
    decoder_mask = next(t for t in manifest["graphs"]["decoder"]["inputs"] if t["name"] == "src_mask")
    assert decoder_mask["shape"] == ["src_batch", "src_len"]  # the decoder's contract is unchanged
    assert manifest["features"] == load_feature_config(folder).to_dict()
    assert "features" not in manifest["source"]
    config = manifest["config"]
    assert (config["source"], config["n_mels"], config["n_frames"]) == ("features", CASES[layout].n_mels, frames)
    assert (config["n_encoder_layers"], config["n_decoder_layers"]) == CASES[layout][:2]
    assert manifest["validation"]["greedy"]["equal"]


def test_encoder_attention_adds_no_mask(exported):
    """Every encoder position of a window is real: its self-attention scores get no mask added (an Add of
    (batch, heads, 1500, 1500) per layer in ORT); the decoder's cross-attention keeps src_mask."""
    import onnx

    _, _, out, _ = exported
    nodes = onnx.load(str(out / "encoder.onnx"), load_external_data=False).graph.node
    assert not [n.name for n in nodes if n.op_type == "Where"]
    decoder = onnx.load(str(out / "decoder.onnx"), load_external_data=False).graph.node
    assert [n for n in decoder if n.op_type == "Where"]  # the test sees a mask where there is one


def test_encoder_and_decoder_equal_transformers(exported, record_property):
    _, _, out, model = exported
    runtime = open_export(out, device="cpu")
    x = features(model, 2)
    names = [o.name for o in runtime.encoder.get_outputs()]
    got = dict(zip(names, runtime.encoder.run(names, {"input_features": x})))
    heads = model.config.decoder_attention_heads
    with torch.no_grad():
        memory = model.model.encoder(torch.from_numpy(x)).last_hidden_state  # (batch, src_len, d_model)
    assert got["src_mask"].all() and got["src_mask"].shape == memory.shape[:2]
    worst = {"encoder": 0.0, "decoder": 0.0}
    for i, layer in enumerate(model.model.decoder.layers):
        for part, proj in (("key", layer.encoder_attn.k_proj), ("value", layer.encoder_attn.v_proj)):
            with torch.no_grad():
                ref = proj(memory).view(2, -1, heads, memory.shape[-1] // heads).transpose(1, 2).numpy()
            worst["encoder"] = max(worst["encoder"], float(np.abs(got[f"cross.{i}.{part}"] - ref).max()))
    # the decoder over a whole prefix at once (past_len 0): the last position's logits
    start = model.generation_config.decoder_start_token_id
    ids = np.concatenate([np.full((2, 1), start), np.random.default_rng(1).integers(0, 250, (2, 5))], 1)
    feeds = {"input_ids": ids, **{k: v for k, v in got.items()}}
    for inp in runtime.decoder.get_inputs():
        if inp.name.startswith("past."):
            feeds[inp.name] = np.zeros((2, heads, 0, memory.shape[-1] // heads), np.float32)
    logits = runtime.decoder.run(["logits"], feeds)[0]  # (batch, vocab)
    with torch.no_grad():
        ref = model(input_features=torch.from_numpy(x), decoder_input_ids=torch.from_numpy(ids)).logits[:, -1]
    worst["decoder"] = float(np.abs(logits - ref.numpy()).max())
    record_property("max_abs_diff", worst)
    print(f"max abs diff vs transformers: {worst}")
    assert worst["encoder"] <= ATOL and worst["decoder"] <= ATOL, worst


def reference_greedy(model, x: np.ndarray, steps: int) -> list[list[int]]:
    """A plain greedy loop over transformers' logits from decoder_start_token_id, suppress_tokens banned;
    each row's ids up to (without) EOS."""
    gen = model.generation_config
    ids = torch.full((x.shape[0], 1), gen.decoder_start_token_id)
    with torch.no_grad():
        encoder_outputs = model.model.encoder(torch.from_numpy(x))
        for _ in range(steps):
            logits = model(encoder_outputs=encoder_outputs, decoder_input_ids=ids).logits[:, -1]
            logits[:, gen.suppress_tokens or []] = -float("inf")
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    rows = [row[1:] for row in ids.tolist()]
    return [row[:row.index(gen.eos_token_id)] if gen.eos_token_id in row else row for row in rows]


def test_greedy_tokens_equal_transformers(exported):
    _, _, out, model = exported
    x = features(model, 3, seed=2)
    want = reference_greedy(model, x, STEPS)
    runtime = open_export(out, device="cpu")
    assert runtime.generate_ids(x, max_new_tokens=STEPS) == want
    assert runtime.generate_ids(list(x.astype(np.float64)), max_new_tokens=STEPS) == want  # a list, float64
    assert EagerModel.from_checkpoint(exported[1]).generate_ids(x, max_new_tokens=STEPS) == want
    assert len({tuple(row) for row in want}) > 1, "greedy tokens do not depend on the features"


def test_tokenizer_decodes_as_transformers(exported):
    _, folder, out, model = exported
    manifest = json.loads((out / "manifest.json").read_text())
    ours = tokenizer_from_dict(manifest["tokenizer"], out)
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    ids = reference_greedy(model, features(model, 2, seed=3), STEPS)
    ids.append(theirs("The quick brown fox heard 123.", add_special_tokens=False)["input_ids"])
    for row in ids:
        assert ours.decode(row) == theirs.decode(row, skip_special_tokens=True)


@pytest.mark.parametrize("bad", ["ids", "shape", "dtype", "nan", "empty"])
def test_wrong_features_are_one_input_error(exported, bad):
    _, _, out, model = exported
    x = features(model, 1)
    given = {"ids": [[1, 2, 3]], "shape": x[:, :, :-2], "dtype": x.astype(np.int64), "nan": np.full_like(x, np.nan),
             "empty": x[:0]}[bad]
    runtime = open_export(out, device="cpu")
    with pytest.raises(InputError, match="input_features") as raised:
        runtime.generate_ids(given, max_new_tokens=2)
    if bad == "ids":  # text encoded, given to a speech export: said so, with what to do instead
        assert "not token ids or text" in str(raised.value) and "tfm-export transcribe" in str(raised.value)


def test_features_config_fields_are_checked():
    from tfm_export.config import TransformerConfig

    base = dict(src_vocab_size=10, tgt_vocab_size=10, source="features", n_mels=80, n_frames=3000)
    assert TransformerConfig(**base).src_len == 1500
    assert TransformerConfig(src_vocab_size=10, tgt_vocab_size=10).src_len is None  # token sources: as given
    for bad, match in ((dict(n_frames=3001), "must be even"), (dict(n_mels=0), "n_mels"),
                       (dict(share_embeddings=True), "token source"), (dict(source="audio"), "source"),
                       (dict(encoder_positions="rotary"), "encoder_positions")):
        with pytest.raises(ValueError, match=match):
            TransformerConfig(**{**base, **bad})


def test_preprocessor_config_must_fit_the_model(tmp_path):
    from tfm_export.errors import ConfigError
    from helpers import import_hf

    folder = whisper_folder("base.en", tmp_path / "model")
    checkpoint = import_hf(folder)
    assert checkpoint.config.source == "features" and checkpoint.meta["features"]["feature_size"] == 80
    assert not any(k.endswith("k_proj.bias") for k in checkpoint.state_dict)
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**preprocessor, "feature_size": 128}))
    with pytest.raises(ConfigError, match="mixes two models"):
        import_hf(folder)
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(ConfigError, match="preprocessor_config.json"):
        import_hf(folder)


@pytest.mark.long  # three static-cache exports and the runtime checks: most of a minute, for CI's time
def test_static_cache_and_runtime_checks_take_features(tmp_path):
    """A Whisper export with its static-cache decoders (`--static-slots`): the static cache (greedy and beam
    search) and the server's in-flight rows decode the growing cache's tokens from features, and
    `tfm-export validate` (the runtime checks) decodes random feature windows."""
    from tfm_export.runtime import RuntimeOptions
    from tfm_export.runtime.verify import greedy_in_rows, verify_export

    folder = whisper_folder("base.en", tmp_path / "model")
    out = tmp_path / "onnx"
    result = CliRunner().invoke(cli, [str(folder), "-o", str(out), "--static-slots", "12", "--no-validate"])
    assert result.exit_code == 0, result.output
    growing = open_export(out, "cpu", RuntimeOptions(cuda_graph=False))
    static = open_export(out, "cpu", RuntimeOptions(cuda_graph=True))
    x = np.random.default_rng(3).standard_normal((2, growing.config.n_mels, growing.config.n_frames), dtype=np.float32)
    want = growing.generate_ids(x, 12)
    assert static.generate_ids(x, 12) == want
    assert static.generate_ids(x, 12, num_beams=2) == growing.generate_ids(x, 12, num_beams=2)
    assert greedy_in_rows(static.static_cache, static.source_input(x), 12) == want
    report = verify_export(out)
    assert report["from"] == "random" and report["rows_mismatched"] == [] and report["static_cache_mismatched_rows"] == []
