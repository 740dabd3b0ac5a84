"""#42: a user's own architecture exported through its live module and two callables.

Seed 004 (per-head projectors in Python lists, shared blocks, no encoder residuals), fixed to run and
trained briefly on reversing digits, exports through the Python API and through the CLI's adapter; its
ONNX greedy and beam tokens equal an eager greedy and beam search over the same callables written here
on held-out sources. Seed 003's encoder-only classifier exports as one graph whose outputs equal eager.
Seed 000 (tests/reference_models.py) through the generic path gives the tokens of its native export.
The plain state_dicts of 003 and 004 get errors that say what they are and point at this path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import decoding_oracle as oracle
import reference_models as ref
import seed_models as sm
from seed_models import held_out
from tfm_export.cli import cli
from tfm_export.errors import CheckpointError, ConfigError, InputError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.export.module_export import export_module, load_adapter
from tfm_export.importers import load_any
from tfm_export.manifest import load_manifest
from tfm_export.runtime import open_export

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12  # new tokens per held-out source
BEAMS = 3


# ---------------------------------------------------------------- the oracle: eager decoding over the callables


@torch.no_grad()
def _start(module, encode, source):
    src = torch.tensor([source])
    mask = src != sm.PAD
    return encode(module, src, mask), mask


@torch.no_grad()
def _next_logp(module, decode, memory, mask, prefixes: list[list[int]]) -> torch.Tensor:
    """(len(prefixes), vocab) float64 log-probabilities of the token after each prefix (BOS first)."""
    tgt = torch.tensor(prefixes)
    n = tgt.shape[0]
    logits = decode(module, tgt, memory.expand(n, *memory.shape[1:]), mask.expand(n, -1))
    logits = logits[:, -1] if logits.dim() == 3 else logits
    return torch.log_softmax(logits.double(), dim=-1)


def eager_greedy(module, encode, decode, source, steps=STEPS, bos=sm.BOS, eos=sm.EOS) -> list[int]:
    memory, mask = _start(module, encode, source)
    return oracle.greedy(lambda prefixes: _next_logp(module, decode, memory, mask, prefixes), steps, bos, eos)


def eager_beam(module, encode, decode, source, steps=STEPS, k=BEAMS, bos=sm.BOS, eos=sm.EOS) -> list[int]:
    """decoding_oracle.beam (transformers' rules) over the callables."""
    memory, mask = _start(module, encode, source)
    return oracle.beam(lambda prefixes: _next_logp(module, decode, memory, mask, prefixes), steps, k, bos, eos)


# ---------------------------------------------------------------- 004: the Python API and the CLI adapter


# trained_004 and api_004 (seed 004 trained, exported through the Python API): conftest.py, built once a run.


def test_004_state_dict_loses_the_per_head_weights(trained_004):
    """The point of the generic path: state_dict() of 004 lacks every q/k/v projector."""
    keys = trained_004.state_dict()
    assert not any("query" in k or "key_linear" in k for k in keys)
    assert len(sm.all_parameters(trained_004)) > len(list(trained_004.parameters()))


def test_004_manifest_says_the_decoder_has_no_cache(api_004):
    out, manifest = api_004
    assert set(manifest.graphs) == {"encoder", "decoder_nocache"}
    assert load_manifest(out).source["decoder"] == "nocache"
    spec = manifest.graphs["decoder_nocache"].spec
    assert spec.input_names() == ["tgt_ids", "memory", "src_mask"] and spec.output_names() == ["logits"]
    assert spec.tensor("logits").shape == ("batch", sm.VOCAB)
    report = manifest.validation
    assert all(report[name]["sources"] == report[name]["equal"] == 4 for name in ("greedy", "beam"))
    assert report["greedy"]["path_max_abs"] <= 1e-4 and report["beam"]["path_max_abs"] <= 1e-4
    assert all(row["ok"] for row in report["outputs"].values())


def test_004_onnx_greedy_and_beam_equal_eager(trained_004, api_004):
    sources = held_out()
    model = open_export(api_004[0], device="cpu")
    greedy = [eager_greedy(trained_004, sm.encode_004, sm.decode_004, s) for s in sources]
    beam = [eager_beam(trained_004, sm.encode_004, sm.decode_004, s) for s in sources]
    assert model.generate_ids(sources, max_new_tokens=STEPS) == greedy
    assert model.generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS) == beam
    # Trained: it does not repeat one token (it learnt something of reversing digits).
    assert sum(len(set(ids)) > 1 for ids in greedy) >= len(sources) // 2, greedy
    # Sampling goes through the same state (the strategies read its logits).
    assert len(model.generate(sources[:2], do_sample=True, seed=3, max_new_tokens=4)) == 2


def test_004_cli_adapter_from_the_pickled_module(trained_004, api_004, tmp_path):
    path = tmp_path / "m004.pt"
    torch.save(trained_004, path)  # whole: its classes import as seed_models.*
    out = tmp_path / "cli_onnx"
    result = CliRunner().invoke(cli, [str(path), "--trust-pickle", "--adapter", "seed_models:SEED_004",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "greedy tokens equal on 4/4 sources" in result.output and "decoder_nocache.onnx" in result.output
    sources = held_out()
    assert (open_export(out, device="cpu").generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS)
            == open_export(api_004[0], device="cpu").generate_ids(sources, max_new_tokens=STEPS, num_beams=BEAMS))
    shown = CliRunner().invoke(cli, ["generate", str(out), "--ids", " ".join(map(str, sources[0])), "--device", "cpu"])
    assert shown.exit_code == 0, shown.output
    assert " ".join(map(str, eager_greedy(trained_004, sm.encode_004, sm.decode_004, sources[0]))) in shown.output


def test_004_plain_state_dict_and_pickle_errors(trained_004, tmp_path):
    torch.save(trained_004.state_dict(), tmp_path / "state.pt")
    with pytest.raises(CheckpointError, match="cannot tell the layout .* no query/key/value weights .* --adapter"):
        load_any(tmp_path / "state.pt")
    result = CliRunner().invoke(cli, [str(tmp_path / "state.pt"), "--bos-id", "1"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--adapter package.module:object" in result.output and "--layout" not in result.output
    torch.save(trained_004, tmp_path / "whole.pt")
    with pytest.raises(CheckpointError, match=r"pickled Transformer that keeps layers in plain Python lists "
                                              r"\(encoder.encoder_blocks.0.multi_head_attention.query_linear_projectors"):
        load_any(tmp_path / "whole.pt", trust_pickle=True)


def test_adapter_refusals_are_one_line(tmp_path):
    torch.save(sm.seed_004(), tmp_path / "whole.pt")
    torch.save(sm.seed_004().state_dict(), tmp_path / "state.pt")
    cases = [("no_such_package.adapters:ADAPTER", "whole.pt", "cannot import the adapter's module 'no_such_package.adapters'"),
             ("seed_models:CONFIG_003", "whole.pt", "has no encode function"),
             ("seed_models:MISSING", "whole.pt", "seed_models has no 'MISSING'"),
             ("seed_models", "whole.pt", "--adapter must be package.module:object"),
             ("seed_models:SEED_004", "state.pt", "not a pickled module")]
    for adapter, name, message in cases:
        result = CliRunner().invoke(cli, [str(tmp_path / name), "--trust-pickle", "--adapter", adapter,
                                          "-o", str(tmp_path / "out")])
        assert result.exit_code != 0 and message in result.output, (adapter, result.output)
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 2
    result = CliRunner().invoke(cli, [str(tmp_path / "whole.pt"), "--adapter", "seed_models:SEED_004"])
    assert result.exit_code == 1 and "pass --trust-pickle" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "whole_onnx").exists()
    with pytest.raises(ConfigError, match="needs its special ids"):
        export_module(sm.seed_004(), sm.encode_004, sm.decode_004, out=tmp_path / "x", src_vocab_size=13, max_len=8)
    assert load_adapter("seed_models:SEED_004").options["bos_id"] == sm.BOS


# ---------------------------------------------------------------- 003: encoder-only


def test_003_encoder_only_outputs_equal_eager(tmp_path):
    module = sm.seed_003()
    torch.save(module.state_dict(), tmp_path / "state.pt")
    with pytest.raises(CheckpointError, match="encoder-only model with a classification head "
                                              r"\(classifier.weight: 3 outputs\).* --adapter"):
        load_any(tmp_path / "state.pt")
    out = tmp_path / "cls_onnx"
    manifest = export_module(module, sm.encode_003, out=out, src_vocab_size=sm.CONFIG_003.vocab_size,
                             max_len=sm.CONFIG_003.max_position_embeddings, output_names=["logits"])
    assert set(manifest.graphs) == {"encoder"} and manifest.graphs["encoder"].spec.output_names() == ["logits"]
    sources = [[5, 9, 13, 2, 7], [8, 3, 3, 41, 6], [11, 12, 14, 15, 49]]
    model = open_export(out, device="cpu")
    got = model.run(sources)["logits"]
    with torch.no_grad():
        want = module(torch.tensor(sources)).numpy()
    assert got.shape == (3, 3) and np.allclose(got, want, atol=1e-5)
    with pytest.raises(InputError, match="encoder-only"):
        model.generate_ids(sources)
    # The CLI: the pickled classifier through its adapter, then `tfm-export run`.
    torch.save(module, tmp_path / "cls.pt")
    result = CliRunner().invoke(cli, [str(tmp_path / "cls.pt"), "--trust-pickle", "--adapter", "seed_models:SEED_003",
                                      "-o", str(tmp_path / "cli_onnx")])
    assert result.exit_code == 0 and "encoder.logits: max abs diff" in result.output, result.output
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "cli_onnx"), "--ids", "5 9 13 2 7", "--ids", "8,3,3,41,6",
                                      "--device", "cpu"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.strip().splitlines()]
    assert [r["ids"] for r in rows] == sources[:2] and np.allclose([r["logits"] for r in rows], want[:2], atol=1e-5)
    result = CliRunner().invoke(cli, ["generate", str(out), "--ids", "5 9", "--device", "cpu"])
    assert result.exit_code == 1 and "encoder-only" in result.output and "tfm-export run" in result.output


def test_what_an_unmatched_state_dict_looks_like(tmp_path):
    """A feature front end (no source embedding) is named; an unrecognised one keeps the --layout hint."""
    speech = {"encoder.conv1.weight": torch.zeros(8, 4, 3), "encoder.layers.0.self_attn.q_proj.weight": torch.zeros(8, 8),
              "decoder.embed_tokens.weight": torch.zeros(10, 8)}
    torch.save(speech, tmp_path / "speech.pt")
    with pytest.raises(CheckpointError, match="feature front end .* --adapter"):
        load_any(tmp_path / "speech.pt")
    torch.save({"encoder.emb.weight": torch.zeros(4, 2), "decoder.emb.weight": torch.zeros(4, 2),
                "decoder.attn.keys.weight": torch.zeros(2, 2)}, tmp_path / "odd.pt")
    result = CliRunner().invoke(cli, [str(tmp_path / "odd.pt")])
    assert result.exit_code == 1 and "pass --layout NAME, one of tutorial, nn_transformer" in result.output
    assert "--adapter" in result.output


# ---------------------------------------------------------------- 000: the generic path equals the native export


def encode_000(model, src_ids, src_mask):
    return model.encoder(src_ids, src_mask[:, None, None, :])


def decode_000(model, tgt_ids, memory, src_mask):
    return model.decoder(tgt_ids, memory, src_mask[:, None, None, :], model.make_trg_mask(tgt_ids))


def test_000_generic_path_equals_native_export(tmp_path):
    torch.manual_seed(3)
    module = ref.TutorialTransformer(40, 44, 0, 0, embed_size=32, num_layers=2, forward_expansion=2, heads=4,
                                     max_length=30).eval()
    torch.save(module.state_dict(), tmp_path / "m.pt")
    checkpoint = load_any(tmp_path / "m.pt", options={"heads": 4, "src_pad_id": 0, "bos_id": 1, "eos_id": 2})
    export_model(checkpoint, tmp_path / "native", ExportOptions())
    export_module(module, encode_000, decode_000, out=tmp_path / "generic", src_vocab_size=40, max_len=30,
                  bos_id=1, eos_id=2, src_pad_id=0)
    gen = torch.Generator().manual_seed(6)
    sources = [torch.randint(3, 40, (n,), generator=gen).tolist() for n in (9, 5, 2, 7)]
    native, generic = open_export(tmp_path / "native", device="cpu"), open_export(tmp_path / "generic", device="cpu")
    for options in ({}, {"num_beams": BEAMS}):
        assert generic.generate_ids(sources, max_new_tokens=15, **options) == \
            native.generate_ids(sources, max_new_tokens=15, **options)


# ---------------------------------------------------------------- docs/exporting.md, "Your own architecture"

PYTHON_BLOCK = re.compile(r"^```python tested\n(.*?)^```", re.S | re.M)


def test_docs_own_architecture_block_runs(tmp_path, monkeypatch, capsys):
    blocks = PYTHON_BLOCK.findall((ROOT / "docs" / "exporting.md").read_text(encoding="utf-8"))
    assert blocks, "docs/exporting.md has no ```python tested block"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/exporting.md", "exec"), {"__name__": "docs_block"})
    assert (tmp_path / "my_model_onnx" / "manifest.json").is_file()
    assert "[[" in capsys.readouterr().out
