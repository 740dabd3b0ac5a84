"""Node's live transcription (runtimes/node/speech/streaming.mjs) confirms Python's text, chunk for chunk (issue #61).

The same held-out espeak-ng recordings (models/whisper-digits/speech.py), as the same float32 samples, are fed in
100 ms chunks to Python's StreamTranscriber (tfm_export/runtime/speech/streaming.py) and to Node's
`model.streamTranscribe(chunks)` on the trained fixture's export (conftest's digits_export). After every chunk
Node has confirmed exactly Python's text, and its tentative text is Python's: the ids of each re-transcription
are Python's (tests/test_node_speech.py), and so are the word times LocalAgreement-2 reads (alignment.onnx's
dynamic time warping), the buffer's cuts and the prompt. Cases: one window, language detected; four windows and
more (the buffer trimmed at confirmed segments); German with the language given; a prompt of the confirmed
text trimmed off (prompt_chars 30); segment times instead of word times (the export without alignment.onnx);
`model.streamTranscriber()` fed by hand equals the async iterator.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import DIGITS as FOLDER
from helpers import NODE, node_module, spoken_marks
from tfm_export.runtime import open_export
from tfm_export.runtime.speech.streaming import StreamOptions, StreamTranscriber

sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = spoken_marks()
CHUNK = RATE // 10  # 100 ms

# Node feeds each case's samples (FILE.f32) in 100 ms chunks: per case, each chunk's updates (or the final one)
STREAM_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(`${process.argv[1]}/exported.mjs`).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const models = {};
const open = async (dir) => (models[dir] ??= await openExport(dir));
const shown = (u) => ({ confirmed: u.confirmed, tentative: u.tentative, text: u.text, final: u.final,
  language: u.language, words: u.words.map((w) => [w.start, w.end, w.text]) });
const out = [];
for (const { dir, file, options, byHand } of job.cases) {
  const data = readFileSync(file);
  const samples = new Float32Array(data.buffer, data.byteOffset, data.length / 4);
  const chunks = [];
  for (let at = 0; at < samples.length; at += job.chunk) chunks.push(samples.subarray(at, at + job.chunk));
  const model = await open(dir);
  const updates = [];
  if (byHand) {
    const stream = model.streamTranscriber(options);
    for (const [n, chunk] of chunks.entries()) for (const u of await stream.feed(chunk)) updates.push([n, shown(u)]);
    updates.push([chunks.length, shown(await stream.finish())]);
  } else {
    let n = 0;
    async function* fed() { for (const chunk of chunks) { yield chunk; n += 1; } }
    // an update comes out while its chunk is being fed: n counts the chunks fed before it
    for await (const u of model.streamTranscribe(fed(), options)) updates.push([u.final ? chunks.length : n, shown(u)]);
  }
  out.push(updates);
}
console.log(JSON.stringify(out));
for (const model of Object.values(models)) await model.release();
"""


def heldout(first: int, count: int) -> list[Spoken]:
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    return [Spoken.from_row(row) for row in rows[first:first + count]]


def recording(spoken: list[Spoken], pause: float) -> np.ndarray:
    gap = np.zeros(int(pause * RATE), np.float32)
    return np.concatenate([gap[: RATE // 4]] + [part for s in spoken for part in (s.samples(), gap)]).astype(np.float32)


def python_updates(model, samples: np.ndarray, **options) -> list:
    """Python's updates, each with the chunks fed before it ([n, fields] as Node's script writes them)."""
    stream = StreamTranscriber(model, **options)
    out = []
    chunks = [samples[i:i + CHUNK] for i in range(0, len(samples), CHUNK)]
    for n, chunk in enumerate(chunks):
        out += [[n, u] for u in stream.feed(chunk)]
    out.append([len(chunks), stream.finish()])
    return [[n, {"confirmed": u.confirmed, "tentative": u.tentative, "text": u.text, "final": u.final,
                 "language": u.language, "words": [[w.start, w.end, w.text] for w in u.words]}] for n, u in out]


@pytest.fixture(scope="module")
def no_alignment(digits_export, tmp_path_factory) -> Path:
    """The export without alignment.onnx in its manifest: words timed by their segments, on both sides."""
    folder = tmp_path_factory.mktemp("noalign") / "onnx"
    shutil.copytree(digits_export, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["graphs"]["alignment"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def close_words(got: list, want: list) -> bool:
    """Word times equal to float rounding (both sides add the same offsets to the same 0.01 s times)."""
    return len(got) == len(want) and all(g[2] == w[2] and abs(g[0] - w[0]) < 1e-9 and abs(g[1] - w[1]) < 1e-9
                                         for g, w in zip(got, want))


def test_node_confirms_pythons_text_chunk_for_chunk(digits_export, no_alignment, tmp_path):
    no_prompt = {"prompt_chars": 0}
    # (recording, Python's options, Node's, folder, fed by hand)
    cases = [
        (recording(heldout(0, 1), 0.4), {"options": no_prompt}, {"options": {"promptChars": 0}}, digits_export, False),
        (recording(heldout(0, 6), 0.7), {"options": no_prompt}, {"options": {"promptChars": 0}}, digits_export, False),
        (recording(heldout(61, 3), 0.5), {"language": "de", "options": no_prompt},
         {"language": "de", "options": {"promptChars": 0}}, digits_export, True),
        (recording(heldout(8, 5), 0.7), {"options": {"prompt_chars": 30}}, {"options": {"promptChars": 30}},
         digits_export, False),
        (recording(heldout(20, 5), 0.7), {"options": no_prompt}, {"options": {"promptChars": 0}}, no_alignment, True),
    ]
    job = {"chunk": CHUNK, "cases": []}
    want = []
    for n, (samples, py, js, folder, by_hand) in enumerate(cases):
        file = tmp_path / f"{n}.f32"
        samples.tofile(file)
        job["cases"].append({"dir": str(folder), "file": str(file), "options": js, "byHand": by_hand})
        model = open_export(folder, device="cpu")
        assert StreamTranscriber(model).timed == (folder == digits_export)
        options = {**py, "options": StreamOptions(**py["options"])}
        want.append(python_updates(model, samples, **options))
    done = node_module(STREAM_JS, NODE, stdin=json.dumps(job), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    for n, (mine, theirs) in enumerate(zip(got, want)):
        assert [m[0] for m in mine] == [t[0] for t in theirs], f"case {n}: updates after other chunks"
        for (at, m), (_, t) in zip(mine, theirs):
            where = f"case {n}, after chunk {at}"
            assert {k: v for k, v in m.items() if k != "words"} == {k: v for k, v in t.items() if k != "words"}, where
            assert close_words(m["words"], t["words"]), (where, m["words"], t["words"])
        assert theirs[-1][1]["final"] and theirs[-1][1]["text"].strip()
        assert sum(1 for _, t in theirs if t["confirmed"] and not t["final"]) >= 1, f"case {n}: nothing confirmed live"
    assert len(got) == len(want)


def test_bad_chunks_are_one_line(digits_export):
    script = """
    import { pathToFileURL } from 'node:url';
    const { openExport } = await import(pathToFileURL(`${process.argv[1]}/exported.mjs`).href);
    const model = await openExport(process.argv[2]);
    for (const bad of [() => model.streamTranscriber().feed(new Int16Array(10)),
                       () => model.streamTranscriber({ options: { stepSeconds: 0 } })]) {
      try { await bad(); console.log('no error'); } catch (err) { console.log(err.message); }
    }
    await model.release();
    """
    done = node_module(script, NODE, digits_export, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["stream samples must be a Float32Array at 16000 Hz, got Int16Array",
                                        "stepSeconds and trimSeconds must be above 0"]
