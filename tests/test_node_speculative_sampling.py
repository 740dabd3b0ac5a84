"""Speculative sampling in the Node runtime (runtimes/node/decode/speculative_sampling.mjs, issue #63): seeded,
Node's ids are Python's (tfm_export/runtime/decode/speculative_sampling.py) for the same seed, token for token, with
a draft model (the trained t5 fixture drafted by flan_t5, tests/fixtures/trained: the same tokenizer) and with
prompt lookup (the tiny random export, which repeats itself); generate's numReturnSequences samples per source are
Python's, scored as Python scores them; drafts are really accepted and rejected (the `speculation` counts); top_k 1
gives greedy's ids with either proposer. The distribution itself is tests/test_speculative_sampling.py's (the rule
ported here draws the same numbers in the same order, so Node's draws are Python's)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import hf_fixtures
from helpers import NODE, node_module
from tfm_export.runtime import open_export
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.options.generation import GREEDY

pytestmark = [pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
              pytest.mark.skipif(not (NODE / "node_modules" / "onnxruntime-node").exists(),
                                 reason="runtimes/node/node_modules missing (npm ci)")]

# Each run: Node's generateIds (with its speculation counts) or generate, on job.export, drafted by job.draft when
# the run says `draft`.
SCRIPT = r"""
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(`${process.argv[1]}/exported.mjs`).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.export);
const draft = job.draft ? await openExport(job.draft) : null;
const out = [];
for (const { options, generate, drafted } of job.runs) {
  const opts = { ...options, ...(drafted ? { assistant: draft } : {}) };
  const speculation = { calls: 0, drafted: 0, accepted: 0 };
  const ids = generate ? await model.generate(job.sources, opts) : await model.generateIds(job.sources, { ...opts, speculation });
  out.push({ ids, speculation });
}
console.log(JSON.stringify(out));
"""

SAMPLING = {"doSample": True, "topK": 5, "numBeams": 1}
PYTHON = {"doSample": "do_sample", "topK": "top_k", "seed": "seed", "promptLookupNumTokens": "prompt_lookup_num_tokens",
          "numReturnSequences": "num_return_sequences", "numBeams": "num_beams", "numAssistantTokens": "num_assistant_tokens"}


def node_runs(export, sources, runs, draft=None) -> list[dict]:
    """Node's answers to `runs` ({options, generate, drafted}) on `export` (drafted by `draft`)."""
    job = {"export": str(export), "draft": str(draft) if draft else None, "sources": sources, "runs": runs}
    done = node_module(SCRIPT, NODE, stdin=json.dumps(job))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def python_options(options: dict) -> dict:
    return {PYTHON[name]: value for name, value in options.items()}


def check_runs(model, sources, runs, got, assistant=None) -> None:
    """Each Node run's ids (and generate's scores) equal Python's for the same options and seed, and its counts of
    drafted and accepted ids; the generateIds runs that sample with top_k above 1 accepted drafts and rejected some."""
    sampled = np.zeros(2, dtype=int)  # their drafted and accepted ids
    for run, answer in zip(runs, got):
        options = {**python_options(run["options"]), "config": GREEDY,
                   "assistant": assistant if run.get("drafted") else None}
        if run.get("generate"):
            python = model.generate(sources, **options)
            assert [[h["ids"] for h in hyps] for hyps in answer["ids"]] == [[h.ids for h in hyps] for hyps in python]
            assert np.allclose([h["score"] for hyps in answer["ids"] for h in hyps],
                               [h.score for hyps in python for h in hyps], rtol=0, atol=1e-4)
            continue
        timings = DecodeTimings()
        assert answer["ids"] == model.generate_ids(sources, timings=timings, **options), run
        stats = answer["speculation"]
        assert (stats["drafted"], stats["accepted"]) == (timings.drafted, timings.accepted)
        if run["options"]["topK"] > 1:
            sampled += (stats["drafted"], stats["accepted"])
    assert 0 < sampled[1] < sampled[0]


@pytest.mark.slow
def test_node_samples_with_a_draft_as_python(speculative_exports):
    folder, draft = speculative_exports("t5"), speculative_exports("flan_t5")
    model = open_export(folder, "cpu")
    sources = [model.encode(e.source) for e in hf_fixtures.task_examples("t5")][:3]
    runs = [{"options": {**SAMPLING, "seed": seed}, "drafted": True} for seed in (11, 12)]
    runs += [{"options": {**SAMPLING, "seed": 11, "numAssistantTokens": 3}, "drafted": True},
             {"options": {**SAMPLING, "seed": 11, "numReturnSequences": 3}, "drafted": True, "generate": True},
             {"options": {**SAMPLING, "topK": 1, "seed": 5}, "drafted": True}]
    got = node_runs(folder, sources, runs, draft)
    check_runs(model, sources, runs, got, open_export(draft, "cpu"))
    assert got[0]["ids"] != got[1]["ids"]  # the seed matters
    assert got[-1]["ids"] == model.generate_ids(sources, config=GREEDY)  # top_k 1: greedy's ids


def test_node_samples_with_prompt_lookup_as_python(tiny_export):
    model = open_export(tiny_export, "cpu")
    rng = np.random.default_rng(3)
    sources = [rng.integers(4, 64, size=n).tolist() for n in (3, 7, 12, 5)]
    lookup = {**SAMPLING, "promptLookupNumTokens": 4}
    runs = [{"options": {**lookup, "seed": 9}}, {"options": {**lookup, "seed": 10}},
            {"options": {**lookup, "seed": 9, "numReturnSequences": 2}, "generate": True},
            {"options": {**lookup, "topK": 1, "seed": 3}}]
    got = node_runs(tiny_export, sources, runs)
    check_runs(model, sources, runs, got)
    assert got[0]["ids"] != got[1]["ids"]
    assert got[-1]["ids"] == model.generate_ids(sources, config=GREEDY)
    assert got[-1]["speculation"]["accepted"] > 0
