"""Beam search, sampling, processors and streaming (issue 16): parity with transformers and a plain oracle."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from helpers import run_cli, run_cli_ok
from tfm_export.config import PRESETS
from tfm_export.errors import InputError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.manifest import MANIFEST_NAME, load_manifest
from tfm_export.model.beam_oracle import beam_search_oracle
from tfm_export.model.checkpoint import Checkpoint
from tfm_export.model.eager import EagerModel
from tfm_export.model.presets import init_model
from tfm_export.runtime import GREEDY, open_export
from tfm_export.runtime.decode.beam import top_k
from tfm_export.runtime.options.generation import GenerationConfig
from tfm_export.runtime.decode.sampling import SplitMix64, row_generators, warp

SOURCES = [[5, 9, 13, 7, 22, 31, 8], [40], [3, 3, 60, 12], [17, 18]]


def same(ours, theirs, atol=1e-4):
    """Hypotheses equal token for token, scores within atol."""
    assert [[h.ids for h in row] for row in ours] == [[ids for ids, _ in row] for row in theirs]
    for row, expected in zip(ours, theirs):
        assert np.allclose([h.score for h in row], [s for _, s in expected], atol=atol, rtol=0)


# -- the plain eager oracle on our own model -------------------------------------------------------

@pytest.fixture(scope="module")
def eos_model(tmp_path_factory):
    """The tiny model with an EOS that beams emit early, exported; (eager module, ORT runtime)."""
    free = EagerModel(init_model("tiny", seed=21)).generate_ids(SOURCES, 12, stop_at_eos=False)
    model = init_model(PRESETS["tiny"].replace(eos_id=free[0][2]), seed=21)
    out = tmp_path_factory.mktemp("beam") / "out"
    export_model(Checkpoint(config=model.config, state_dict=model.state_dict()), out, ExportOptions(validate=False))
    return model, open_export(out, device="cpu")


ORACLE_SETTINGS = [dict(num_beams=4, num_return_sequences=4), dict(num_beams=3, length_penalty=0.5),
                   dict(num_beams=4, early_stopping=True, num_return_sequences=2),
                   dict(num_beams=2, early_stopping="never", length_penalty=1.5, forced_eos=True),
                   dict(num_beams=5, length_penalty=-0.5, num_return_sequences=5)]


@pytest.mark.parametrize("settings", ORACLE_SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_beam_search_equals_the_plain_oracle(eos_model, settings):
    model, runtime = eos_model
    config = GenerationConfig(max_new_tokens=10, **settings)
    src = torch.from_numpy(runtime.source_input(SOURCES))
    expected = [[(h.ids, h.score) for h in row] for row in beam_search_oracle(model, src, 10, config)]
    if config.length_penalty <= 1:  # (a higher penalty favours the long beams)
        assert any(len(h[0]) < 9 for row in expected for h in row)  # some beams end on EOS early
    same(runtime.generate(SOURCES, config), expected)
    same(EagerModel(model).generate(SOURCES, config), expected)
    # Row by row gives the padded batch's hypotheses.
    assert [runtime.generate([s], config)[0] for s in SOURCES] == runtime.generate(SOURCES, config)


def test_beam_reorders_the_cache_on_the_device(eos_model, monkeypatch):
    """Beam search gathers past rows with RowGather (on CPU numpy's take on the OrtValues' memory, elsewhere
    the reorder graph). The encoder's outputs stay one per source: the decoder's beams attend to their
    source's (Manifest.cross_per_source)."""
    _, runtime = eos_model
    from tfm_export.runtime.states import reorder

    calls = []
    original = reorder.RowGather.__call__
    monkeypatch.setattr(reorder.RowGather, "__call__", lambda self, values, index: calls.append(len(values))
                        or original(self, values, index))
    runtime.generate(SOURCES, num_beams=4, max_new_tokens=6)
    assert runtime.manifest.cross_per_source
    assert set(calls) == {2 * runtime.config.n_decoder_layers} and len(calls) > 1  # past.*, at reordering steps


def test_host_gather_equals_the_reorder_graph():
    """On CPU RowGather takes the rows with numpy; the graph a GPU runs gives the same rows, new or written
    into given OrtValues."""
    import onnxruntime as ort

    from tfm_export.runtime.device import parse_device
    from tfm_export.runtime.states.reorder import gather_model, helper_session, host_gather

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, 2, 3, 5)).astype(np.float32), rng.random((4, 7)) < 0.5]
    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]
    index = np.array([2, 2, 0, 3])
    graph = helper_session(gather_model(["float32", "bool"]), parse_device("cpu")).run(
        None, {"index": index, "in_0": arrays[0], "in_1": arrays[1]})
    assert all(np.array_equal(g, h.numpy()) for g, h in zip(graph, host_gather(values, index)))
    out = [ort.OrtValue.ortvalue_from_numpy(np.zeros_like(a)) for a in arrays]
    host_gather(values, index, out)
    assert all(np.array_equal(g, o.numpy()) for g, o in zip(graph, out))


def test_exports_with_encoder_outputs_per_row_search_the_same(eos_model, monkeypatch):
    """Exports made before the decoder took the encoder's outputs per source get them repeated per beam
    or sample (one gather, src_mask and cross.*): the same hypotheses as the grouped rows."""
    _, runtime = eos_model
    manifest, calls = runtime.manifest, []
    grouped = {n: runtime.generate(SOURCES, num_beams=4, num_return_sequences=n, max_new_tokens=8) for n in (1, 3)}
    sampled = runtime.generate(SOURCES, do_sample=True, seed=3, num_return_sequences=2, max_new_tokens=8)
    from tfm_export.runtime.states import reorder

    original = reorder.RowGather.__call__
    monkeypatch.setattr(reorder.RowGather, "__call__", lambda self, values, index: calls.append(len(values))
                        or original(self, values, index))
    monkeypatch.setattr(runtime.growing, "per_source", False)  # as open_export sets it for old exports
    def pairs(hyps):  # `same`'s form of the expected side
        return [[(h.ids, h.score) for h in row] for row in hyps]

    for n, expected in grouped.items():
        same(runtime.generate(SOURCES, num_beams=4, num_return_sequences=n, max_new_tokens=8), pairs(expected))
    same(runtime.generate(SOURCES, do_sample=True, seed=3, num_return_sequences=2, max_new_tokens=8),
         pairs(sampled))
    assert calls.count(1 + 2 * runtime.config.n_decoder_layers) == 3  # src_mask and cross.*, once a call
    # What open_export reads: the decoder's src_mask axis, `batch` in those exports.
    spec = manifest.graphs["decoder"].spec
    per_row = tuple(dataclasses.replace(t, shape=("batch", *t.shape[1:])) if t.name == "src_mask" else t
                    for t in spec.inputs)
    entry = dataclasses.replace(manifest.graphs["decoder"], spec=dataclasses.replace(spec, inputs=per_row))
    assert not manifest.replace(graphs={**manifest.graphs, "decoder": entry}).cross_per_source


def test_generate_greedy_equals_generate_ids_with_scores(eos_model):
    model, runtime = eos_model
    greedy = runtime.generate(SOURCES, max_new_tokens=10)
    assert [h[0].ids for h in greedy] == runtime.generate_ids(SOURCES, 10)
    # A greedy score is the sum of the chosen ids' log-probabilities (EOS included).
    src = torch.from_numpy(runtime.source_input(SOURCES))
    for i, hyps in enumerate(greedy):
        ids = hyps[0].ids + ([model.config.eos_id] if len(hyps[0].ids) < 10 else [])
        tgt = torch.tensor([[model.config.bos_id] + ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(src[i:i + 1], tgt)[0, :-1].double(), dim=-1)
        assert abs(float(logp[torch.arange(len(ids)), ids].sum()) - hyps[0].score) < 1e-4


# -- sampling --------------------------------------------------------------------------------------

def test_splitmix64_reference_values():
    generator = SplitMix64(0)
    assert [generator.next() for _ in range(2)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]
    assert 0 <= SplitMix64(7).uniform() < 1
    assert [g.state for g in row_generators(5, 2)] == [g.state for g in row_generators(5, 3)[:2]]


def test_warpers_keep_what_transformers_keeps():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    scores = torch.randn(1, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for keep_k, keep_p in ((5, 1.0), (0, 0.8), (10, 0.5), (0, 0.05)):
        theirs = scores / 0.7
        if keep_k:
            theirs = TopKLogitsWarper(keep_k)(None, theirs)
        if keep_p < 1:
            theirs = TopPLogitsWarper(keep_p)(None, theirs)
        ours = warp(scores[0].numpy(), 0.7, keep_k, keep_p)
        assert np.array_equal(np.isfinite(ours), torch.isfinite(theirs[0]).numpy())


def test_sampling_is_reproducible_and_seeded(eos_model):
    model, runtime = eos_model
    config = GenerationConfig(do_sample=True, seed=11, top_p=0.9, temperature=1.3, max_new_tokens=10,
                              num_return_sequences=3)
    first = runtime.generate(SOURCES, config)
    assert runtime.generate(SOURCES, config) == first
    assert [[h.ids for h in r] for r in EagerModel(model).generate(SOURCES, config)] == [[h.ids for h in r]
                                                                                       for r in first]
    other = runtime.generate(SOURCES, config.replace(seed=12))
    assert [[h.ids for h in r] for r in other] != [[h.ids for h in r] for r in first]
    # top_k=1 keeps only the best token: sampling is then greedy.
    assert [r[0].ids for r in runtime.generate(SOURCES, config.replace(top_k=1))] == runtime.generate_ids(SOURCES, 10)


# -- streaming -------------------------------------------------------------------------------------

def test_stream_yields_what_generate_returns(eos_model):
    _, runtime = eos_model
    for settings in (dict(), dict(do_sample=True, seed=3), dict(num_beams=3)):
        config = GenerationConfig(max_new_tokens=10, **settings)
        for source in SOURCES:
            assert list(runtime.stream(source, config)) == runtime.generate([source], config)[0][0].ids


def test_stream_text_pieces_on_the_bundled_model(bundled_export):
    runtime = open_export(bundled_export, device="cpu")
    pieces = list(runtime.stream("4718"))
    assert len(pieces) > 3 and "".join(pieces) == runtime.translate(["4718"])[0]


# -- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    (dict(num_beams=0), 'options\\["num_beams"\\]=0 must be an integer of at least 1'),
    (dict(top_p=0.0), "top_p.*must be in \\(0, 1\\]"), (dict(top_p=1.5), "top_p.*must be in \\(0, 1\\]"),
    (dict(num_beams=2, num_return_sequences=3), "cannot exceed the number of beams"),
    (dict(temperature=0), "temperature.*greater than 0"), (dict(early_stopping="soon"), "true, false or"),
    (dict(do_sample=True, num_beams=2), "beam sampling"), (dict(top_k=-1), "top_k"),
    (dict(repetition_penalty=0), "repetition_penalty"), (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size")])
def test_bad_options_are_one_line_input_errors(settings, message):
    with pytest.raises(InputError, match=message) as info:
        GenerationConfig(**settings)
    assert "\n" not in str(info.value)


def test_top_k_breaks_ties_by_lower_index():
    scores = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [-np.inf, 0.5, -np.inf, -np.inf, -np.inf]])
    assert top_k(scores, 2).tolist() == [[1, 2], [1, 0]]


# -- the bundled model, the manifest, the CLI ------------------------------------------------------

def test_beam_keeps_the_bundled_models_heldout_accuracy(bundled_export):
    from conftest import BUNDLED
    from tfm_export.demo import read_heldout

    heldout = read_heldout(BUNDLED / "heldout.tsv")
    runtime = open_export(bundled_export, device="cpu")
    sources = [s for s, _ in heldout]

    def accuracy(outputs):
        return sum(o == t for o, (_, t) in zip(outputs, heldout)) / len(heldout)

    greedy, beam = accuracy(runtime.translate(sources)), accuracy(runtime.translate(sources, num_beams=4))
    assert beam >= greedy, f"beam 4 {beam:.3f} vs greedy {greedy:.3f}"


def test_manifest_generation_section_sets_defaults_and_old_exports_load(eos_model, tmp_path):
    model, _ = eos_model
    out = tmp_path / "out"
    checkpoint = Checkpoint(config=model.config, state_dict=model.state_dict(),
                            meta={"generation_defaults": {"num_beams": 3, "length_penalty": 0.8}})
    export_model(checkpoint, out, ExportOptions(validate=False))
    runtime = open_export(out, device="cpu")
    assert (runtime.generation.num_beams, runtime.generation.length_penalty) == (3, 0.8)
    assert runtime.generate_ids(SOURCES, 8) == [r[0].ids for r in runtime.generate(SOURCES, num_beams=3,
                                                                                    length_penalty=0.8,
                                                                                    max_new_tokens=8)]
    data = json.loads((out / MANIFEST_NAME).read_text())
    del data["generation"]  # an export made before the section existed
    (out / MANIFEST_NAME).write_text(json.dumps(data))
    assert load_manifest(out).generation is None
    assert open_export(out, device="cpu").generation == GenerationConfig()


def test_cli_generate_beam_n_best_json_and_stream(eos_model):
    _, runtime = eos_model
    folder = runtime.folder
    result = run_cli_ok("generate", folder, "--ids", "5 9 13", "--ids", "40", "--num-beams", "4", "--n-best", "3",
                        "--json", "--device", "cpu", "--max-new-tokens", "8")
    records = [json.loads(line) for line in result.output.splitlines()]
    expected = runtime.generate([[5, 9, 13], [40]], num_beams=4, num_return_sequences=3, max_new_tokens=8)
    for record, hyps in zip(records, expected):
        assert [h["ids"] for h in record["hypotheses"]] == [h.ids for h in hyps]
        assert record["ids"] == hyps[0].ids and abs(record["score"] - hyps[0].score) < 1e-5
    result = run_cli("generate", folder, "--ids", "5 9 13", "--sample", "--top-p", "0.9", "--seed", "1", "--stream",
                     "--device", "cpu", "--max-new-tokens", "8")
    sampled = runtime.generate([[5, 9, 13]], do_sample=True, top_p=0.9, seed=1, max_new_tokens=8)[0][0].ids
    assert result.exit_code == 0 and result.output.split("\t")[1].split() == [str(i) for i in sampled]
    result = run_cli("generate", folder, "--ids", "5", "--num-beams", "2", "--n-best", "3")
    assert result.exit_code == 1 and "--n-best 3 cannot exceed the number of beams" in result.output


def test_cli_bench_num_beams_rows(tiny_checkpoint, tiny_export):
    result = run_cli_ok("bench", tiny_export, "--model", tiny_checkpoint, "--batch", "2", "--src-len", "5",
                        "--new-tokens", "4", "--repeat", "1", "--warmup", "0", "--num-beams", "3")
    names = {line.split()[0] for line in result.output.splitlines()[1:] if line.strip()}
    assert {"eager-beam3", "ort-beam3"} <= names


# -- transformers' generate on random MarianMT models ----------------------------------------------

HF_SETTINGS = [dict(num_beams=4, num_return_sequences=4), dict(num_beams=4, length_penalty=0.6, early_stopping=True),
               dict(num_beams=3, length_penalty=2.0, early_stopping="never", num_return_sequences=2),
               dict(num_beams=4, no_repeat_ngram_size=2, repetition_penalty=1.3, min_new_tokens=3),
               dict(num_beams=1, no_repeat_ngram_size=2, repetition_penalty=1.3, min_new_tokens=3)]
HF_STEPS = 12


def hf_generate(model, src, mask, **settings):
    """transformers' hypotheses per source: (ids without the decoder start, cut at EOS; score)."""
    from marian_fixtures import EOS

    out = model.generate(input_ids=src, attention_mask=mask, do_sample=False, max_new_tokens=HF_STEPS,
                         return_dict_in_generate=True, output_scores=True, **settings)
    n = settings.get("num_return_sequences", 1)
    rows = [r[: r.index(EOS)] if EOS in r else r for r in out.sequences[:, 1:].tolist()]
    if settings["num_beams"] == 1:  # greedy: no sequence scores; compare ids
        return [[(ids, None)] for ids in rows]
    scores = out.sequences_scores.tolist()
    return [list(zip(rows[i:i + n], scores[i:i + n])) for i in range(0, len(rows), n)]


@pytest.fixture(scope="module")
def marian_models(tmp_path_factory):
    """Three random MarianMT models (forced EOS, as OPUS-MT's generation config) and ours of each."""
    pytest.importorskip("transformers")
    from marian_fixtures import marian, save
    from tfm_export.importers import load_any

    models = []
    for seed in (0, 1, 2):
        hf = marian(seed=seed, forced_eos=seed != 2)
        models.append((hf, load_any(save(hf, tmp_path_factory.mktemp(f"marian{seed}")))))
    return models


@pytest.mark.parametrize("settings", HF_SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_beam_search_equals_transformers_generate(marian_models, settings):
    from marian_fixtures import padded_batch

    for seed, (hf, ckpt) in enumerate(marian_models):
        src, mask = padded_batch(seed=seed + 1)
        sources = [row[: int(m.sum())] for row, m in zip(src.tolist(), mask)]  # different lengths
        expected = hf_generate(hf, src, mask, **settings)
        forced = ckpt.meta["forced_eos_at_max_length"]
        ours = EagerModel.from_checkpoint(ckpt).generate(sources, max_new_tokens=HF_STEPS, forced_eos=forced,
                                                         **settings)  # over the folder's defaults
        assert [[h.ids for h in row] for row in ours] == [[ids for ids, _ in row] for row in expected], seed
        if settings["num_beams"] > 1:
            same(ours, expected)


def test_ort_beam_search_equals_transformers_on_an_export(marian_models, tmp_path):
    from marian_fixtures import padded_batch

    hf, ckpt = marian_models[0]
    export_model(ckpt, tmp_path / "out", ExportOptions(validate=False))
    runtime = open_export(tmp_path / "out", device="cpu")
    src, mask = padded_batch()
    sources = [row[: int(m.sum())] for row, m in zip(src.tolist(), mask)]
    settings = dict(num_beams=4, num_return_sequences=3, length_penalty=0.8)
    same(runtime.generate(sources, max_new_tokens=HF_STEPS, forced_eos=True, **settings),
         hf_generate(hf, src, mask, **settings))


@pytest.mark.long  # its export validates a 6-beam default decoding against eager: a minute; CI has test_hf_families'
def test_marian_generation_config_becomes_the_default_decoding(tmp_path):
    """A published-style folder with a length penalty and n-gram bans: `generate()` with no options on
    both sides gives the same hypotheses and scores."""
    pytest.importorskip("transformers")
    from marian_fixtures import padded_batch, marian, save
    from helpers import import_hf as import_marian

    hf = marian(seed=4, generation=dict(num_beams=6, length_penalty=0.7, no_repeat_ngram_size=3, max_length=13))
    ckpt = import_marian(save(hf, tmp_path / "hf"))
    defaults = {"num_beams": 6, "length_penalty": 0.7, "no_repeat_ngram_size": 3, "max_new_tokens": 12,
                "forced_eos": True, "renormalize_logits": True}
    assert ckpt.meta["generation_defaults"] == defaults
    export_model(ckpt, tmp_path / "out", ExportOptions())  # validation compares the default decoding too
    runtime = open_export(tmp_path / "out", device="cpu")
    assert runtime.manifest.generation == defaults and runtime.manifest.validation["default"]["equal"]
    src, mask = padded_batch(seed=3)
    sources = [row[: int(m.sum())] for row, m in zip(src.tolist(), mask)]
    out = hf.generate(input_ids=src, attention_mask=mask, return_dict_in_generate=True, output_scores=True)
    rows = [r[: r.index(0)] if 0 in r else r for r in out.sequences[:, 1:].tolist()]
    same(runtime.generate(sources), [[pair] for pair in zip(rows, out.sequences_scores.tolist())])
    assert runtime.generate_ids(sources) == rows
    assert runtime.generate_ids(sources, 8, config=GREEDY) == EagerModel(ckpt.build_model()).generate_ids(sources, 8)
