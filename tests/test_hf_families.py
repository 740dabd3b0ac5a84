"""Hugging Face folders of every supported family, as they are published: `tfm-export FOLDER` with
default flags exports and validates them, the tokenizer equals transformers' on unicode strings, and
the export's greedy, default (the folder's generation_config) and beam-4 n-best hypotheses equal
transformers' `generate` on padded batches of 20 held-out task inputs of briefly trained models,
with scores within 1e-4; multilingual models with a target language equal transformers with
forced_bos_token_id (tests/fixtures/README.md describes the fixtures)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from helpers import export_validated  # noqa: E402
from hf_fixtures import (FAMILIES, LANGS, hf_model, hf_tokenizer, lang_code, lang_token, random_folder,  # noqa: E402
                         sources, task_examples, trained_folder)
from tfm_export.importers import load_any  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.text.tokenizer import tokenizer_from_dict  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def exports(trained_export):
    """The trained folder of each family, exported once with the CLI's default flags, opened."""
    return lambda family: open_export(trained_export(family), "cpu")


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_equals_transformers(family):
    folder = trained_folder(family)
    checkpoint = load_any(folder)
    ours, theirs = tokenizer_from_dict(checkpoint.tokenizer, folder), hf_tokenizer(folder)
    if family in LANGS:
        theirs.src_lang = LANGS[family][0]
    texts = sources(family)
    assert len(texts) >= 50
    assert [ours.encode(t) for t in texts] == [theirs(t)["input_ids"] for t in texts]
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(checkpoint.config.tgt_vocab_size) for _ in range(rng.randrange(0, 14))]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), ids
    if family in LANGS:  # another source language: its token in the family's place
        code = LANGS[family][1][1]
        theirs.src_lang = code
        assert [ours.encode(t, source_lang=code) for t in texts[:10]] == [theirs(t)["input_ids"] for t in texts[:10]]


def hf_hypotheses(model, batch, eos: int, **settings) -> list[list[tuple[list[int], float | None]]]:
    """transformers' hypotheses per source: ids after the decoder start, cut at EOS; score (beams)."""
    out = model.generate(**batch, return_dict_in_generate=True, output_scores=True, **settings)
    n = settings.get("num_return_sequences", 1)
    # Rows that end before others are padded after their EOS: cutting at EOS removes the padding.
    rows = [r[: r.index(eos)] if eos in r else r for r in out.sequences[:, 1:].tolist()]
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else [None] * len(rows)
    return [list(zip(rows[i:i + n], scores[i:i + n])) for i in range(0, len(rows), n)]


def same(ours, theirs) -> None:
    assert [[h.ids for h in row] for row in ours] == [[ids for ids, _ in row] for row in theirs]
    for row, expected in zip(ours, theirs):
        if expected[0][1] is not None:
            np.testing.assert_allclose([h.score for h in row], [s for _, s in expected], atol=1e-4)


def batches(family, tokenizer):
    """The 20 held-out task inputs, by target language: (hf batch, sources, forced first token)."""
    examples = task_examples(family, 20)
    for lang in dict.fromkeys(e.lang for e in examples):
        texts = [e.source for e in examples if e.lang == lang]
        forced = None
        if family in LANGS:
            tokenizer.src_lang = LANGS[family][0]
            forced = tokenizer.convert_tokens_to_ids(lang_token(family, lang_code(family, lang)))
        batch = tokenizer(texts, return_tensors="pt", padding=True)
        sources = [row[: int(m.sum())] for row, m in zip(batch["input_ids"].tolist(), batch["attention_mask"])]
        yield batch, sources, forced, lang


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_model_decodes_as_transformers(family, exports):
    runtime = exports(family)
    folder = trained_folder(family)
    model, tokenizer = hf_model(folder), hf_tokenizer(folder)
    eos, count = runtime.config.eos_id, 0
    for batch, srcs, forced, lang in batches(family, tokenizer):
        count += len(srcs)
        first = {} if forced is None else {"forced_bos_token_id": forced}
        with torch.no_grad():
            # The folder's defaults on both sides (its generation_config.json), then greedy and beam-4 n-best.
            same(runtime.generate(srcs, **first), hf_hypotheses(model, batch, eos, **first))
            same(runtime.generate(srcs, num_beams=1, **first), hf_hypotheses(model, batch, eos, num_beams=1, **first))
            nbest = dict(num_beams=4, num_return_sequences=4, **first)
            same(runtime.generate(srcs, **nbest), hf_hypotheses(model, batch, eos, **nbest))
        if family in LANGS:  # the API's language codes give the same first token and the same sources
            assert runtime.language_options(lang_code(family, lang)) == first
            texts = [e.source for e in task_examples(family, 20) if e.lang == lang]
            assert [runtime.encode(t, source_lang=LANGS[family][0]) for t in texts] == srcs
    assert count >= 20


@pytest.mark.parametrize("family", FAMILIES)
def test_translate_with_a_target_language(family, exports):
    """Text in, text out: the export's translate equals transformers' decoded generate."""
    from hf_fixtures import translate

    runtime = exports(family)
    folder = trained_folder(family)
    examples = task_examples(family, 8)
    expected = translate(hf_model(folder), hf_tokenizer(folder), family, examples)
    got = []
    for e in examples:
        code = lang_code(family, e.lang)
        got.append(runtime.translate([e.source], target_lang=code, source_lang=LANGS[family][0] if code else None)[0])
    assert [g.strip() for g in got] == expected


# Random folders of every family at both sizes run in `make test-long`; `make test` keeps two tiny
# ones (M2M100's sinusoidal table, T5 v1.1's gated GELU and untied head) for CI's time: every family's
# trained folder (Pegasus' pre-LN too) is exported with default flags and checked above.
IN_CI = ("nllb", "flan_t5")
RANDOM_CASES = [pytest.param(size, family, marks=() if size == "tiny" and family in IN_CI else pytest.mark.long,
                             id=f"{size}-{family}")
                for size in ("tiny", "layers") for family in FAMILIES]


@pytest.mark.slow
@pytest.mark.parametrize("size, family", RANDOM_CASES)
def test_random_folders_export_with_default_flags(family, size, tmp_path):
    """Random weights (transformers' own initialisation), the family's published generation settings and
    tokenizer; the realistic layer structure (the base checkpoint's depth, heads and ffn ratio, narrow)
    or a tiny one. (Weights drawn much wider than any trained model's grow float32 differences past
    validation's tolerance: 4.6e-4 on mBART-50's keys at std 1.0; the trained fixtures test decoding.)"""
    folder = random_folder(family, tmp_path / "hf", size, wide=False)
    export_validated(folder, tmp_path / "out")
    runtime, model = open_export(tmp_path / "out", "cpu"), hf_model(folder)
    batch = hf_tokenizer(folder)(["123", "4567 89"], return_tensors="pt", padding=True)
    srcs = [row[: int(m.sum())] for row, m in zip(batch["input_ids"].tolist(), batch["attention_mask"])]
    with torch.no_grad():  # greedy under the folder's other defaults (forced tokens, min_length), 6 tokens
        expected = hf_hypotheses(model, batch, runtime.config.eos_id, num_beams=1, max_new_tokens=6)
    assert [h[0].ids for h in runtime.generate(srcs, num_beams=1, max_new_tokens=6)] == [r[0][0] for r in expected]


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_final_logits_bias_is_kept_only_when_it_adds_something(noise, tmp_path):
    """Published folders save final_logits_bias as zeros: the import leaves such a bias out (an Add over
    (batch, tgt_vocab) less per step) and keeps a non-zero one; the logits equal transformers' both ways."""
    folder = random_folder("bart", tmp_path / "hf", "tiny")
    model = hf_model(folder)
    model.final_logits_bias.normal_(0, noise, generator=torch.Generator().manual_seed(0))
    model.save_pretrained(folder)
    checkpoint = load_any(folder)
    assert checkpoint.config.output_bias == (noise > 0)
    assert ("lm_head.bias" in checkpoint.state_dict) == (noise > 0)
    ours = checkpoint.build_model()
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[2, 8, 9]])
    with torch.no_grad():
        expected = model(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(src, tgt), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family, fused", [("flan_t5", {"SimplifiedLayerNormalization", "FastGelu"}),
                                           ("bart", {"SkipLayerNormalization", "BiasGelu"})])
def test_norms_and_activations_fuse_when_a_session_opens(family, fused, trained_export, tmp_path):
    """The model writes T5's RMS norm and the GELUs in the forms ONNX Runtime's default graph optimizer
    fuses (one kernel instead of five to seven elementwise passes a layer), and the head's MatMul writes
    the logits output itself (no copy of every logit to drop an axis)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(trained_export(family) / "decoder.onnx"), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(tmp_path / "optimized.onnx")).graph
    kinds = {n.op_type for n in graph.node}
    assert fused <= kinds, sorted(kinds)
    assert not {"Erf", "Tanh", "Sqrt", "Reciprocal"} & kinds
    (head,) = [n for n in graph.node if "logits" in n.output]
    assert head.op_type in ("MatMul", "Gemm", "FusedMatMul"), head.op_type
