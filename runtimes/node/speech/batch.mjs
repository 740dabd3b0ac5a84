// Batched transcription: the VAD chunks of a recording, and several recordings, decoded together: the port of
// tfm_export/runtime/speech/batch.py (issue #60).
//
//   await transcribe(model, 'talk.wav', { vad: true, batchSize: 8 });       // the talk's speech chunks 8 at a time
//   await transcribe(model, ['a.wav', 'b.wav', 'c.wav'], { batchSize: 8 });  // an array in, an array of answers out
//
// Every chunk (with `vad`) or recording (without) is one job: speech/whisper.mjs's `transcribe` of it, run
// `batchSize` jobs at a time, their windows decoded together round by round (speech/batch_rounds.mjs: the encoder
// batched over the round's windows, the decoder's rows together). A chunk is at most one window (30 s): a round of
// n chunks is one encoder call of n windows and the decoder steps of the longest. The answers are those of the jobs
// run one after the other: each chunk transcribed as speech/chunks.mjs transcribes it, the first chunk's language
// (given, else detected, all recordings' first chunks in one round) given to the recording's other chunks, the
// chunks' answers joined as chunks.mjs's `joined` joins them. No Node APIs: a page can import it.
import { featureConfig, logMel } from '../audio/features.mjs';
import { GrowingCache } from '../states/growing.mjs';
import { runJobs } from './batch_rounds.mjs';
import { joined, speechChunks } from './chunks.mjs';
import { needsDetection, whisperSettings } from './prompt.mjs';
import { LanguageDetector } from './search.mjs';

/**
 * Each recording's language for its chunks (Python's _detect): the given one, else its first chunk's (as the
 * sequential path detects it on that chunk), as the language's token; null where there is nothing to detect.
 */
async function detect(model, speeches, language, task, batchSize, cache, runner) {
  const settings = whisperSettings(model.manifest);
  const given = language !== undefined && language !== null;
  if (given || !needsDetection(settings, null, task)) return speeches.map(() => (given ? language : null));
  const config = featureConfig(model.manifest);
  const tokens = Object.fromEntries(Object.entries(settings.lang_to_id ?? {}).map(([token, id]) => [id, token]));
  const firsts = speeches.flatMap((speech, n) => (speech.chunks.length ? [n] : []));
  const jobs = firsts.map((n) => async (runWindow) => {
    const detector = new LanguageDetector(settings);
    await runWindow(logMel(speeches[n].chunks[0].samples, config), detector);
    return tokens[detector.found];
  });
  const found = await runJobs(jobs, batchSize, cache, runner);
  const languages = speeches.map(() => null);
  firsts.forEach((n, i) => { languages[n] = found[i]; });
  return languages;
}

/**
 * Each recording's answer, their windows decoded `batchSize` at a time (the module comment; Python's
 * transcribe_batch). `transcribe(audio, options)`: one recording's or chunk's transcription (speech/whisper.mjs's,
 * bound to the model; it takes `runner`); `plan`: the VAD's chunking (speech/chunks.mjs's ChunkPlan, with `session`
 * the VAD's and `parameters` its settings; null: each recording whole); `labels`: each recording's name in errors;
 * `runner`: a window runner to decode on (default: rounds on a cache of the export's own); the other options are
 * transcribe's. With `plan`, `audios` are Float32Array samples at the VAD's rate (16 kHz).
 */
export async function transcribeBatch(ort, model, audios, transcribe, plan, batchSize,
  { session = null, parameters = null, labels = [], runner = null, language = null, ...options } = {}) {
  const cache = runner ? null : new GrowingCache(ort, model);
  const labelled = (n, o) => (labels[n] === undefined ? o : { ...o, label: labels[n] });
  if (plan === null) {
    const jobs = audios.map((audio, n) => (runWindow) => transcribe(audio, labelled(n, { ...options, language,
      runner: runWindow })));
    return runJobs(jobs, batchSize, cache, runner);
  }
  const speeches = [];
  for (const samples of audios) speeches.push(await speechChunks(ort, session, samples, plan, parameters));
  const languages = await detect(model, speeches, language, options.task ?? 'transcribe', batchSize, cache, runner);
  const jobs = [];
  const owners = [];
  speeches.forEach((speech, n) => {
    for (const chunk of speech.chunks) {
      jobs.push((runWindow) => transcribe(chunk.samples, labelled(n, { ...options, language: languages[n],
        maxSeconds: null, runner: runWindow })));
      owners.push(n);
    }
  });
  const results = await runJobs(jobs, batchSize, cache, runner);
  return speeches.map((speech, n) => joined(speech, results.filter((_, i) => owners[i] === n), plan, language,
    Boolean(options.wordTimestamps)));
}
