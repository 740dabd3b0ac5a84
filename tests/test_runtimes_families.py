"""runtimes/: Node and the browser tokenize, decode and generate like the Python runtime on the Hugging
Face families (tests/hf_fixtures.py, tests/fixtures/trained).

Every family whose folder has a tokenizer.json (the manifest's "hf" tokenizer: runtimes/node/text/tokenizer.mjs
on @huggingface/tokenizers) is compared token for token: encode on hf_fixtures.sources (unicode of many
kinds, plus each multilingual source language), the forced first token of every target language,
unknown codes (the same one-line message), decode on random ids. So is Marian's (SentencePiece files:
the source.tokenizer.json its export writes, runtimes/node/text/marian.mjs), on those sources with >>de<< /
>>en<< codes in the text and as target languages, and on random strings where sentencepiece differs
from the tokenizers libraries; runtimes/node/text/sentencepiece.mjs gives sentencepiece's pieces for models
of other normalisation settings. m2m100 (no tokenizer.json) is ids only in Node. The charsmap
normaliser (runtimes/node/text/charsmap.mjs) is compared with the Rust library's on random strings. Trained
exports generate in Node exactly the Python runtime's ids (greedy and the export's default decoding;
with a target language where the model is multilingual; mt5's heads are not d_model / n_heads wide),
and in headless Chromium (mbart50, marian); Node's command line translates Marian text; a Marian export
made before source.tokenizer.json decodes ids in Node like Python and refuses text in one line. Node
and the browser skip, saying why, as in tests/test_runtimes.py.
"""

from __future__ import annotations

import base64
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")

import hf_fixtures  # noqa: E402
from helpers import run_cli  # noqa: E402
from test_runtimes import CHROMIUM, RUNTIMES, run_node_tests  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.importers import load_any  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.text.tokenizer import tokenizer_from_dict  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")

NODE = RUNTIMES / "node"
HF_FAMILIES = [f for f in hf_fixtures.FAMILIES if (hf_fixtures.TRAINED / f / "tokenizer.json").exists()]
TOKENIZED = [*HF_FAMILIES, "marian"]  # marian: the files its export writes for Node (text.spm_json)
MULTILINGUAL = "mbart50"  # the trained export decoded with target languages, in Node and in the browser
GENERATED = (MULTILINGUAL, "mt5")  # mt5: 3 heads of 16 for d_model 64, so the past is not d_model / n_heads wide

# Node scripts: the package's modules by path (argv[2]), a JSON job on stdin, JSON results on stdout.
TOKENIZE_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { makeTokenizer } = await import(pathToFileURL(process.argv[2]).href);
const attempt = (fn) => { try { return { value: fn() }; } catch (err) { return { error: err.message }; } };
const out = {};
for (const [family, job] of Object.entries(JSON.parse(readFileSync(0, 'utf8')))) {
  const files = Object.fromEntries(Object.entries(job.files).map(([name, path]) => [name, JSON.parse(readFileSync(path, 'utf8'))]));
  const tok = makeTokenizer(job.spec, files);
  out[family] = {
    encoded: job.encode.map(([text, lang, target]) => attempt(() => tok.encode(text, lang ?? undefined, target ?? undefined))),
    forced: job.targets.map((code) => attempt(() => tok.forcedBos(code))),
    decoded: job.ids.map((row) => tok.decode(row)),
  };
}
process.stdout.write(JSON.stringify(out));
"""

NORMALIZE_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { CharsmapNormalizer } = await import(pathToFileURL(process.argv[2]).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const normalizer = new CharsmapNormalizer({ type: 'Precompiled', precompiled_charsmap: job.charsmap });
process.stdout.write(JSON.stringify(job.texts.map((text) => normalizer.normalize(text))));
"""

GENERATE_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const lib = (name) => import(pathToFileURL(`${process.argv[2]}/${name}`).href);
const { openExport } = await lib('exported.mjs');
const { fromPythonNames } = await lib('options/generation.mjs');
const { languageOptions } = await lib('text/tokenizer.mjs');
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const runs = [];
for (const run of job.runs) {
  const langs = { sourceLang: job.source_lang ?? undefined, targetLang: run.target_lang ?? undefined };
  const options = fromPythonNames(run.options);
  const sources = job.inputs.map((text) => model.tokenizer.encode(text, langs.sourceLang, langs.targetLang));
  const ids = await model.generateIds(sources, { ...languageOptions(model.tokenizer, langs.targetLang), ...options });
  const texts = await model.translate(job.inputs, { ...langs, ...options });
  const pieces = [];
  for await (const piece of model.stream(job.inputs[0], { ...langs, ...options })) pieces.push(piece);
  runs.push({ sources, ids, texts, pieces });
}
await model.release();
process.stdout.write(JSON.stringify({ languages: model.languages(), runs }));
"""


def node_script(tmp_path: Path, script: str, job, module: Path) -> object:
    """Run one of the scripts above on `job` with node; its JSON answer."""
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found; install Node.js >= 18 to test runtimes/")
    if not (NODE / "node_modules" / "@huggingface" / "tokenizers").exists():
        pytest.skip(f"SKIPPED: {NODE}/node_modules missing; run `npm ci` there (make test does)")
    path = tmp_path / "script.mjs"
    path.write_text(script)
    done = subprocess.run(["node", str(path), str(module)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def attempt(fn):
    """{'value': fn()} or {'error': its one-line message}: the shape TOKENIZE_JS answers in."""
    try:
        return {"value": fn()}
    except InputError as exc:
        return {"error": str(exc)}


# --------------------------------------------------------------------------------------------------
# Tokenizers: every family with a tokenizer.json


def tokenizer_job(family: str, tmp: Path) -> tuple[dict, dict]:
    """(what Node is given, what Python answers) for one family's tokenizer."""
    if family == "marian":
        return marian_tokenizer_job(tmp)
    folder = hf_fixtures.trained_folder(family)
    checkpoint = load_any(folder)
    spec = checkpoint.tokenizer
    python = tokenizer_from_dict(spec, folder)
    texts = hf_fixtures.sources(family)
    sources = python.languages.codes("source")
    langs = [None, *sources[:1], *sources[-1:], "xx_YY"] if sources else [None, "en"]
    encode = [[text, lang, None] for lang in langs for text in (texts if lang is None else texts[:8])]
    targets = [None, *python.languages.codes("target"), "xx_YY"]
    vocab = checkpoint.config.tgt_vocab_size  # T5 pads it beyond the tokenizer's: those ids decode to nothing
    job = {"spec": spec, "files": {spec["file"]: str(folder / spec["file"])}, "encode": encode, "targets": targets,
           "ids": random_ids(family, vocab)}
    return job, python_answer(python, job)


def random_ids(family: str, vocab: int, rows: int = 120) -> list[list[int]]:
    rng = random.Random(family)
    return [[rng.randrange(vocab) for _ in range(rng.randrange(16))] for _ in range(rows)]


def python_answer(python, job: dict) -> dict:
    """What TOKENIZE_JS answers for `job`, from the Python tokenizer."""
    return {"encoded": [attempt(lambda t=t, s=s, g=g: python.encode(t, s, g)) for t, s, g in job["encode"]],
            "forced": [attempt(lambda code=code: python.forced_bos(code)) for code in job["targets"]],
            "decoded": [python.decode(row) for row in job["ids"]]}


# Strings where sentencepiece differs from the Rust/JS tokenizers libraries (runtimes/node/text/sentencepiece.mjs):
# compatibility characters before combining marks, runs of spaces, ties between segmentations ("...").
MARIAN_POOL = ([chr(c) for a, b in ((0x20, 0x250), (0x300, 0x370), (0x2000, 0x2070), (0x2460, 0x2474),
                                      (0xFB00, 0xFB07), (0xFF01, 0xFF5F), (0x3000, 0x3004)) for c in range(a, b)]
               + ["\u200d", "\U0001F468", "\t", "\n", "\u2581", "  ", "...", "<unk>", "</s>", "<pad>", ">>de<<", ">>"])


def marian_texts() -> list[tuple[str, str | None]]:
    """(text, target language) pairs: the fixture's sources, language codes in and beside the text, random strings."""
    rng = random.Random("marian")
    texts = hf_fixtures.sources("marian") + ["1234", " >>en<< 12", ">>de<<", ">>xx<< 3", ">>a b<< 4", "a </s>>>de<< 7",
                                             "....", "1 .. 2 ... 3 ...... 4", "\u2581x\u2581 \u2581"]
    texts += ["".join(rng.choice(MARIAN_POOL) for _ in range(rng.randrange(1, 14))) for _ in range(1500)]
    texts += ["".join(rng.choice(".. !-01a") for _ in range(rng.randrange(1, 30))) for _ in range(300)]
    return [(text, rng.choice([None, None, "de", "en"])) for text in texts] + [("12", "xx"), ("12", None)]


def marian_tokenizer_job(tmp: Path) -> tuple[dict, dict]:
    """The trained Marian fixture: the files its export writes for Node, and Python's answers."""
    folder = hf_fixtures.trained_folder("marian")
    python = tokenizer_from_dict(load_any(folder).tokenizer, folder)
    spec, written = python.write_runtime_files(tmp)
    assert written == ["source.tokenizer.json"] and spec["sentencepiece"]["source"]["file"] == written[0]
    files = {"vocab.json": str(folder / "vocab.json"), written[0]: str(tmp / written[0])}
    encode = [[text, None, target] for text, target in marian_texts()] + [["12", "en", None]]
    job = {"spec": spec, "files": files, "encode": encode, "targets": [None, "de", "en", "xx"],
           "ids": random_ids("marian", len(python.encoder) + 5, 400)}
    return job, python_answer(python, job)


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> dict:
    """family -> (job, Python's answer, Node's answer): one node process for every family."""
    if not HF_FAMILIES:
        pytest.skip("SKIPPED: no trained fixture has a tokenizer.json (tests/fixtures/train_fixtures.py)")
    tmp = tmp_path_factory.mktemp("tokenize")
    jobs = {family: tokenizer_job(family, tmp) for family in TOKENIZED}
    node = node_script(tmp, TOKENIZE_JS, {f: job for f, (job, _) in jobs.items()},
                       NODE / "text" / "tokenizer.mjs")
    return {family: (job, python, node[family]) for family, (job, python) in jobs.items()}


def test_the_families_with_a_tokenizer_json():
    assert set(HF_FAMILIES) <= set(hf_fixtures.FAMILIES)
    assert {"marian", "m2m100"}.isdisjoint(HF_FAMILIES)  # SentencePiece files / no tokenizer.json: ids only
    assert len(hf_fixtures.sources(HF_FAMILIES[0])) >= 50


@pytest.mark.parametrize("family", TOKENIZED)
def test_node_encodes_like_python(tokenized, family):
    job, python, node = tokenized[family]
    for (text, lang, target), want, got in zip(job["encode"], python["encoded"], node["encoded"]):
        assert got == want, (text, lang, target)
    assert sum("value" in e for e in python["encoded"]) >= 50
    assert any("error" in e for e in python["encoded"])  # an unknown or inapplicable code: the same message


def test_mbart50_drops_a_trailing_space_in_python_and_node(tokenized):
    """MBart50Tokenizer strips trailing whitespace after the charsmap (transformers 5.25; tokenizer.json
    keeps it): the export says so (strip_right), and both runtimes encode "x " as "x"."""
    job, python, node = tokenized["mbart50"]
    assert job["spec"]["strip_right"] is True
    ours = tokenizer_from_dict(job["spec"], hf_fixtures.trained_folder("mbart50"))
    trailing = [(k, text, lang) for k, (text, lang, _) in enumerate(job["encode"])
                if text != text.rstrip() and "value" in python["encoded"][k]]
    assert len(trailing) >= 3
    for k, text, lang in trailing:
        assert python["encoded"][k] == node["encoded"][k] == {"value": ours.encode(text.rstrip(), lang)}, text


@pytest.mark.parametrize("family", TOKENIZED)
def test_node_forces_the_target_language_like_python(tokenized, family):
    job, python, node = tokenized[family]
    assert node["forced"] == python["forced"], job["targets"]
    if family in hf_fixtures.LANGS:
        assert sum(f.get("value") is not None for f in python["forced"]) >= 2


@pytest.mark.parametrize("family", TOKENIZED)
def test_node_decodes_random_ids_like_python(tokenized, family):
    job, python, node = tokenized[family]
    assert node["decoded"] == python["decoded"]
    assert sum(bool(text) for text in python["decoded"]) > 100


PIECES_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { findCharsmap, SentencePieceNormalizer, SentencePieceUnigram } = await import(pathToFileURL(process.argv[2]).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(job.models.map(({ json, rules }) => {
  const tokenizer = JSON.parse(readFileSync(json, 'utf8'));
  const normalizer = new SentencePieceNormalizer({ charsmap: findCharsmap(tokenizer.normalizer),
    addDummyPrefix: rules.add_dummy_prefix, removeExtraWhitespaces: rules.remove_extra_whitespaces });
  const model = new SentencePieceUnigram(tokenizer.model);
  return job.texts.map((text) => model.pieces(normalizer.normalize(text)));
})));
"""

# SentencePiece settings beyond the fixture's (nmt_nfkc, dummy prefix, extra spaces removed).
SPM_SETTINGS = {"nfkc-as-is": dict(normalization_rule_name="nfkc", add_dummy_prefix=False, remove_extra_whitespaces=False),
                "nmt_nfkc_cf": dict(normalization_rule_name="nmt_nfkc_cf", remove_extra_whitespaces=False),
                "identity": dict(normalization_rule_name="identity")}


def test_sentencepiece_pieces_are_sentencepieces(tmp_path):
    """runtimes/node/text/sentencepiece.mjs on the tokenizer.json of unigram models of several normalisation
    settings: the sentencepiece library's pieces on random strings, ties between segmentations included
    (these models have ".", ".." and no "...": float32 and float64 sums pick differently)."""
    spm = pytest.importorskip("sentencepiece")
    from tfm_export.text.spm_json import write_tokenizer_json

    corpus = [str(n) for n in range(3000)] + hf_fixtures.UNICODE * 5 + ["the  quick   brown fox \ufb01ne \u2460"] * 20
    models, processors = [], []
    for name, settings in SPM_SETTINGS.items():
        spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(tmp_path / name),
                                       vocab_size=400, model_type="unigram", character_coverage=1.0, bos_id=-1,
                                       eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2, hard_vocab_limit=False, **settings)
        rules = write_tokenizer_json(tmp_path / f"{name}.model", tmp_path / f"{name}.json")
        models.append({"json": str(tmp_path / f"{name}.json"), "rules": rules.to_dict()})
        processors.append(spm.SentencePieceProcessor(model_file=str(tmp_path / f"{name}.model")))
    texts = [text for text, _ in marian_texts()]
    got = node_script(tmp_path, PIECES_JS, {"models": models, "texts": texts}, NODE / "text" / "sentencepiece.mjs")
    for name, processor, pieces in zip(SPM_SETTINGS, processors, got):
        wrong = [(t, w, g) for t, w, g in zip(texts, processor.encode(texts, out_type=str), pieces) if w != g]
        assert not wrong, (name, wrong[:5])


def test_charsmap_normaliser_is_the_rust_one(tmp_path):
    """Every distinct precompiled charsmap of the fixtures, on random strings of the characters its
    rules cover, combining marks, Hangul jamo and emoji with modifiers and joiners."""
    from tokenizers.normalizers import Precompiled

    charsmaps = {}
    for family in HF_FAMILIES:
        normalizer = json.loads((hf_fixtures.TRAINED / family / "tokenizer.json").read_text())["normalizer"] or {}
        for part in [normalizer, *normalizer.get("normalizers", [])]:
            if part.get("type") == "Precompiled":
                charsmaps.setdefault(part["precompiled_charsmap"], family)
    if not charsmaps:
        pytest.skip("SKIPPED: no fixture tokenizer.json has a Precompiled normaliser")
    blocks = ((0x20, 0x250), (0x300, 0x370), (0x1100, 0x1120), (0x2000, 0x2070), (0x2460, 0x2474),
              (0xFB00, 0xFB07), (0xFF01, 0xFF5F), (0x1F3FB, 0x1F400))
    pool = [chr(c) for a, b in blocks for c in range(a, b)] + list("\u200d\ufe0f\U0001F468\U0001F469\uac00")
    pool += sorted({c for text in hf_fixtures.UNICODE for c in text})
    rng = random.Random(0)
    texts = [''.join(rng.choice(pool) for _ in range(rng.randrange(1, 10))) for _ in range(3000)]
    for charsmap, family in charsmaps.items():
        rust = Precompiled(base64.b64decode(charsmap))
        got = node_script(tmp_path, NORMALIZE_JS, {"charsmap": charsmap, "texts": texts}, NODE / "text" / "charsmap.mjs")
        wrong = [(t, w, g) for t, w, g in zip(texts, map(rust.normalize_str, texts), got) if w != g]
        assert not wrong, (family, wrong[:5])


# --------------------------------------------------------------------------------------------------
# Trained exports: generation in Node and in the browser


def generation_job(family: str, folder: Path) -> dict:
    """Eight held-out task inputs; greedy and the export's default decoding (each target language of a
    multilingual model; T5's task prefix chooses instead), and beam 4 for one of them."""
    examples = hf_fixtures.task_examples(family, 8)
    if family in hf_fixtures.LANGS:
        source, targets = hf_fixtures.LANGS[family]
        inputs = [e.source for e in examples]
        runs = [{"target_lang": t, "options": o} for t in targets for o in ({"num_beams": 1}, {})]
    else:
        source, inputs = None, [e.source for e in examples]
        runs = [{"target_lang": None, "options": o} for o in ({"num_beams": 1}, {}, {"num_beams": 4})]
    return {"dir": str(folder), "inputs": inputs, "source_lang": source, "runs": runs}


def python_generation(job: dict) -> dict:
    """What GENERATE_JS answers, from the Python runtime."""
    model = open_export(job["dir"], "cpu")
    runs = []
    for run in job["runs"]:
        src, tgt, options = job["source_lang"], run["target_lang"], run["options"]
        sources = [model.encode(text, src, tgt) for text in job["inputs"]]
        ids = model.generate_ids(sources, **{**model.language_options(tgt), **options})
        texts = model.translate(job["inputs"], source_lang=src, target_lang=tgt, **options)
        pieces = list(model.stream(job["inputs"][0], source_lang=src, target_lang=tgt, **options))
        runs.append({"sources": sources, "ids": ids, "texts": texts, "pieces": pieces})
    languages = model.tokenizer.languages
    return {"languages": {"source": languages.codes("source"), "target": languages.codes("target"),
                          "sourceDefault": languages.source_default}, "runs": runs}


@pytest.mark.parametrize("family", GENERATED)
def test_node_generates_like_python(trained_export, tmp_path, family):
    folder = trained_export(family)
    job = generation_job(family, folder)
    node = node_script(tmp_path, GENERATE_JS, job, NODE)
    python = python_generation(job)
    assert node["languages"] == python["languages"]
    for run, got, want in zip(job["runs"], node["runs"], python["runs"]):
        assert got == want, run
    ids = [row for run in python["runs"] for row in run["ids"]]
    assert sum(map(len, ids)) > 3 * len(ids)  # real outputs, not EOS at once
    if family in hf_fixtures.LANGS:  # the target language changes the output
        assert python["runs"][0]["texts"] != python["runs"][2]["texts"]
        assert all(row[0] == python["runs"][0]["ids"][0][0] for row in python["runs"][0]["ids"])
    else:
        spec = json.loads((folder / "manifest.json").read_text())["graphs"]["decoder"]["inputs"]
        past = next(s for s in spec if s["name"] == "past.0.self.key")["shape"]
        config = json.loads((folder / "manifest.json").read_text())["config"]
        assert past[3] != config["d_model"] // config["n_heads"]


def marian_generation_job(folder: Path) -> dict:
    """Held-out numbers without a language token: each target language (Node puts its >>code<< on the
    source), greedy and the export's default beams."""
    inputs = [str(e.number) for e in hf_fixtures.task_examples("marian", 6)]
    runs = [{"target_lang": t, "options": o} for t in hf_fixtures.TARGETS["marian"] for o in ({"num_beams": 1}, {})]
    return {"dir": str(folder), "inputs": inputs, "source_lang": None, "runs": runs}


def test_node_translates_a_marian_export_like_python(trained_export, tmp_path):
    """Text in, text out in Node on the multi-target Marian export: the sources (>>de<< / >>en<< first),
    the generated ids (its default beams too), the texts and the streamed pieces are Python's."""
    pytest.importorskip("sentencepiece")
    folder = trained_export("marian")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tokenizer"]["sentencepiece"]["source"]["file"] == "source.tokenizer.json"
    assert "source.tokenizer.json" in manifest["files"]
    job = marian_generation_job(folder)
    node = node_script(tmp_path, GENERATE_JS, job, NODE)
    python = python_generation(job)
    assert node["languages"] == python["languages"] == {"source": [], "target": ["de", "en"], "sourceDefault": None}
    for run, got, want in zip(job["runs"], node["runs"], python["runs"]):
        assert got == want, run
    first, _, second, _ = python["runs"]
    assert first["texts"] != second["texts"] and all(" " in t or len(t) > 3 for t in first["texts"])
    assert open_export(folder, "cpu").generation.num_beams > 1  # the default runs are beam search


def test_node_cli_translates_marian_text(trained_export):
    """`node cli.mjs OUT TEXT` on a Marian export (issue #43): a >>de<< token in the text, or --target-lang."""
    if shutil.which("node") is None or not (NODE / "node_modules").exists():
        pytest.skip("SKIPPED: node or runtimes/node/node_modules missing")
    folder = trained_export("marian")
    model = open_export(folder, "cpu")
    texts = [e.source for e in hf_fixtures.task_examples("marian", 3)]
    cli_js = [shutil.which("node"), str(NODE / "cli.mjs"), str(folder)]
    done = subprocess.run([*cli_js, *texts], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == model.translate(texts)
    done = subprocess.run([*cli_js, "--num-beams", "1", "--target-lang", "en", "4718"], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.splitlines() == model.translate(["4718"], target_lang="en", num_beams=1), done.stderr
    bad = subprocess.run([*cli_js, "--target-lang", "fr", "12"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and bad.stderr == "error: unknown target language 'fr'; this model knows de, en\n"


OLD_MARIAN_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(process.argv[2]).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const ids = await model.generateIds(job.sources);
let refused = null;
try { await model.translate(['Hello']); } catch (err) { refused = err.message; }
await model.release();
process.stdout.write(JSON.stringify({ kind: model.tokenizer.kind, ids, refused }));
"""


def test_node_runs_a_marian_export_made_before_source_json_on_ids(trained_export, tmp_path):
    """An export from before source.tokenizer.json (its manifest without "sentencepiece"): Python reads it as
    before; Node decodes ids (its default beams) like Python and refuses text in one line saying to re-export."""
    pytest.importorskip("sentencepiece")
    old = tmp_path / "old"
    shutil.copytree(trained_export("marian"), old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["tokenizer"]["sentencepiece"], manifest["files"]["source.tokenizer.json"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "source.tokenizer.json").unlink()
    model = open_export(old, "cpu")
    sources = [model.encode(e.source) for e in hf_fixtures.task_examples("marian", 4)]
    node = node_script(tmp_path, OLD_MARIAN_JS, {"dir": str(old), "sources": sources}, NODE / "exported.mjs")
    assert node["ids"] == model.generate_ids(sources) and node["kind"] == "marian"
    assert node["refused"].startswith('this "marian" export has no source.tokenizer.json (exported before tfm-export '
                                      'wrote one')
    assert node["refused"].endswith("re-export it with this version, pass token ids, or use the Python runtime "
                                    "(tfm_export.runtime)")
    assert model.translate([hf_fixtures.task_examples("marian", 1)[0].source])[0]


def test_node_refuses_a_changed_tokenizer_json(trained_export, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(trained_export(MULTILINGUAL), copy)
    with open(copy / "tokenizer.json", "a", encoding="utf-8") as f:
        f.write("\n")
    script = (
        "import { pathToFileURL } from 'node:url';\n"
        "const { openExport } = await import(pathToFileURL(process.argv[2]).href);\n"
        f"try {{ await openExport({json.dumps(str(copy))}); console.log('opened'); }}\n"
        "catch (err) { console.log(err.message); }\n"
        f"const model = await openExport({json.dumps(str(copy))}, {{ verify: false }});\n"
        "console.log(model.tokenizer.kind); await model.release();\n")
    (tmp_path / "changed.mjs").write_text(script)
    if shutil.which("node") is None or not (NODE / "node_modules").exists():
        pytest.skip("SKIPPED: node or runtimes/node/node_modules missing")
    done = subprocess.run(["node", str(tmp_path / "changed.mjs"), str(NODE / "exported.mjs")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    refused, kind = done.stdout.strip().split("\n")
    assert re.fullmatch(r".*tokenizer\.json does not match the sha256 in manifest\.json .*re-run the export.*", refused)
    assert kind == "hf"


def test_node_cli_takes_language_codes(trained_export):
    if shutil.which("node") is None or not (NODE / "node_modules").exists():
        pytest.skip("SKIPPED: node or runtimes/node/node_modules missing")
    folder = trained_export(MULTILINGUAL)
    source, (_, target) = hf_fixtures.LANGS[MULTILINGUAL]
    cli_js = [shutil.which("node"), str(NODE / "cli.mjs"), str(folder)]
    listed = subprocess.run([*cli_js, "--languages"], capture_output=True, text=True, timeout=300)
    assert listed.stdout == run_cli("languages", folder).output
    inputs = [e.source for e in hf_fixtures.task_examples(MULTILINGUAL, 3)]
    done = subprocess.run([*cli_js, "--num-beams", "1", "--source-lang", source, "--target-lang", target, *inputs],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    want = open_export(folder, "cpu").translate(inputs, source_lang=source, target_lang=target, num_beams=1)
    assert done.stdout.splitlines() == want
    bad = subprocess.run([*cli_js, "--target-lang", "xx_YY", inputs[0]], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and bad.stderr.startswith("error: unknown target language 'xx_YY'; this model knows ")
    # a code that begins one of the model's (de for de_DE) is answered with those, in both runtimes alike
    short = target.split("_")[0]
    bad = subprocess.run([*cli_js, "--target-lang", short, inputs[0]], capture_output=True, text=True, timeout=300)
    python = run_cli("generate", folder, "--target-lang", short, "--text", inputs[0]).output.strip()
    assert python.startswith(f"Error: unknown target language {short!r}; did you mean {target}")
    assert bad.returncode == 1 and bad.stderr == f"error: {python.removeprefix('Error: ')}\n"


@pytest.mark.parametrize("family", [MULTILINGUAL, "marian"])
def test_browser_translates_like_python(trained_export, tmp_path, family):
    """The page on a multilingual export: greedy into one language, the default beams into another
    (mbart50: a forced first token; marian: the >>code<< the page puts on the source)."""
    browser_translates_like_python(trained_export(family), family, tmp_path)


def browser_translates_like_python(folder: Path, family: str, tmp_path: Path) -> None:
    """browser.test.mjs's test of an export with language codes, on `folder` (an export of `family`'s trained
    fixture; tests/test_int4.py's int4 export too): the page's ids and texts are the Python runtime's."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"SKIPPED: chromium not found at {CHROMIUM}; `apt-get install chromium` to run the browser test")
    if not (RUNTIMES / "web" / "node_modules" / "@huggingface" / "tokenizers").exists():
        pytest.skip(f"SKIPPED: {RUNTIMES}/web/node_modules missing; run `npm ci` there (make test does)")
    model = open_export(folder, "cpu")
    if family == "marian":
        source, (first, second) = None, hf_fixtures.TARGETS["marian"]
        inputs = [str(e.number) for e in hf_fixtures.task_examples(family, 4)]
    else:
        source, (first, second) = hf_fixtures.LANGS[family]
        inputs = [e.source for e in hf_fixtures.task_examples(family, 4)]
    runs = []
    for target, beams in ((second, 1), (first, model.generation.num_beams)):
        ids = model.generate_ids([model.encode(t, source, target) for t in inputs],
                                 **{**model.language_options(target), "num_beams": beams})
        runs.append({"target_lang": target, "num_beams": beams, "ids": ids,
                     "texts": [model.tokenizer.decode(row) for row in ids]})
    assert runs[1]["num_beams"] > 1  # the export's default decoding is beam search
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"inputs": inputs, "source_lang": source, "runs": runs}))
    out = run_node_tests(RUNTIMES / "web", None, files=("test/browser.test.mjs",),
                         env={"TFM_FAMILY_EXPORT_DIR": str(folder), "TFM_FAMILY_EXPECTED": str(expected)},
                         skips="TFM_EXPORT_DIR is not set")
    assert re.search(r"^ok \d+ - an export with language codes", out, re.M), out[-2000:]


# --------------------------------------------------------------------------------------------------
# CTranslate2's target_prefix and score in Node

CT2_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const lib = (name) => import(pathToFileURL(`${process.argv[2]}/${name}`).href);
const { openExport } = await lib('exported.mjs');
const { fromPythonNames } = await lib('options/generation.mjs');
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const prefixed = [];
for (const options of job.options) {
  prefixed.push(await model.generate(job.sources, { ...fromPythonNames(options), targetPrefix: job.prefixes }));
}
const scores = await model.score(job.sources, job.targets);
const errors = [];
for (const bad of job.bad_prefixes) {
  try { await model.generate(job.sources, { targetPrefix: bad }); errors.push(null); } catch (e) { errors.push(e.message); }
}
await model.release();
process.stdout.write(JSON.stringify({ prefixed, scores, errors }));
"""


@pytest.fixture(scope="module")
def ct2_job(trained_export) -> dict:
    folder = trained_export(MULTILINGUAL)
    model = open_export(folder, "cpu")
    source, (target, *_) = hf_fixtures.LANGS[MULTILINGUAL]
    examples = hf_fixtures.task_examples(MULTILINGUAL, 5)
    sources = [model.encode(e.source, source, target) for e in examples]
    forced = model.language_options(target)["forced_bos_token_id"]
    greedy = model.generate_ids(sources, **model.language_options(target))
    # prefixes: none, the forced token alone, a translation's first tokens (with and without the forced one), a
    # token the model would not choose: equal prefixes decode as one group in Node, and groups come back in order
    prefixes = [[], [forced], greedy[2][:3], greedy[3][1:3], [greedy[4][1] + 1]]
    targets = [greedy[0], greedy[1][:-1], greedy[2][::-1], [forced], greedy[4]]
    return {"dir": str(folder), "sources": sources, "prefixes": prefixes, "targets": targets, "forced": forced,
            "options": [{"num_beams": 1, "forced_bos_token_id": forced}, {"num_beams": 3, "forced_bos_token_id": forced}],
            "bad_prefixes": [[[0]] * 2, [[model.config.tgt_vocab_size]] * 5]}


def test_node_target_prefix_and_score_equal_python(ct2_job, tmp_path):
    """CTranslate2's decoding API in Node (issue #62): `targetPrefix` and `score` equal Python's runtime (whose
    own tests check them against transformers) on the trained multilingual export: the forced target language in
    front of a prefix, beam search after it, and the one-line errors."""
    job = ct2_job
    node = node_script(tmp_path, CT2_JS, job, NODE)
    model = open_export(job["dir"], "cpu")
    for options, got in zip(job["options"], node["prefixed"]):
        want = model.generate(job["sources"], target_prefix=job["prefixes"], **options)
        assert [[h["ids"] for h in row] for row in got] == [[h.ids for h in row] for row in want], options
        np.testing.assert_allclose([[h["score"] for h in row] for row in got],
                                   [[h.score for h in row] for row in want], rtol=1e-5, atol=1e-5)
        for prefix, row in zip(job["prefixes"], want):  # every hypothesis starts with its prefix (forced one first)
            full = prefix if prefix[:1] == [job["forced"]] else [job["forced"], *prefix]
            assert all(h.ids[:len(full)] == full for h in row)
    want = model.score(job["sources"], job["targets"])
    assert [s["tokens"] for s in node["scores"]] == [s.tokens for s in want]
    for got, ref in zip(node["scores"], want):
        np.testing.assert_allclose(got["logProbs"], ref.log_probs, rtol=1e-5, atol=1e-5)
        assert got["score"] == pytest.approx(ref.score, abs=1e-4)
        assert got["normalizedScore"] == pytest.approx(ref.normalized, abs=1e-5)
    assert min(s.score for s in want) < max(s.score for s in want) - 1  # real scores: a reversed target is worse
    assert "2 prefixes for 5 sources" in node["errors"][0]
    assert "out of range for a vocabulary" in node["errors"][1]


# --------------------------------------------------------------------------------------------------
# CTranslate2's return_alternatives and vocabulary shortlist (vmap) in Node

ALTERNATIVES_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const lib = (name) => import(pathToFileURL(`${process.argv[2]}/${name}`).href);
const { openExport, VocabularyMap, loadVocabularyMap } = await lib('exported.mjs');
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.dir);
const forced = { forcedBosTokenId: job.forced };
const attempt = async (fn) => { try { await fn(); return null; } catch (e) { return e.message; } };
const alternatives = await model.generate(job.sources, { ...forced, targetPrefix: job.prefixes, returnAlternatives: true,
  numReturnSequences: 3 });
const noPrefix = await model.generate(job.sources, { ...forced, returnAlternatives: true, numReturnSequences: 2 });
const langs = { sourceLang: job.source_lang, targetLang: job.target_lang };
const texts = await model.translate(job.texts, { ...langs, returnAlternatives: true, numHypotheses: 3 });
const nbest = await model.translate(job.texts, { ...langs, numHypotheses: 2 });
const prefixedTexts = await model.translate(job.texts, { ...langs, targetPrefix: job.text_prefixes });
const built = VocabularyMap.fromPairs(job.pairs.sources, job.pairs.targets, { perToken: 6, frequent: 10 });
const piece = (p) => job.pieces[p];
const ct2 = VocabularyMap.fromCt2(job.ct2_text, piece, piece).toJSON();
const errors = { noMap: await attempt(() => model.generate(job.sources, { useVmap: true })) };
model.vmap = await loadVocabularyMap(job.vmap_file);
const vmapped = [];
for (const numBeams of [1, 5]) vmapped.push(await model.generate(job.sources, { ...forced, numBeams, useVmap: true }));
const vmappedIds = await model.generateIds(job.sources, { ...forced, numBeams: 1, useVmap: true });
const vmappedTexts = await model.translate(job.texts, { ...langs, useVmap: true });
const narrow = model.withShortlist(job.narrow);
const narrowed = [];
for (const numBeams of [1, 5]) narrowed.push(await narrow.generate(job.sources, { ...forced, numBeams }));
Object.assign(errors, {
  flag: await attempt(() => model.generate(job.sources, { returnAlternatives: 'yes' })),
  count: await attempt(() => model.generate(job.sources, { returnAlternatives: true, numReturnSequences: 0 })),
  range: await attempt(() => model.withShortlist([job.vocab])),
  file: await attempt(() => loadVocabularyMap(job.dir + '/manifest.json')),
  missing: await attempt(() => loadVocabularyMap(job.dir + '/no-such-vmap.json')),
});
await model.release();
process.stdout.write(JSON.stringify({ alternatives, noPrefix, texts, nbest, prefixedTexts, built: built.toJSON(), ct2,
  shortlist: built.shortlist(job.sources), vmapped, vmappedIds, vmappedTexts, narrowed, errors }));
"""


def hyp_rows(rows) -> list[list[list[int]]]:
    return [[h.ids if hasattr(h, "ids") else h["ids"] for h in row] for row in rows]


def hyp_scores(rows) -> list[list[float]]:
    return [[h.score if hasattr(h, "score") else h["score"] for h in row] for row in rows]


def test_node_alternatives_and_shortlist_equal_python(ct2_job, tmp_path):
    """CTranslate2's return_alternatives and vocabulary shortlist in Node (issue #62) equal Python's runtime (whose
    own tests, tests/test_ct2_api.py, check alternatives against transformers and its gathered head against the
    masked one) on the trained multilingual export: alternatives after a prefix (ids and scores) and without one;
    translate's alternatives, n-best and target prefixes as text; a vocabulary map built in Node (from pairs, from
    CTranslate2's text) equals Python's, and decoding under it (greedy and beams, generate, generateIds, translate)
    and under a shortlist narrow enough to change translations gives Python's ids; bad options are one line each."""
    from hf_fixtures import LANGS, example, split_numbers
    from tfm_export.runtime.decode.vmap import VocabularyMap

    job = dict(ct2_job)
    model = open_export(job["dir"], "cpu")
    source, (target, *_) = LANGS[MULTILINGUAL]
    options = {"forced_bos_token_id": job["forced"]}
    pairs = [example(MULTILINGUAL, n, target) for n in split_numbers()[0][::20]]
    pair_ids = {"sources": [model.encode(p.source, source, target) for p in pairs],
                "targets": [model.encode_target(p.target) for p in pairs]}
    vmap = VocabularyMap.from_pairs(pair_ids["sources"], pair_ids["targets"], per_token=6, frequent=10)
    vmap.save(tmp_path / "vmap.json")
    full = model.generate(job["sources"], num_beams=1, **options)
    dropped = {i for row in full for i in row[0].ids[1:3]}  # tokens the translations need: a shortlist without them
    narrow = [i for i in vmap.shortlist(job["sources"]).tolist() if i not in dropped]
    texts = [e.source for e in hf_fixtures.task_examples(MULTILINGUAL, 3)]
    # CTranslate2's text format: the fixed set (an empty source), a phrase (each of its tokens), unknown pieces dropped
    pieces = {"</s>": 2, "▁sechs": 40, "7": 7, "8": 8, "▁sieben": 41, "acht": 42}
    ct2_text = "\t</s> ▁sechs\n7\t▁sieben nosuch\n7 8\tacht\nnosuch\t▁sechs\n"
    (tmp_path / "vmap.txt").write_text(ct2_text, encoding="utf-8")
    VocabularyMap.load_ct2(tmp_path / "vmap.txt", pieces.get, pieces.get).save(tmp_path / "ct2.json")
    job.update(pairs=pair_ids, vmap_file=str(tmp_path / "vmap.json"), narrow=narrow, texts=texts, source_lang=source,
               target_lang=target, vocab=model.config.tgt_vocab_size, pieces=pieces, ct2_text=ct2_text,
               text_prefixes=[full[1][0].ids[1:3], [], full[0][0].ids[:2]])
    node = node_script(tmp_path, ALTERNATIVES_JS, job, NODE)

    want = model.generate(job["sources"], target_prefix=job["prefixes"], return_alternatives=True,
                          num_return_sequences=3, **options)
    assert hyp_rows(node["alternatives"]) == hyp_rows(want)
    np.testing.assert_allclose(hyp_scores(node["alternatives"]), hyp_scores(want), rtol=1e-5, atol=1e-5)
    assert all(len({tuple(ids) for ids in row}) == 3 for row in hyp_rows(want))  # three different branches
    want = model.generate(job["sources"], return_alternatives=True, num_return_sequences=2, **options)
    assert hyp_rows(node["noPrefix"]) == hyp_rows(want)
    np.testing.assert_allclose(hyp_scores(node["noPrefix"]), hyp_scores(want), rtol=1e-5, atol=1e-5)
    assert node["texts"] == model.translate(texts, source_lang=source, target_lang=target, return_alternatives=True,
                                            num_hypotheses=3)
    assert node["nbest"] == model.translate(texts, source_lang=source, target_lang=target, num_hypotheses=2)
    assert node["prefixedTexts"] == model.translate(texts, source_lang=source, target_lang=target,
                                                    target_prefix=job["text_prefixes"])

    assert node["built"] == json.loads((tmp_path / "vmap.json").read_text())
    ct2 = json.loads((tmp_path / "ct2.json").read_text())
    assert node["ct2"] == ct2 == {"fixed": [2, 40], "map": {"7": [41, 42], "8": [42]}}
    assert node["shortlist"] == vmap.shortlist(job["sources"]).tolist()
    model.vmap = vmap
    for beams, got in zip((1, 5), node["vmapped"]):
        assert hyp_rows(got) == hyp_rows(model.generate(job["sources"], num_beams=beams, use_vmap=True, **options))
    assert node["vmappedIds"] == [row[0] for row in hyp_rows(node["vmapped"][0])]
    assert node["vmappedTexts"] == model.translate(texts, source_lang=source, target_lang=target, use_vmap=True)
    narrowed = model.with_shortlist(narrow)
    for beams, got in zip((1, 5), node["narrowed"]):
        assert hyp_rows(got) == hyp_rows(narrowed.generate(job["sources"], num_beams=beams, **options))
    assert hyp_rows(node["narrowed"][0]) != hyp_rows(full)  # the shortlist changed translations
    assert all(set(h[1:]) <= set(narrow) | {job["forced"]} for row in hyp_rows(node["narrowed"][0]) for h in row)

    errors = node["errors"]
    assert errors["noMap"].startswith("useVmap needs a vocabulary map")
    assert errors["flag"] == 'returnAlternatives is true or false, got "yes"'
    assert "numReturnSequences from 1" in errors["count"] and "got 0" in errors["count"]
    assert errors["range"] == f"a shortlist id is out of range for a vocabulary of {job['vocab']} ids"
    assert "is not a vocabulary map" in errors["file"]
    assert "no-such-vmap.json: no such file" in errors["missing"]
    assert all("\n" not in e for e in errors.values())


def test_a_shortlist_without_the_target_language_still_forces_it(ct2_job):
    """Python's shortlist (the gathered head) on the multilingual export: a call's forced first token (the target
    language, not the export's own forced_bos_token_id) is added to the shortlist, so beam search's gathered bias
    can choose it: the ids equal the masked head's (states/shortlist.py's MaskedCache: what Node runs), not []."""
    from tfm_export.runtime.exported import Shortlisted
    from tfm_export.runtime.states.shortlist import MaskedCache

    model = open_export(ct2_job["dir"], "cpu")
    options, vocab = {"forced_bos_token_id": ct2_job["forced"]}, model.config.tgt_vocab_size
    ids = sorted({i for row in model.generate_ids(ct2_job["sources"], **options) for i in row} - {ct2_job["forced"]})
    gathered = model.with_shortlist(ids)
    masked = Shortlisted(model, MaskedCache(model.growing, gathered.ids, vocab, model.config.suppress_ids))
    assert ct2_job["forced"] not in gathered.ids
    for beams in (1, 5):
        rows = [h.ids for row in gathered.generate(ct2_job["sources"], num_beams=beams, **options) for h in row]
        assert rows == [h.ids for row in masked.generate(ct2_job["sources"], num_beams=beams, **options) for h in row]
        assert all(row[:1] == [ct2_job["forced"]] for row in rows)
