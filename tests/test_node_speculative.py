"""Speculative greedy decoding in the Node runtime (runtimes/node: decode/speculative.mjs, proposers.mjs,
draft_length.mjs, checking.mjs, states/growing.mjs's feed/positionIds/truncate, speculating.mjs; issue #63): Node's
ids with prompt lookup and with a draft export equal Python's plain greedy ids and Python's speculative ones, on the
bundled model, the trained t5 fixture drafted by the trained flan_t5 fixture (tests/fixtures/trained: the same
tokenizer) and the tiny random export, greedy under processors too (TokenPicker's ids), generate's speculative
hypotheses scored as plain decoding's; drafts are really accepted (the `speculation` counts: fewer decoder calls
than ids); a draft of another vocabulary is refused in one line, by the API and by the CLI's --assistant."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hf_fixtures
from tfm_export.runtime import open_export
from tfm_export.runtime.options.generation import GREEDY

NODE = Path(__file__).resolve().parents[1] / "runtimes" / "node"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
              pytest.mark.skipif(not (NODE / "node_modules" / "onnxruntime-node").exists(),
                                 reason="runtimes/node/node_modules missing (npm ci)")]

SCRIPT = r"""
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const [node, jobFile] = process.argv.slice(2);
const { openExport } = await import(pathToFileURL(`${node}/exported.mjs`).href);
const job = JSON.parse(readFileSync(jobFile, 'utf8'));
const model = await openExport(job.export);
const draft = await openExport(job.draft);
const counted = async (opts) => {
  const speculation = { calls: 0, drafted: 0, accepted: 0 };
  const timings = {};
  const ids = await model.generateIds(job.sources, { ...opts, speculation, timings });
  return { ids, speculation, steps: timings.stepsMs.length };
};
const out = { plain: await model.generateIds(job.sources), lookup: {}, draft: {} };
for (const n of job.lookups) out.lookup[n] = await counted({ promptLookupNumTokens: n });
for (const n of job.drafts) out.draft[n] = await counted({ assistant: draft, numAssistantTokens: n });
out.self = await counted({ assistant: model });
out.generate = (await model.generate(job.sources, { promptLookupNumTokens: 3 })).map(([h]) => h);
out.processed = [];
for (const [i, options] of job.processed.entries()) {  // greedy under processors: ProcessorCheck
  const row = { plain: await model.generateIds(job.sources, options) };
  row.lookup = await counted({ ...options, promptLookupNumTokens: 3 });
  // a draft length of its own: a fresh policy (kept per model, proposer and length), which drafts after 3 plain steps
  row.self = await counted({ ...options, assistant: model, numAssistantTokens: 7 + i });
  out.processed.push(row);
}
out.refused = null;
if (job.other) {
  const other = await openExport(job.other);
  try { await model.generateIds(job.sources, { assistant: other }); } catch (err) { out.refused = err.message; }
}
console.log(JSON.stringify(out));
"""


# greedy under processors, Node's options and Python's
PROCESSED = [({"repetitionPenalty": 1.3}, {"repetition_penalty": 1.3}),
             ({"noRepeatNgramSize": 2, "minNewTokens": 3}, {"no_repeat_ngram_size": 2, "min_new_tokens": 3}),
             ({"forcedEos": True, "maxNewTokens": 6}, {"forced_eos": True, "max_new_tokens": 6})]


def node_run(tmp_path: Path, lookups=(1, 10), drafts=(2, 20), processed=True, **job) -> dict:
    """The script's answers on `job` (export, draft, other: folders; sources); `processed`: PROCESSED's runs too."""
    job = {k: str(v) if isinstance(v, Path) else v for k, v in job.items()}
    (tmp_path / "job.json").write_text(json.dumps({**job, "lookups": lookups, "drafts": drafts,
                                                   "processed": [node for node, _ in PROCESSED] if processed else []}))
    (tmp_path / "run.mjs").write_text(SCRIPT)
    done = subprocess.run(["node", tmp_path / "run.mjs", NODE, tmp_path / "job.json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_parity(got: dict, folder: Path, sources: list[list[int]]) -> None:
    """Node's plain, prompt-lookup and drafted ids all equal Python's plain greedy and Python's speculative ids;
    every decode with a draft that is right at all saves decoder calls."""
    model = open_export(folder, "cpu")
    plain = model.generate_ids(sources, config=GREEDY)
    assert got["plain"] == plain
    assert model.generate_ids(sources, config=GREEDY, prompt_lookup_num_tokens=3) == plain
    budget = model.config.max_len  # a row that reaches it ends without EOS
    tokens = sum(len(r) + (len(r) < budget) for r in plain)  # EOS counts: plain greedy makes a decoder call per id
    for run in [*got["lookup"].values(), *got["draft"].values(), got["self"]]:
        assert run["ids"] == plain
        stats = run["speculation"]
        assert run["steps"] == stats["calls"] <= tokens
        assert 0 <= stats["accepted"] <= stats["drafted"]
        # each call emits its accepted ids and the model's next, except after an accepted EOS (once per source)
        assert tokens <= stats["calls"] + stats["accepted"] <= tokens + len(sources)
    assert got["self"]["speculation"]["accepted"] > 0  # the model drafting for itself is always right
    assert got["self"]["speculation"]["calls"] < tokens
    assert [h["ids"] for h in got["generate"]] == plain  # generate's hypotheses: scored as plain decoding's
    python = [h[0].score for h in model.generate(sources, config=GREEDY)]
    assert np.allclose([h["score"] for h in got["generate"]], python, rtol=0, atol=1e-4)
    for (_, python), row in zip(PROCESSED, got["processed"]):  # TokenPicker's ids, drafted or not
        expected = model.generate_ids(sources, config=GREEDY, **python)
        assert row["plain"] == row["lookup"]["ids"] == row["self"]["ids"] == expected
        assert model.generate_ids(sources, config=GREEDY, prompt_lookup_num_tokens=3, **python) == expected
        assert row["self"]["speculation"]["drafted"] > 0


def test_node_speculates_the_t5_fixture_drafted_by_flan_t5(tmp_path, speculative_exports, tiny_export):
    folder, draft = speculative_exports("t5"), speculative_exports("flan_t5")
    model = open_export(folder, "cpu")
    sources = [model.encode(e.source) for e in hf_fixtures.task_examples("t5")][:4]
    got = node_run(tmp_path, lookups=(3,), drafts=(1, 5), processed=False, export=folder, draft=draft,
                   other=tiny_export, sources=sources)
    check_parity(got, folder, sources)
    for run in got["draft"].values():  # another model of the same tokenizer: right often
        assert run["speculation"]["accepted"] > 0 and run["speculation"]["calls"] < sum(len(r) + 1 for r in run["ids"])
    python = model.generate_ids(sources, config=GREEDY, assistant=open_export(draft, "cpu"))
    assert got["draft"]["5"]["ids"] == python
    assert got["refused"].startswith("the assistant does not share this model's vocabulary (")
    assert "\n" not in got["refused"]


def test_node_speculates_the_bundled_model(tmp_path, bundled_export):
    rng = np.random.default_rng(63)
    vocab = open_export(bundled_export, "cpu").config.src_vocab_size
    sources = [[int(i) for i in rng.integers(4, vocab, size=n)] + [2] for n in (3, 6, 9)]
    got = node_run(tmp_path, export=bundled_export, draft=bundled_export, sources=sources)
    check_parity(got, bundled_export, sources)


def test_node_speculates_a_tiny_random_export(tmp_path, tiny_export):
    rng = np.random.default_rng(7)
    config = open_export(tiny_export, "cpu").config
    sources = [[int(i) for i in rng.integers(4, config.src_vocab_size, size=n)] for n in (2, 5, 8)]
    got = node_run(tmp_path, export=tiny_export, draft=tiny_export, sources=sources)
    check_parity(got, tiny_export, sources)


def test_the_node_cli_speculates_and_refuses_another_vocabulary(bundled_export, tiny_export):
    cli = [str(NODE / "cli.mjs"), str(bundled_export), "--ids", "7 4 8 11 2", "5 6 7 2"]
    plain = subprocess.run(["node", *cli], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    for extra in (["--prompt-lookup", "3"], ["--assistant", str(bundled_export)]):
        done = subprocess.run(["node", *cli, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == plain.stdout and done.stdout.count("\n") == 2
    bad = subprocess.run(["node", *cli, "--assistant", str(tiny_export)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: the assistant does not share this model's vocabulary (")
    assert bad.stderr.count("\n") == 1


FORCED_SCRIPT = r"""
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const [node, jobFile] = process.argv.slice(2);
const { openExport } = await import(pathToFileURL(`${node}/exported.mjs`).href);
const { DraftLength } = await import(pathToFileURL(`${node}/decode/draft_length.mjs`).href);
const job = JSON.parse(readFileSync(jobFile, 'utf8'));
const model = await openExport(job.export);
const options = { forcedBosTokenId: job.forced };
const speculation = { calls: 0, drafted: 0, accepted: 0 };
const out = { plain: await model.generateIds(job.sources, options) };
// the first assistant's policy, the schedule alone (no switch-off): its calls do not depend on timing
model.draftLengths = new Map([['draft:0:20', new DraftLength(20, null, { switchOff: false })]]);
out.self = await model.generateIds(job.sources, { ...options, assistant: await openExport(job.export),
  numAssistantTokens: 20, speculation });
out.speculation = speculation;
out.lookup = await model.generateIds(job.sources, { ...options, promptLookupNumTokens: 3 });
out.one = await model.generateIds(job.sources, { ...options, maxNewTokens: 1, promptLookupNumTokens: 3 });
console.log(JSON.stringify(out));
"""


def test_node_feeds_a_forced_language_id_with_the_first_check(tmp_path, speculative_exports):
    """NLLB's forced target language rides with the first draft in Node as in Python (one decoder call per
    source when the model drafts for itself); the ids are Python's plain greedy ones."""
    folder = speculative_exports("nllb")
    tokenizer = hf_fixtures.hf_tokenizer(hf_fixtures.trained_folder("nllb"))
    tokenizer.src_lang = hf_fixtures.LANGS["nllb"][0]
    sources = [tokenizer(e.source)["input_ids"] for e in hf_fixtures.task_examples("nllb")[:6]]
    german = tokenizer.convert_tokens_to_ids(hf_fixtures.lang_token("nllb", hf_fixtures.lang_code("nllb", "de")))
    (tmp_path / "job.json").write_text(json.dumps({"export": str(folder), "sources": sources, "forced": german}))
    (tmp_path / "run.mjs").write_text(FORCED_SCRIPT)
    done = subprocess.run(["node", tmp_path / "run.mjs", NODE, tmp_path / "job.json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    python = open_export(folder, "cpu").generate_ids(sources, config=GREEDY.replace(forced_bos_token_id=german))
    assert got["plain"] == got["self"] == got["lookup"] == python
    assert all(row[0] == german for row in python)
    assert got["speculation"]["calls"] == len(sources)  # the forced id, the drafted translation and EOS: one call
    assert got["one"] == [[german]] * len(sources)
