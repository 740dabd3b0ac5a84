// The recordings of exported.mjs's `transcribe`, decoded: the port of tfm_export/runtime/speech/transcribe.py's
// dispatch for a Whisper export (Node transcribes Whisper exports only). The options are checked, each file read
// (one line when it cannot be), and the recordings decoded one after the other (speech/whisper.mjs), their speech
// only with the VAD (speech/chunks.mjs, speech/vad.mjs), or together with `batchSize` > 1 (speech/batch.mjs).
// Reads files with node:fs: Node's only (the page transcribes with speech/whisper.mjs itself).
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { transcribeBatch } from './batch.mjs';
import { transcribeSpeech, whisperPlan } from './chunks.mjs';
import { MODEL_FILE as VAD_FILE, RATE, vadSession } from './silero.mjs';
import * as speech from './whisper.mjs';

const VAD_MODEL = fileURLToPath(new URL(`../../../models/silero-vad/${VAD_FILE}`, import.meta.url)); // the checkout's
const vadSessions = {}; // one session per VAD model file: it keeps no state
const SPECULATION_OPTIONS = ['assistant', 'numAssistantTokens', 'promptLookupNumTokens']; // speech/assisted.mjs's

/**
 * `transcribe`'s recordings (`audios`: each a WAV file's path or bytes, or samples) as { audio, label }, and its
 * options split into the VAD's and the decode's; one line for options that do not fit together, or a file that
 * cannot be read.
 */
export async function readRecordings(audios, opts) {
  const { vad = false, vadParameters = null, vadModel = VAD_MODEL, batchSize = 1, ...options } = opts;
  if (vadParameters !== null && !vad) throw new Error('vadParameters are the VAD\'s: pass vad: true with them');
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new Error(`batchSize must be a whole number of 1 or more, got ${typeof batchSize === 'string' ? JSON.stringify(batchSize) : String(batchSize)}`);
  }
  const speculative = SPECULATION_OPTIONS.filter((name) => options[name]); // Python's rule: windows batched do not speculate
  if (speculative.length && batchSize > 1 && (audios.length > 1 || vad)) {
    throw new Error(`${speculative.join(', ')}: speculative decoding checks one window at a time, and batchSize ` +
      `${batchSize} decodes windows together (not speculated yet): use batchSize 1`);
  }
  const recordings = [];
  for (const one of audios) recordings.push(await readAudio(one, options.label));
  return { recordings, settings: { vad, vadParameters, vadModel, batchSize, options } };
}

/** { audio, label }: a path's bytes (a missing or unreadable file is one line), else the audio as it is. */
async function readAudio(audio, label) {
  if (typeof audio !== 'string') return { audio, label };
  const bytes = await readFile(audio).catch((err) => {
    throw new Error(err.code === 'ENOENT' ? `${audio}: no such file; check the path`
      : err.code === 'EISDIR' ? `${audio} is a folder; pass a WAV file` : `${audio} cannot be read (${err.code}); check its permissions`);
  });
  return { audio: bytes, label: label ?? audio };
}

/** The recording's samples for the VAD, at most `maxSeconds` (default 3600; null: no limit) long. */
function vadSamples({ audio, label }, maxSeconds) {
  const samples = speech.audioSamples(audio, RATE, label);
  const limit = maxSeconds === undefined ? 3600 : maxSeconds;
  if (limit !== null && samples.length / RATE > limit) {
    throw new Error(`the audio is ${(samples.length / RATE).toFixed(1)} s long, over the limit of ${limit} s (maxSeconds)`);
  }
  return samples;
}

/** Each recording's answer (Python's runtime/speech/transcribe.py dispatch): batched when `batchSize` > 1 and there
 * are several recordings or VAD chunks (speech/batch.mjs), else one recording, and one chunk, after the other. */
export async function transcribeRecordings(ort, model, recordings, { vad, vadParameters, vadModel, batchSize, options }) {
  const session = vad ? await (vadSessions[vadModel] ??= vadSession(ort, vadModel)) : null;
  const one = (audio, o) => speech.transcribe(ort, model, audio, o);
  const plan = vad ? whisperPlan(model.manifest) : null;
  const audios = vad ? recordings.map((r) => vadSamples(r, options.maxSeconds)) : recordings.map((r) => r.audio);
  if (batchSize > 1 && (recordings.length > 1 || vad)) {
    return transcribeBatch(ort, model, audios, one, plan, batchSize, { ...options, session, parameters: vadParameters,
      labels: recordings.map((r) => r.label) });
  }
  const results = [];
  for (const [n, audio] of audios.entries()) {
    const o = { ...options, label: recordings[n].label };
    results.push(await (vad ? transcribeSpeech(ort, session, audio, one, plan, vadParameters, o) : one(audio, o)));
  }
  return results;
}
