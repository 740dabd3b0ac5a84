"""Node's VAD (runtimes/node/speech/vad.mjs, chunks.mjs; issue #60): the same speech timestamps as Python's
runtime.speech.vad on the same audio and the same ONNX model (onnxruntime-node, one thread), for several
parameter settings, and `transcribe(..., { vad: true })` answering as Python's transcribe(vad=True) on the bundled
whisper-digits export. The recordings are tests/test_vad.py's: espeak-ng speech with pauses of low noise."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from helpers import NODE, spoken_marks
from tfm_export.resources import bundled
from tfm_export.runtime.speech import silero, vad
from tfm_export.runtime.speech.vad import VadParameters

pytestmark = spoken_marks()  # espeak-ng speaks the recordings; node and its packages run them

SETTINGS = [{}, dict(threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30),
            dict(threshold=0.3, neg_threshold=0.2, min_speech_duration_ms=100, min_silence_duration_ms=500,
                 speech_pad_ms=100),
            dict(min_silence_duration_ms=300, speech_pad_ms=50, max_speech_duration_s=1.0),
            dict(min_silence_duration_ms=300, speech_pad_ms=50, max_speech_duration_s=1.0,
                 use_max_poss_sil_at_max_speech=False)]

SCRIPT = """
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
const node = process.argv[2];
const ort = createRequire(`${node}/package.json`)('onnxruntime-node');
const vad = await import(pathToFileURL(`${node}/speech/vad.mjs`).href);
const silero = await import(pathToFileURL(`${node}/speech/silero.mjs`).href);
const { transcribe } = await import(pathToFileURL(`${node}/exported.mjs`).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const session = await silero.vadSession(ort, job.model);
const out = { spans: [], transcripts: [], words: [], errors: [] };
for (const file of job.recordings) {
  const buffer = readFileSync(file);
  const samples = new Float32Array(buffer.buffer, buffer.byteOffset, buffer.length / 4);
  const probs = await silero.speechProbabilities(ort, session, samples);
  out.spans.push({ probs: Array.from(probs), bySetting: [] });
  for (const settings of job.settings) {
    const spans = vad.timestampsFromProbabilities(probs, samples.length, new vad.VadParameters(settings));
    out.spans.at(-1).bySetting.push(spans.map((s) => [s.start, s.end]));
  }
  out.transcripts.push(await transcribe(job.export, samples, { vad: true, timestamps: true }));
  out.words.push((await transcribe(job.export, samples, { vad: true, wordTimestamps: true })).words);
}
for (const bad of [{ threshold: 1 }, { pad: 3 }]) {
  try { new vad.VadParameters(bad); } catch (err) { out.errors.push(err.message); }
}
const first = readFileSync(job.recordings[0]);
const direct = await vad.speechTimestamps(ort, session, new Float32Array(first.buffer, first.byteOffset, first.length / 4));
out.direct = direct.map((s) => [s.start, s.end]);
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node_answers(digits_export, tmp_path_factory):
    from test_vad import FIRST, PAUSE, SECOND, recording

    folder = tmp_path_factory.mktemp("node-vad")
    cases = [recording([1.0, FIRST, PAUSE, SECOND, 1.0]),
             recording([0.5, ("one two three", "en+m3", 170, 45), 0.25, ("five six", "en-gb-x-rp", 140, 60), 0.6,
                        ("zwei drei vier", "de", 165, 55), 12.0, ("eight nine", "en-gb-scotland+f1", 185, 30), 0.8],
                       seed=1)]
    files = []
    for n, (samples, _) in enumerate(cases):
        files.append(folder / f"case{n}.f32")
        samples.astype("<f4").tofile(files[-1])
    script = folder / "vad.mjs"
    script.write_text(SCRIPT)
    job = {"model": str(bundled("silero-vad") / silero.MODEL_FILE),
           "recordings": list(map(str, files)), "settings": SETTINGS, "export": str(digits_export)}
    done = subprocess.run(["node", str(script), str(NODE)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=600, cwd=NODE)
    assert done.returncode == 0, done.stderr[-3000:]
    return [c[0] for c in cases], json.loads(done.stdout)


def test_node_speech_timestamps_equal_python(node_answers):
    recordings, answers = node_answers
    for samples, got in zip(recordings, answers["spans"]):
        probs = silero.speech_probabilities(samples)
        assert np.array_equal(np.float32(got["probs"]), probs)  # every window, many a call on both sides
        for settings, spans in zip(SETTINGS, got["bySetting"]):
            want = vad.timestamps_from_probabilities(probs, len(samples), VadParameters(**settings))
            assert [tuple(s) for s in spans] == [tuple(s) for s in want], settings
            assert want
    assert [tuple(s) for s in answers["direct"]] == [tuple(s) for s in vad.speech_timestamps(recordings[0])]
    assert answers["errors"][0].startswith("VAD threshold must be between 0 and 1")
    assert answers["errors"][1].startswith("unknown vad_parameters: pad; they are")


def test_node_transcribe_vad_equals_python(node_answers, digits_export):
    from tfm_export.runtime import open_export

    model = open_export(digits_export, device="cpu")
    recordings, answers = node_answers
    for samples, got, words in zip(recordings, answers["transcripts"], answers["words"]):
        want = model.transcribe(samples, vad=True, timestamps=True)
        assert got["ids"] == want["ids"] and got["text"] == want["text"] and got["language"] == want["language"]
        assert [(s["seek"], s["start"], s["end"], s["text"]) for s in got["segments"]] == \
            [(s["seek"], s["start"], s["end"], s["text"]) for s in want["segments"]]
        # words: mapped back alike; their times from DTW over ORT-node's and ORT's float32 cross-attention, which
        # can pick another path at a near-tie (tests/test_whisper_trained.py), so near and not equal
        want_words = model.transcribe(samples, vad=True, word_timestamps=True)["words"]
        assert [w["word"] for w in words] == [w["word"] for w in want_words]
        assert all(abs(a[k] - b[k]) <= 0.25 for a, b in zip(words, want_words) for k in ("start", "end"))
    assert answers["transcripts"][0]["text"].split() == "seven three nine four two eight".split()
