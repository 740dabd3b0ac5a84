"""Checkpoints people actually have: the tutorial model and nn.Transformer models, mapped onto ours.

Each original module is the oracle: our eager model, the ONNX export and greedy decoding must all
agree with it on a padded source batch.
"""

import itertools

import numpy as np
import onnxruntime as ort
import pytest
import torch

import reference_models as ref
from helpers import run_cli, run_cli_ok
from tfm_export.cli.common import cli_option
from tfm_export.errors import CheckpointError, ConfigError
from tfm_export.model.generate import greedy_decode
from tfm_export.importers import load_any
from tfm_export.runtime import open_export

PAD, BOS, EOS = 0, 1, 2
IDS = {"heads": 4, "src_pad_id": PAD, "bos_id": BOS, "eos_id": EOS}
CLI_IDS = ["--heads", "4", "--src-pad-id", "0", "--bos-id", "1", "--eos-id", "2"]


def tutorial_model(seed=0):
    torch.manual_seed(seed)
    return ref.TutorialTransformer(40, 44, PAD, PAD, embed_size=32, num_layers=2, forward_expansion=2, heads=4,
                                   max_length=30).eval()


def seq2seq_model(batch_first, norm_first, seed=0, maxlen=64, **knobs):
    torch.manual_seed(seed)
    return ref.Seq2SeqTransformer(2, 2, 32, 4, 40, 44, dim_feedforward=48, dropout=0.1, batch_first=batch_first,
                                  norm_first=norm_first, maxlen=maxlen, **knobs).eval()


def padded_batch(seed=1):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (3, 9), generator=gen)
    src[1, 5:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(3, 44, (3, 7), generator=gen)
    tgt[:, 0] = BOS
    return src, tgt


def original_logits_fn(module):
    if isinstance(module, ref.TutorialTransformer):
        return lambda src, tgt: module(src, tgt)
    return lambda src, tgt: ref.seq2seq_logits(module, src, tgt, PAD)


def save(module, path):
    torch.save(module.state_dict(), path)
    return path


SEQ2SEQ = list(itertools.product([False, True], [False, True]))


@pytest.mark.parametrize("make", [tutorial_model] + [
    (lambda bf=bf, nf=nf: seq2seq_model(bf, nf)) for bf, nf in SEQ2SEQ], ids=["tutorial"] + [
    f"nn_transformer-batch_first={bf}-norm_first={nf}" for bf, nf in SEQ2SEQ])
@torch.no_grad()
def test_eager_conversion_matches_the_original(make, tmp_path):
    module = make()
    options = dict(IDS)
    if isinstance(module, ref.Seq2SeqTransformer):
        options["norm_first"] = module.transformer.encoder.layers[0].norm_first
    ckpt = load_any(save(module, tmp_path / "model.pt"), options=options)
    ours = ckpt.build_model()
    src, tgt = padded_batch()
    expected = original_logits_fn(module)(src, tgt)
    assert (ours(src, tgt) - expected).abs().max() <= 1e-4
    assert greedy_decode(ours, src, 12) == ref.full_greedy(original_logits_fn(module), src, BOS, EOS, PAD, 12)
    expected_layout = "tutorial" if isinstance(module, ref.TutorialTransformer) else "nn_transformer"
    assert ckpt.meta["layout"] == expected_layout


@pytest.mark.parametrize("knobs, options", [({"activation": "gelu"}, {"activation": "gelu"}),
                                           ({"bias": False}, {})], ids=["gelu", "bias=False"])
@torch.no_grad()
def test_nn_transformer_variants(knobs, options, tmp_path):
    module = seq2seq_model(True, False, **knobs)
    ckpt = load_any(save(module, tmp_path / "m.pt"), options=IDS | options)
    src, tgt = padded_batch()
    assert (ckpt.build_model()(src, tgt) - ref.seq2seq_logits(module, src, tgt, PAD)).abs().max() <= 1e-4
    assert ckpt.meta["detected"]["bias"] == knobs.get("bias", True)


@torch.no_grad()
def test_official_tutorial_as_published(tmp_path):
    """The tutorial's own settings (maxlen 5000, sequence-first) against its own translate()."""
    torch.manual_seed(7)
    module = ref.Seq2SeqTransformer(2, 2, 32, 4, 40, 44, dim_feedforward=48).eval()
    ckpt = load_any(save(module, tmp_path / "model.pt"), options=IDS)
    # Its float32 table drifts from the exact sinusoids by up to ~4e-4 near row 5000; still detected.
    assert (ckpt.config.positions, ckpt.config.max_len) == ("sinusoidal", 5000)
    ours = ckpt.build_model()
    src, tgt = padded_batch()
    assert (ours(src, tgt) - ref.seq2seq_logits(module, src, tgt, PAD)).abs().max() <= 1e-4
    sources = [[t for t in row.tolist() if t != PAD] for row in src]
    batched = greedy_decode(ours, src, max(len(s) for s in sources) + 4)  # one padded batch
    for row, source in zip(batched, sources):  # the tutorial: one sentence at a time, max_len = n + 5
        assert row[: len(source) + 4] == ref.translate_ids(module, source, BOS, EOS)


@pytest.mark.parametrize("table", ["not saved", "trained"])
@torch.no_grad()
def test_position_tables_that_are_not_the_tutorials(table, tmp_path):
    module = seq2seq_model(False, False, seed=2)
    options = dict(IDS)
    if table == "trained":
        module.positional_encoding.pos_embedding.normal_()
    state = module.state_dict()
    if table == "not saved":  # register_buffer(..., persistent=False)
        del state["positional_encoding.pos_embedding"]
        options["max_len"] = 64
    torch.save(state, tmp_path / "m.pt")
    ckpt = load_any(tmp_path / "m.pt", options=options)
    assert ckpt.config.positions == ("sinusoidal" if table == "not saved" else "learned")
    assert ckpt.config.max_len == 64 and ckpt.meta["detected"]["positions"].startswith(ckpt.config.positions)
    src, tgt = padded_batch()
    assert (ckpt.build_model()(src, tgt) - ref.seq2seq_logits(module, src, tgt, PAD)).abs().max() <= 1e-4


@torch.no_grad()
def test_training_checkpoint_with_dataparallel_prefix(tmp_path):
    module = tutorial_model(5)
    state = {f"module.{k}": v for k, v in module.state_dict().items()}
    optimizer = torch.optim.Adam(module.parameters())
    torch.save({"epoch": 3, "model_state_dict": state, "optimizer_state_dict": optimizer.state_dict()},
               tmp_path / "ckpt.pt")
    ckpt = load_any(tmp_path / "ckpt.pt", options=IDS)
    assert ckpt.meta["detected"]["wrapper"] == "['model_state_dict']"
    assert ckpt.meta["detected"]["prefix"] == "module."
    src, tgt = padded_batch()
    assert (ckpt.build_model()(src, tgt) - module(src, tgt)).abs().max() <= 1e-4


@torch.no_grad()
def test_options_that_the_layout_fixes_or_the_weights_limit(tmp_path):
    path = save(tutorial_model(), tmp_path / "m.pt")
    # The library names options as data (its own terms); the CLI renders them as flags.
    with pytest.raises(ConfigError, match=r'options\["norm_first"\]=True does not apply: the tutorial layout'
                       ) as info:
        load_any(path, options=IDS | {"norm_first": True})
    assert info.value.options == {"norm_first": True} and info.value.render(cli_option).startswith("--norm-first does")
    with pytest.raises(ConfigError, match=r'options\["activation"\]=\'gelu\' does not apply') as info:
        load_any(path, options=IDS | {"activation": "gelu"})
    assert info.value.render(cli_option).startswith("--activation gelu does not apply")
    with pytest.raises(ConfigError, match=r'options\["max_len"\]=31 does not fit the position tables of 30') as info:
        load_any(path, options=IDS | {"max_len": 31})
    assert info.value.render(cli_option).startswith("--max-len 31 does not fit the position tables of 30")
    with pytest.raises(ConfigError, match="divisible by config.n_heads"):
        load_any(path, options=IDS | {"heads": 5})
    # Agreeing with the code is fine, None means "not given", and a shorter table is exact.
    ckpt = load_any(path, options=IDS | {"norm_first": False, "tgt_pad_id": None, "max_len": 12})
    assert ckpt.config.max_len == 12 and ckpt.config.tgt_pad_id == PAD
    src, tgt = padded_batch()
    assert (ckpt.build_model()(src, tgt) - tutorial_model()(src, tgt)).abs().max() <= 1e-4


@pytest.fixture(scope="module", params=["tutorial", "nn_transformer"])
def exported(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    # nn_transformer: pre-LN and the tutorial's 5000-row table, cut by --max-len (validation runs
    # sources of max_len tokens, slow at 5000).
    module = tutorial_model(3) if request.param == "tutorial" else seq2seq_model(True, True, seed=3, maxlen=5000)
    path = save(module, folder / "model.pt")
    extra = ["--norm-first", "--max-len", "128"] if request.param == "nn_transformer" else []
    result = run_cli_ok(path, *CLI_IDS, *extra)
    assert f"layout {request.param}" in result.output and "options used" in result.output
    assert request.param == "tutorial" or "max_len 128" in result.output
    return module, folder / "model_onnx"


@torch.no_grad()
def test_onnx_logits_match_the_original(exported):
    module, out = exported
    src, tgt = padded_batch(seed=5)
    expected = original_logits_fn(module)(src, tgt)
    enc = ort.InferenceSession(str(out / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(out / "decoder.onnx"), providers=["CPUExecutionProvider"])
    enc_out = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"src_ids": src.numpy()})))
    empty = np.zeros((3, 4, 0, 8), np.float32)
    for t in range(1, tgt.shape[1] + 1):
        feeds = {i.name: enc_out.get(i.name, empty) for i in dec.get_inputs()}
        feeds["input_ids"] = tgt[:, :t].numpy()
        logits = dec.run(["logits"], feeds)[0]
        assert np.abs(logits - expected[:, t - 1].numpy()).max() <= 1e-4


@torch.no_grad()
def test_onnx_greedy_matches_original_full_recomputation(exported):
    module, out = exported
    src, _ = padded_batch(seed=6)
    sources = [[int(t) for t in row if t != PAD] for row in src]
    got = open_export(out, device="cpu").generate_ids(sources, max_new_tokens=15)
    assert got == ref.full_greedy(original_logits_fn(module), src, BOS, EOS, PAD, 15)


def test_missing_heads_names_the_option(tmp_path):
    path = save(tutorial_model(), tmp_path / "m.pt")
    with pytest.raises(ConfigError, match=r'number of heads cannot be read from the weights; pass options\["heads"\]'):
        load_any(path, options={"src_pad_id": 0, "bos_id": 1, "eos_id": 2})
    result = run_cli(path, "--src-pad-id", "0")
    assert result.exit_code == 1 and "pass --heads N" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "m_onnx").exists()


def test_leftover_and_missing_keys_are_listed(tmp_path):
    state = tutorial_model().state_dict()
    state["decoder.extra.weight"] = torch.zeros(2)
    del state["decoder.layers.1.norm.bias"]
    torch.save(state, tmp_path / "m.pt")
    with pytest.raises(CheckpointError) as info:
        load_any(tmp_path / "m.pt", options=IDS)
    assert "missing source keys: decoder.layers.1.norm.bias" in str(info.value)
    assert "keys left over: decoder.extra.weight" in str(info.value)


def test_unknown_layout_and_wrong_override(tmp_path):
    torch.save({"something.weight": torch.zeros(2, 2)}, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match="cannot tell the layout"):
        load_any(tmp_path / "odd.pt", options=IDS)
    torch.save({"encoder.transformer_layers.0.attention.W_q.weight": torch.zeros(2, 2)}, tmp_path / "v2.pt")
    with pytest.raises(CheckpointError, match="W_q/W_k/W_v variant .* instead of excluding them"):
        load_any(tmp_path / "v2.pt", options=IDS)
    path = save(tutorial_model(), tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match="cannot convert .* as layout nn_transformer"):
        load_any(path, layout="nn_transformer", options=IDS)
    with pytest.raises(ConfigError, match="unknown layout 'keras'"):
        load_any(path, layout="keras", options=IDS)
    assert load_any(path, layout="tutorial", options=IDS).meta["layout"] == "tutorial"


def test_pickled_module_needs_trust(tmp_path):
    module = tutorial_model(4)
    torch.save(module, tmp_path / "whole.pt")
    with pytest.raises(CheckpointError, match="needs code to load"):
        load_any(tmp_path / "whole.pt", options=IDS)
    ckpt = load_any(tmp_path / "whole.pt", trust_pickle=True, options=IDS)
    assert ckpt.meta["detected"]["wrapper"] == "pickled module"
    src, tgt = padded_batch()
    with torch.no_grad():
        assert (ckpt.build_model()(src, tgt) - module(src, tgt)).abs().max() <= 1e-4
    # Trust does not turn a broken file into a traceback.
    (tmp_path / "broken.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:200])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_any(tmp_path / "broken.pt", trust_pickle=True, options=IDS)


def test_trusted_pickle_whose_classes_are_gone_says_so(tmp_path, monkeypatch):
    """A module pickled from the user's own script: unpickling needs that script's classes."""
    import sys
    import types

    script = types.ModuleType("users_train_script")
    exec("import torch\nclass Net(torch.nn.Module):\n"
         "    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(2, 2)\n",
         script.__dict__)
    monkeypatch.setitem(sys.modules, "users_train_script", script)
    torch.save(script.Net(), tmp_path / "whole.pt")
    monkeypatch.delitem(sys.modules, "users_train_script")
    with pytest.raises(CheckpointError, match=r"needs the code that defined its classes .*users_train_script") as info:
        load_any(tmp_path / "whole.pt", trust_pickle=True, options=IDS)
    assert "\n" not in str(info.value) and "state_dict()" in str(info.value)
