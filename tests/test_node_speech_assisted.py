"""Speculative Whisper decoding in the Node runtime (runtimes/node/speech/assisted.mjs, issue #63): Node's
`transcribe` with `promptLookupNumTokens` or an `assistant` (the model itself, and its int8 variant: a cheaper draft
of the same tokenizer) gives Python's plain greedy transcript, ids, text and segments (the window measures within
1e-4, as tests/test_node_speech.py compares them), on the trained models/whisper-digits export and held-out
espeak-ng speech: short recordings (timestamps, the language detected, German given) and a recording of several
windows (seeking on the timestamps, with and without conditioning on the previous text, which prompt lookup drafts
from). Drafts are really accepted (the `speculation` counts: fewer decoder calls than ids with the self-draft); what
cannot speculate (beam search, windows batched, a draft of another vocabulary) is one line; the CLI's
--prompt-lookup and --assistant print the plain transcript. Live transcription (`streamTranscribe`) with each
proposer gives Python's plain greedy stream, update for update."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("transformers")

from helpers import DIGITS, NODE, node, node_module, spoken_marks  # noqa: E402
from test_node_speech import assert_same_transcript  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

sys.path.insert(0, str(DIGITS))
from speech import RATE, Spoken  # noqa: E402

pytestmark = [*spoken_marks(), pytest.mark.slow]


def runs_script(body: str) -> str:
    """A Node script over stdin's job {export, runs: [{file, options, assistant}], ...}: `body` runs each with `opts`
    (its options, the speculation counts to fill, the assistant folder opened once) and pushes to `out`, printed."""
    return r"""
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(`${process.argv[1]}/exported.mjs`).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const models = {};
const open = async (dir) => (models[dir] ??= await openExport(dir));
const model = await open(job.export);
const out = [];
for (const { file, options, assistant } of job.runs) {
  const speculation = { calls: 0, drafted: 0, accepted: 0 };
  const opts = { ...options, speculation, ...(assistant ? { assistant: await open(assistant) } : {}) };
""" + body + r"""
}
console.log(JSON.stringify(out));
for (const m of Object.values(models)) await m.release();
"""


# Each run: transcribe `file` with `options`, drafted by `assistant` when given; the answer and the speculation
# counts, or the error's message.
SCRIPT = runs_script(r"""
  try {
    out.push({ result: await model.transcribe(file, opts), speculation });
  } catch (err) {
    out.push({ error: err.message });
  }""")

SHORT = [({"timestamps": True}, {"timestamps": True}), ({}, {}),  # the language detected, before the window decodes
         ({"language": "de", "timestamps": True}, {"language": "de", "timestamps": True})]
LONG = [({"language": "en", "conditionOnPrevTokens": condition}, {"language": "en", "condition_on_prev_tokens": condition})
        for condition in (False, True)]


@pytest.fixture(scope="module")
def int8_draft(digits_export, tmp_path_factory):
    """The digits export with its encoder and decoder MatMuls quantised (export.int8), their sha256 recorded: a
    cheaper draft of the same tokenizer."""
    from tfm_export.export.int8 import quantize_int8

    int8 = tmp_path_factory.mktemp("digits-int8") / "onnx"
    shutil.copytree(digits_export, int8)
    manifest = json.loads((int8 / "manifest.json").read_text())
    for role in ("encoder", "decoder"):
        graph = manifest["graphs"][role]
        assert quantize_int8(digits_export / graph["file"], int8 / graph["file"], False) > 0
        graph["sha256"] = hashlib.sha256((int8 / graph["file"]).read_bytes()).hexdigest()
    (int8 / "manifest.json").write_text(json.dumps(manifest))
    return int8


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, list]:
    """"short": two English utterances and a German one as WAV files; "long": eight English ones with pauses."""
    spoken = [Spoken.from_row(row) for row in (DIGITS / "heldout.tsv").read_text().splitlines()]
    english = [s for s in spoken if s.language == "en"][:8]
    folder = tmp_path_factory.mktemp("assisted-wav")
    short = []
    for i, s in enumerate(english[:2] + [s for s in spoken if s.language == "de"][:1]):
        short.append((s.language, folder / f"{i}-{s.language}.wav"))
        soundfile.write(str(short[-1][1]), s.samples(), RATE)
    rng = np.random.default_rng(0)
    parts = []
    for s in english:
        parts += [np.zeros(int(rng.uniform(0.3, 0.9) * RATE), np.float32), s.samples()]
    soundfile.write(str(folder / "long.wav"), np.concatenate(parts), RATE)
    return {"short": short, "long": [("en", folder / "long.wav")]}


def node_runs(export, runs) -> list[dict]:
    job = {"export": str(export), "runs": [{**run, "file": str(run["file"])} for run in runs]}
    done = node_module(SCRIPT, NODE, stdin=json.dumps(job))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def proposers(int8_draft, digits_export) -> dict[str, dict]:
    """name -> what a run adds: Node's options and assistant folder."""
    return {"lookup": {"options": {"promptLookupNumTokens": 4}}, "self": {"assistant": str(digits_export)},
            "int8": {"options": {"numAssistantTokens": 5}, "assistant": str(int8_draft)}}


def transcripts(digits_export, int8_draft, recordings, cases, kind) -> tuple[list, list, list]:
    """(runs, Node's answers, Python's plain greedy answers) of every case x proposer on the `kind` recordings."""
    digits = open_export(digits_export, "cpu")
    runs, plain = [], []
    for node_options, python_options in cases:
        for language, file in recordings[kind]:
            if node_options.get("language", language) != language:
                continue
            want = digits.transcribe(str(file), **python_options)
            for name, extra in proposers(int8_draft, digits_export).items():
                runs.append({"file": file, "options": {**node_options, **extra.get("options", {})},
                             "assistant": extra.get("assistant"), "proposer": name})
                plain.append(want)
    return runs, node_runs(digits_export, runs), plain


def check_same(runs, got, plain) -> dict[str, np.ndarray]:
    """Every run's transcript is Python's plain greedy one; per proposer its (calls, drafted, accepted, ids + EOS)."""
    counts: dict[str, np.ndarray] = {}
    for run, answer, want in zip(runs, got, plain):
        assert "error" not in answer, (run, answer)
        assert_same_transcript(answer["result"], want, (run["proposer"], run["options"], run["file"].name))
        stats = answer["speculation"]
        windows = len({s["seek"] for s in want["segments"]})
        ids = len(want["ids"]) + windows  # at most one EOS per window
        counts[run["proposer"]] = counts.get(run["proposer"], 0) + np.array(
            [stats["calls"], stats["drafted"], stats["accepted"], ids])
        assert 0 <= stats["accepted"] <= stats["drafted"] and stats["calls"] >= windows
    return counts


def test_node_transcribes_short_recordings_speculatively_as_python(digits_export, int8_draft, recordings):
    counts = check_same(*transcripts(digits_export, int8_draft, recordings, SHORT, "short"))
    for name in ("self", "int8"):  # a draft model is right often; the self-draft always
        calls, drafted, accepted, ids = counts[name]
        assert accepted > 0 and calls < ids, name


def test_node_transcribes_a_long_recording_speculatively_as_python(digits_export, int8_draft, recordings):
    runs, got, plain = transcripts(digits_export, int8_draft, recordings, LONG, "long")
    assert len({s["seek"] for s in plain[0]["segments"]}) >= 4  # window after window
    counts = check_same(runs, got, plain)
    calls, drafted, accepted, ids = counts["self"]
    assert accepted > 0 and calls < ids
    assert counts["lookup"][1] > 0  # the conditioning text and the window's own ids give n-grams to draft


def test_node_refuses_what_cannot_speculate(digits_export, tiny_export, recordings):
    file = recordings["short"][0][1]
    runs = [{"file": file, "options": {"numBeams": 2, "promptLookupNumTokens": 3}},
            {"file": file, "options": {}, "assistant": str(tiny_export)}]
    got = node_runs(digits_export, runs)
    assert got[0]["error"] == ("speculative decoding (an assistant, prompt lookup) is greedy decoding's, not beam "
                               "search's (2 beams): transcribe with numBeams 1")
    assert got[1]["error"].startswith("the assistant does not share this model's vocabulary (")
    batched = node_module(
        "const { transcribe } = await import(`${process.argv[1]}/exported.mjs`);"
        "try { await transcribe(process.argv[2], [process.argv[3], process.argv[3]], { batchSize: 2, promptLookupNumTokens: 3 }); }"
        "catch (err) { console.log(err.message); }", NODE, digits_export, file)
    assert batched.stdout == ("promptLookupNumTokens: speculative decoding checks one window at a time, and batchSize 2 "
                              "decodes windows together (not speculated yet): use batchSize 1\n"), batched.stderr


def test_the_node_cli_transcribes_speculatively(digits_export, recordings):
    command = [NODE / "cli.mjs", "transcribe", digits_export, recordings["long"][0][1], "--language", "en",
               "--format", "srt"]
    plain = node(*command)
    assert plain.returncode == 0 and plain.stdout.count("-->") >= 4, plain.stderr
    for extra in (["--prompt-lookup", "4"], ["--assistant", digits_export]):
        done = node(*command, *extra)
        assert done.returncode == 0 and done.stdout == plain.stdout, done.stderr
    refused = node(*command, "--num-beams", "2", "--prompt-lookup", "4")
    assert refused.returncode == 1 and refused.stdout == "" and refused.stderr.count("\n") == 1
    assert refused.stderr.endswith("transcribe with numBeams 1\n")


# Each run: `file`'s float32 samples fed in `job.chunk`-sample chunks to model.streamTranscribe with `options` (and
# `assistant`): every update as [chunks fed before it, its fields], and the speculation counts.
STREAM_SCRIPT = runs_script(r"""
  const data = readFileSync(file);
  const samples = new Float32Array(data.buffer, data.byteOffset, data.length / 4);
  let n = 0;
  async function* fed() { for (let at = 0; at < samples.length; at += job.chunk) { yield samples.subarray(at, at + job.chunk); n += 1; } }
  const updates = [];
  for await (const u of model.streamTranscribe(fed(), opts)) {
    updates.push([u.final ? Math.ceil(samples.length / job.chunk) : n, { confirmed: u.confirmed, tentative: u.tentative,
      text: u.text, final: u.final, language: u.language, words: u.words.map((w) => [w.start, w.end, w.text]) }]);
  }
  out.push({ updates, speculation });""")


def test_node_streams_speculatively_as_python_streams_plainly(digits_export, int8_draft, tmp_path):
    """Live transcription (speech/streaming.mjs's streamTranscribe) with prompt lookup, the self-draft and the int8
    draft: every update (confirmed, tentative, words) after every chunk is Python's plain greedy stream's, and
    Python's stream with prompt lookup is too; each re-transcription of the buffer speculates (drafts accepted)."""
    from test_node_streaming import CHUNK, close_words, heldout, python_updates, recording

    samples = recording(heldout(0, 4), 0.7)
    file = tmp_path / "stream.f32"
    samples.tofile(file)
    digits = open_export(digits_export, "cpu")
    plain = python_updates(digits, samples, language="en")
    assert sum(1 for _, u in plain if u["confirmed"] and not u["final"]) >= 1  # text confirmed live
    assert python_updates(digits, samples, language="en", prompt_lookup_num_tokens=4) == plain
    runs = [{"file": str(file), "options": {"language": "en", **extra.get("options", {})},
             "assistant": extra.get("assistant")} for extra in proposers(int8_draft, digits_export).values()]
    done = node_module(STREAM_SCRIPT, NODE, stdin=json.dumps({"export": str(digits_export), "chunk": CHUNK,
                                                              "runs": runs}), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, answer in zip(proposers(int8_draft, digits_export), json.loads(done.stdout)):
        got = answer["updates"]
        assert [at for at, _ in got] == [at for at, _ in plain], name
        for (at, mine), (_, theirs) in zip(got, plain):
            assert {k: v for k, v in mine.items() if k != "words"} == {k: v for k, v in theirs.items() if k != "words"}, (
                name, at)
            assert close_words(mine["words"], theirs["words"]), (name, at)
        stats = answer["speculation"]
        assert stats["calls"] > 0 and 0 <= stats["accepted"] <= stats["drafted"], name
        if name != "lookup":  # a draft model is right often (the self-draft always)
            assert stats["accepted"] > 0, name
