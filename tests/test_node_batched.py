"""Node's batched long form (runtimes/node/speech/batch.mjs, batch_rounds.mjs, decode/together.mjs; issue #60): the
VAD chunks of a recording, and several recordings, decoded together give the answers of Node's one-after-the-other
transcription and of Python's batched one (runtime.speech.batch) on the same audio.

The recordings are tests/test_batched_longform.py's: espeak-ng speech with pauses of low noise, transcribed by
the bundled whisper-digits export (multilingual: the first chunk's language is detected). The script counts the
encoder's batches (its first input's first dimension) to show the windows were decoded together.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import NODE, spoken_marks
from tfm_export.resources import bundled
from tfm_export.runtime.speech import chunks, silero, whisper
from tfm_export.runtime.speech.batch import transcribe_batch
from tfm_export.runtime.speech.silero import RATE

pytestmark = spoken_marks()  # espeak-ng speaks the recordings; node and its packages run them

SPLIT = dict(min_silence_duration_ms=300, speech_pad_ms=100)  # test_batched_longform.SPLIT: every pause ends a span

SCRIPT = r"""
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
const [node, jobFile] = process.argv.slice(1);
const load = (file) => import(pathToFileURL(`${node}/${file}`).href);
const ort = createRequire(`${node}/package.json`)('onnxruntime-node');
const { openExport, transcribe } = await load('exported.mjs');
const speech = await load('speech/whisper.mjs');
const { ChunkPlan, transcribeSpeech, whisperPlan } = await load('speech/chunks.mjs');
const { transcribeBatch } = await load('speech/batch.mjs');
const { vadSession } = await load('speech/silero.mjs');
const job = JSON.parse(readFileSync(jobFile, 'utf8'));
const samples = (file) => { const b = readFileSync(file); return new Float32Array(b.buffer, b.byteOffset, b.length / 4); };
const model = await openExport(job.export);
let batches = [];
const encode = model.encoder.run.bind(model.encoder);
model.encoder.run = (feeds, ...rest) => { batches.push(Object.values(feeds)[0].dims[0]); return encode(feeds, ...rest); };
const counted = async (fn) => { batches = []; const result = await fn(); return { result, batches: [...batches] }; };
const out = {};
const [long, talk, ...more] = job.recordings.map(samples);
const opts = { vad: true, vadParameters: job.split, timestamps: true };
out.long = {};
for (const batchSize of [1, 4, 8]) out.long[batchSize] = await counted(() => transcribe(model, long, { ...opts, batchSize }));
// a short window (1.5 s) makes a chunk of each utterance: many chunks, rounds of 4 and the rest
const session = await vadSession(ort, job.vad);
const plan = new ChunkPlan(16000, 1.5, whisperPlan(model.manifest).framesPerSecond);
const one = (audio, o) => speech.transcribe(ort, model, audio, o);
out.short = {};
for (const numBeams of [1, 2]) {
  out.short[numBeams] = {
    alone: await counted(() => transcribeSpeech(ort, session, talk, one, plan, job.split, { timestamps: true, numBeams })),
    together: await counted(() => transcribeBatch(ort, model, [talk], one, plan, 4,
      { session, parameters: job.split, timestamps: true, numBeams })),
  };
}
const recordings = [talk, ...more];
out.many = {};
for (const vad of [false, true]) {
  const o = vad ? opts : { timestamps: true };
  out.many[vad] = { alone: [], together: await counted(() => transcribe(model, recordings, { ...o, batchSize: 3 })) };
  for (const r of recordings) out.many[vad].alone.push(await transcribe(model, r, o));
}
out.errors = [];
for (const bad of [0, -2, 1.5, true, '4', null]) {
  try { await transcribe(model, talk, { vad: true, batchSize: bad }); out.errors.push(null); }
  catch (err) { out.errors.push(err.message); }
}
try { await transcribe(model, [talk, new Int16Array(16000), talk], { batchSize: 2 }); out.failed = null; }
catch (err) { out.failed = err.message; }
await model.release();
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def digits(digits_export):
    from tfm_export.runtime import open_export

    return open_export(digits_export, device="cpu")


@pytest.fixture(scope="module")
def cases(digits_export, tmp_path_factory):
    """(recordings, Node's answers): a recording of over 30 s of speech (several Whisper chunks), the talk of six
    utterances, and two cuts of it."""
    from test_batched_longform import UTTERANCES
    from test_vad import recording

    pauses = [0.5, 0.8, 3.0, 0.6, 1.5, 0.9, 0.7]  # test_batched_longform's talk: six utterances, pauses between
    parts = [pauses[0]]
    for utterance, pause in zip(UTTERANCES, pauses[1:]):
        parts += [utterance, pause]
    talk = recording(parts, seed=7)[0]
    long = np.concatenate([talk, recording([1.0, *UTTERANCES[:4], 0.5], seed=8)[0]] * 3)
    recordings = [long, talk, talk[: 4 * RATE], talk[2 * RATE:]]
    folder = tmp_path_factory.mktemp("node-batched")
    files = []
    for n, samples in enumerate(recordings):
        files.append(folder / f"case{n}.f32")
        samples.astype("<f4").tofile(files[-1])
    job = folder / "job.json"
    job.write_text(json.dumps({"export": str(digits_export), "recordings": list(map(str, files)), "split": SPLIT,
                               "vad": str(bundled("silero-vad") / silero.MODEL_FILE)}))
    from helpers import node_module

    done = node_module(SCRIPT, NODE, job, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return recordings, json.loads(done.stdout)


def fields(answer):
    """What Python and Node must agree on: ids, text, language, each segment's seek, times, text and ids."""
    return (answer["ids"], answer["text"], answer["language"],
            [(s["seek"], s["start"], s["end"], s["text"], s["tokens"]) for s in answer["segments"]])


def test_batched_vad_chunks_equal_sequential_and_python(cases, digits):
    recordings, answers = cases
    runs = answers["long"]
    sequential = runs["1"]["result"]
    assert max(runs["1"]["batches"]) == 1 and len(sequential["segments"]) >= 10
    assert any(s["start"] > 30.0 for s in sequential["segments"])
    for size in ("4", "8"):
        assert runs[size]["result"] == sequential  # every field, Node against Node
        assert max(runs[size]["batches"]) >= 2, runs[size]["batches"]  # the recording's chunks in one encoder call
        want = digits.transcribe(recordings[0], vad=True, vad_parameters=SPLIT, timestamps=True, batch_size=int(size))
        assert fields(runs[size]["result"]) == fields(want)


def test_rounds_of_short_chunks_greedy_and_beams(cases, digits):
    """Six chunks 4 at a time (Python's rounds [1, 4, 2]: the first chunk's language detected alone), greedy and
    with two beams per window: the one-by-one answer, and Python's batched one."""
    recordings, answers = cases
    features = whisper.speech_settings(digits)[1]
    plan = chunks.ChunkPlan(RATE, 1.5, features.nb_max_frames / features.chunk_length)
    for beams, run in answers["short"].items():
        alone, together = run["alone"], run["together"]
        assert together["result"] == [alone["result"]]
        assert max(alone["batches"]) == 1 and together["batches"] == [1, 4, 2]
        want = transcribe_batch(digits, [recordings[1]], whisper.transcribe, plan, 4, SPLIT, timestamps=True,
                                num_beams=int(beams))[0]
        assert fields(together["result"][0]) == fields(want) and want["language"] == "en"
        assert len(want["segments"]) >= 5


def test_several_recordings_in_one_call(cases, digits):
    recordings, answers = cases
    for vad_on, run in answers["many"].items():
        together = run["together"]
        assert together["result"] == run["alone"]
        assert max(together["batches"]) == 3, together["batches"]
        options = dict(vad=True, vad_parameters=SPLIT) if vad_on == "true" else {}
        want = digits.transcribe(recordings[1:], timestamps=True, batch_size=3, **options)
        assert [fields(a) for a in together["result"]] == [fields(a) for a in want]


def test_a_bad_batch_size_is_one_clear_error(cases):
    errors = cases[1]["errors"]
    assert errors == [f"batchSize must be a whole number of 1 or more, got {shown}"
                      for shown in ("0", "-2", "1.5", "true", '"4"', "null")]
    # a recording that fails stops the batch: its error, once the jobs in flight have ended
    assert cases[1]["failed"].startswith("audio must be a WAV file's bytes (Uint8Array, Buffer, ArrayBuffer) or a "
                                         "Float32Array of samples at 16000 Hz, got Int16Array")


def test_cli_vad_and_batch_size(cases, digits, digits_export, tmp_path):
    """`cli.mjs transcribe OUT a.wav b.wav --vad --batch-size 4 --json`: the lines of the file-by-file command, and
    Python's texts; the VAD's flags need --vad, and a bad --batch-size is one line."""
    import soundfile
    from helpers import node

    recordings = cases[0]
    files = []
    for n, samples in enumerate(recordings[1:3]):
        files.append(tmp_path / f"talk{n}.wav")
        soundfile.write(files[-1], samples, RATE, subtype="FLOAT")
    args = [NODE / "cli.mjs", "transcribe", digits_export, *files, "--vad", "--vad-min-silence-ms", "300",
            "--vad-pad-ms", "100", "--json", "--timestamps"]
    alone, together = node(*args), node(*args, "--batch-size", "4")
    assert alone.returncode == 0 and together.returncode == 0, together.stderr
    assert together.stdout == alone.stdout
    lines = [json.loads(line) for line in together.stdout.splitlines()]
    assert [line["file"] for line in lines] == list(map(str, files))
    want = digits.transcribe(list(recordings[1:3]), vad=True, vad_parameters=SPLIT, timestamps=True)
    assert [line["text"] for line in lines] == [a["text"] for a in want]
    bad = node(*args, "--batch-size", "0")
    assert bad.returncode == 1 and bad.stderr.strip() == 'error: --batch-size takes an integer of at least 1, got "0"'
    no_vad = node(NODE / "cli.mjs", "transcribe", digits_export, files[0], "--vad-pad-ms", "100")
    assert no_vad.returncode == 2 and no_vad.stderr.startswith("error: --vad-pad-ms sets the VAD; add --vad")
    threshold = node(*args, "--vad-threshold", "2")
    assert threshold.returncode == 1 and "--vad-threshold" in threshold.stderr and "Traceback" not in threshold.stderr
