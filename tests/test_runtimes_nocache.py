"""runtimes/node: module exports (#42, tfm_export/runtime/nocache.py) in Node, as in the Python runtime.

A briefly trained seed-004 model (tests/seed_models.py, the fixture of tests/test_any_module.py), exported
through export_module with a decoder without a cache, decodes in Node to Python's tokens: greedy, beam
search (n-best with scores), seeded sampling and an id stream, on held-out sources. Seed 003's
encoder-only classifier runs with `cli.mjs run OUT --ids ...` to Python's `open_export(OUT).run` outputs.
Misuse (`run` on a seq2seq export, decoding an encoder-only one) is one error line. The browser page
(runtimes/web/test/module.test.mjs, headless Chromium) takes seed 004's token ids to Python's greedy and
beam ids, and runs seed 003 to Python's outputs. Node skips, saying
why, as in tests/test_runtimes.py; the models are trained and exported only when node is there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from seed_models import held_out
from test_any_module import BEAMS, STEPS
from test_runtimes import CHROMIUM, RUNTIMES, run_node_tests
from tfm_export.runtime import open_export

NODE = RUNTIMES / "node"
SAMPLING = {"do_sample": True, "seed": 3, "top_k": 5, "num_return_sequences": 2}

# The job on stdin: the export and its sources; Node's decodings on stdout, as Python's names them.
DECODE_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(process.argv[2]).href);
const { fromPythonNames } = await import(pathToFileURL(process.argv[3]).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const steps = { maxNewTokens: job.steps };
const streamed = [];
for await (const id of model.stream(job.sources[0], steps)) streamed.push(id);
process.stdout.write(JSON.stringify({
  greedy: await model.generateIds(job.sources, steps),
  beam: await model.generate(job.sources, { ...steps, numBeams: job.beams, numReturnSequences: 2 }),
  sampled: await model.generate(job.sources, { ...steps, ...fromPythonNames(job.sampling) }),
  streamed,
}));
await model.release();
"""


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary; skips (before any model is trained) without it or the package's node_modules."""
    found = shutil.which("node")
    if found is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test runtimes/")
    if not (NODE / "node_modules" / "onnxruntime-node").exists():
        pytest.skip(f"SKIPPED: {NODE}/node_modules missing; run `npm ci` there (make test does)")
    return found


@pytest.fixture(scope="module")
def seq2seq(node, api_004) -> Path:
    """Seed 004 trained briefly, exported with decoder_nocache.onnx (conftest's, which test_any_module checks)."""
    return api_004[0]


@pytest.fixture(scope="module")
def encoder_only(node, encoder_only_003) -> Path:
    return encoder_only_003


def cli(node: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([node, str(NODE / "cli.mjs"), *map(str, args)], capture_output=True, text=True, timeout=120)


def hypotheses(rows) -> list[list[tuple[list[int], float]]]:
    """Python's Hypothesis objects or Node's { ids, score } as (ids, score) pairs."""
    get = (lambda h, k: h[k]) if isinstance(rows[0][0], dict) else getattr
    return [[(get(h, "ids"), get(h, "score")) for h in row] for row in rows]


def assert_same(node_rows, python_rows) -> None:
    """The same ids; scores within 1e-6 (Math.exp may differ from numpy's in the last bit)."""
    got, want = hypotheses(node_rows), hypotheses(python_rows)
    assert [[ids for ids, _ in row] for row in got] == [[ids for ids, _ in row] for row in want]
    assert np.allclose([s for row in got for _, s in row], [s for row in want for _, s in row], atol=1e-6, rtol=0)


def test_node_decodes_a_nocache_export_like_python(node, seq2seq, tmp_path):
    sources = held_out()
    job = {"dir": str(seq2seq), "sources": sources, "steps": STEPS, "beams": BEAMS, "sampling": SAMPLING}
    (tmp_path / "decode.mjs").write_text(DECODE_JS)
    done = subprocess.run([node, str(tmp_path / "decode.mjs"), str(NODE / "translate.mjs"), str(NODE / "decoding.mjs")],
                          input=json.dumps(job), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    model = open_export(seq2seq, device="cpu")
    greedy = model.generate_ids(sources, max_new_tokens=STEPS)
    assert got["greedy"] == greedy
    assert got["streamed"] == greedy[0]
    assert_same(got["beam"], model.generate(sources, max_new_tokens=STEPS, num_beams=BEAMS, num_return_sequences=2))
    assert_same(got["sampled"], model.generate(sources, max_new_tokens=STEPS, **SAMPLING))
    assert [row[0] for row in got["beam"]] != [row[1] for row in got["beam"]]  # a real n-best
    assert sum(len(set(ids)) > 1 for ids in greedy) >= len(sources) // 2, greedy  # trained: not one token repeated


def test_node_cli_decodes_ids_and_refuses_run_on_a_seq2seq_export(node, seq2seq):
    source = held_out()[0]
    done = cli(node, seq2seq, "--ids", ",".join(map(str, source)), "--num-beams", BEAMS, "--max-new-tokens", STEPS)
    assert done.returncode == 0, done.stderr
    want = open_export(seq2seq, device="cpu").generate_ids([source], max_new_tokens=STEPS, num_beams=BEAMS)[0]
    assert done.stdout == " ".join(map(str, want)) + "\n"
    bad = cli(node, "run", seq2seq, "--ids", "3,4")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == ("error: this export has a decoder; use generateIds, generate or translate "
                          "(`tfm-export-node OUT --ids ...`), not run\n")


def test_node_cli_runs_an_encoder_only_export_like_python(node, encoder_only):
    sources = [[5, 9, 13, 2, 7], [8, 3, 3, 41], [11, 12, 14, 15, 49, 1]]
    done = cli(node, "run", encoder_only, "--ids", *(",".join(map(str, s)) for s in sources))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    want = open_export(encoder_only, device="cpu").run(sources)["logits"]
    assert [line["ids"] for line in lines] == sources and set(lines[0]) == {"ids", "logits"}
    assert np.allclose([line["logits"] for line in lines], want, atol=1e-5, rtol=0)
    for args, message in ((["--ids", "3,4"], "error: this export is encoder-only (it has no decoder); run it: "
                                             "model.run(idLists), or `tfm-export-node run OUT --ids ...`\n"),
                          (["run", "--ids", "3,99"], "error: source id 99 is out of range for a vocabulary of 50 ids\n"),
                          (["run", "3,4"], 'error: run takes token ids: cli.mjs run EXPORT_DIR --ids "3 17 9" '
                                           '["5 6" ...]\n')):
        where = [args[0], encoder_only, *args[1:]] if args[0] == "run" else [encoder_only, *args]
        bad = cli(node, *where)
        assert bad.returncode == 1 and bad.stderr == message, (args, bad.stderr)


def test_browser_decodes_module_exports_like_python(node, seq2seq, encoder_only, tmp_path):
    """runtimes/web/test/module.test.mjs: the page takes token ids for seed 004 (no tokenizer; greedy and
    beam search equal Python's ids; on a `tfm-export serve` of it too) and runs seed 003 (outputs within 1e-5
    of Python's run)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"SKIPPED: chromium not found at {CHROMIUM}; `apt-get install chromium` to run the browser test")
    sources = held_out()[:4]
    model = open_export(seq2seq, device="cpu")
    classes = [[5, 9, 13, 2, 7], [8, 3, 3, 41, 6], [11, 12, 14, 15, 49]]
    expected = {
        "seq2seq": {"dir": str(seq2seq), "sources": sources, "beams": BEAMS, "greedy": model.generate_ids(sources),
                    "beam": model.generate_ids(sources, num_beams=BEAMS)},
        "encoderOnly": {"dir": str(encoder_only), "sources": classes,
                        "outputs": {k: v.tolist() for k, v in open_export(encoder_only, device="cpu").run(classes).items()}},
    }
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    out = run_node_tests(RUNTIMES / "web", None, files=("test/module.test.mjs",),
                         env={"TFM_MODULE_EXPECTED": str(tmp_path / "expected.json")})
    assert re.search(r"^ok \d+ - a module export without a tokenizer decodes", out, re.M), out[-2000:]
    assert re.search(r"^ok \d+ - an encoder-only export is run", out, re.M), out[-2000:]
    assert re.search(r"^ok \d+ - on a server, the page sends token ids", out, re.M), out[-2000:]
