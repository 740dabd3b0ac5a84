// Run a tfm-export folder from Node.js with onnxruntime-node: the port of
// tfm_export/runtime/exported.py (open_export, ExportedModel) for Node's files and sessions, with the
// folder-or-model forms of every call. Reads manifest.json, checks the sha256 of the graphs and the
// tokenizer's files (like the Python runtime), tokenises with its tokenizer ("chars", or tokenizer.json:
// text/tokenizer.mjs), runs the encoder once and the KV-cache decoder once per token (api.mjs), and
// returns exactly the Python runtime's tokens: greedy, beam search, seeded sampling, streamed or not;
// multilingual models take language codes (`sourceLang`, `targetLang`; `languages(dir)` lists them).
// Module exports (a user's own architecture) decode the same way on their decoder without a cache; an
// encoder-only one is `run`. The package's main entry point (translate.mjs: its first name).
//
//   import { translate, generateIds, openExport } from 'tfm-export-node';
//   await translate('model_onnx', ['4718']);                  // opens the folder for this call
//   const model = await openExport('model_onnx');            // or open once, call many times
//   await generateIds(model, [[7, 4, 8, 11, 2]], { maxNewTokens: 20 });
//   await model.generate([[7, 4, 8, 11, 2]], { numBeams: 4, numReturnSequences: 2 }); // n-best with scores
//   for await (const piece of model.stream('4718', { doSample: true, seed: 1 })) process.stdout.write(piece);
//   await translate(model, ['Hello'], { sourceLang: 'en_XX', targetLang: 'de_DE' }); // a multilingual export
//   const server = connect('http://127.0.0.1:8080');      // the same calls on a `tfm-export serve` (client.mjs)
//   await transcribe('whisper_onnx', 'talk.wav', { numBeams: 2 }); // a Whisper export: { text, language, ids, ... }
//   for await (const u of whisper.streamTranscribe(chunks)) show(u.text, u.tentative); // live: confirmed + tentative
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import * as api from './api.mjs';
import { runtimeGraphs } from './checks.mjs';
import { checkGraph, openTokenizer, readManifest } from './manifest.mjs';
import { speechLanguages, whisperSettings } from './speech/prompt.mjs';
import { StreamTranscriber, streamTranscribe } from './speech/streaming.mjs';
import { readRecordings, transcribeRecordings } from './speech/transcribe.mjs';
import { languageCodes, languageOptions } from './text/tokenizer.mjs';
import { VocabularyMap } from './decode/vmap.mjs';

export { connect, ServerError } from './client.mjs';
export { VocabularyMap } from './decode/vmap.mjs';
export { toSrt, toVtt } from './speech/subtitles.mjs';

/**
 * An opened export folder (Python's ExportedModel): its manifest, tokenizer and one ONNX Runtime session
 * per graph it decodes with (`encoder`, `decoder`: null for an encoder-only export), and the calls bound to
 * it. Made by `openExport`; pass it instead of the folder path to decode many times.
 */
export class ExportedModel {
  constructor(folder, manifest, tokenizer, { verify = true, sessionOptions = {} } = {}) {
    Object.assign(this, { folder, manifest, tokenizer, encoder: null, decoder: null });
    this.options = { verify, sessionOptions };
    this.extra = {}; // graphs the decode loops do not run (alignment.onnx), opened and checked on first use
    this.vmap = null; // CTranslate2's vocabulary map (decode/vmap.mjs): generate(..., { useVmap: true }) shortlists by it
  }

  /**
   * This model with its output head restricted to `ids` (and EOS, the decoder start, the forced first token):
   * Python's with_shortlist, a view of the model whose calls choose among those only (states/shortlist.mjs).
   */
  withShortlist(ids) { return api.withShortlist(this, ids); }

  /** A session of graph `name` of the manifest. */
  async session(name) {
    return ort.InferenceSession.create(path.join(this.folder, this.manifest.graphs[name].file), this.options.sessionOptions);
  }

  /** Graph `name`'s session beside the decoder's (Python's extra_session: alignment.onnx), opened once. */
  async extraSession(name) {
    if (!this.extra[name]) {
      await checkGraph(this.folder, this.manifest, name, this.options.verify);
      this.extra[name] = await this.session(name);
    }
    return this.extra[name];
  }

  /** Releases the sessions. */
  async release() {
    for (const session of [this.encoder, this.decoder, ...Object.values(this.extra)]) await session?.release();
  }

  generateIds(idLists, opts) { return generateIds(this, idLists, opts); }

  generate(idLists, opts) { return generate(this, idLists, opts); }

  score(idLists, targets) { return score(this, idLists, targets); }

  translate(texts, opts) { return translate(this, texts, opts); }

  stream(source, opts) { return api.stream(ort, this, source, opts); }

  run(idLists) { return run(this, idLists); }

  transcribe(audio, opts) { return transcribe(this, audio, opts); }

  /** Live speech (Python's stream_transcribe): `chunks` (an iterable or async iterable of Float32Array samples at
   * 16 kHz, as they arrive) -> an async iterator of StreamUpdate { confirmed, tentative, text, words, final,
   * language }, the last one final (speech/streaming.mjs; opts: language, task, prompt, options, numBeams). */
  streamTranscribe(chunks, opts) { return streamTranscribe(ort, this, chunks, opts); }

  /** A live stream to feed by hand (speech/streaming.mjs's StreamTranscriber on this model). */
  streamTranscriber(opts) { return new StreamTranscriber(ort, this, opts); }

  languages() { return exportLanguages(this.manifest); }
}

/**
 * Open an export folder (Python's open_export): manifest checks, sha256 of every graph and tokenizer
 * file (unless `verify: false`), the tokenizer, and one ONNX Runtime session per graph.
 * `sessionOptions` go to ort.InferenceSession.create.
 */
export async function openExport(exportDir, { verify = true, sessionOptions = {} } = {}) {
  const manifest = await readManifest(exportDir);
  const options = { logSeverityLevel: 3, ...sessionOptions }; // keep ORT's C++ warnings quiet
  const tokenizer = await openTokenizer(exportDir, manifest, verify);
  const model = new ExportedModel(exportDir, manifest, tokenizer, { verify, sessionOptions: options });
  for (const [role, name] of Object.entries(runtimeGraphs(manifest)).filter(([, graph]) => graph)) {
    await checkGraph(exportDir, manifest, name, verify);
    model[role] = await model.session(name);
  }
  return model;
}

async function withModel(exportDirOrModel, fn) {
  if (typeof exportDirOrModel !== 'string') return fn(exportDirOrModel);
  const model = await openExport(exportDirOrModel);
  try {
    return await fn(model);
  } finally {
    await model.release();
  }
}

/**
 * The best ids per source (an export folder path or an opened model); rows come back without BOS
 * and EOS. `opts`: the decoding options (`maxNewTokens`, `numBeams`, `doSample`, ...; defaults: the
 * manifest's `generation` section, else greedy) and `timings`.
 */
export function generateIds(exportDirOrModel, idLists, opts = {}) {
  return withModel(exportDirOrModel, (model) => api.generateIds(ort, model, idLists, opts));
}

/** Per source, `numReturnSequences` hypotheses { ids, score } (beam search: best first). */
export function generate(exportDirOrModel, idLists, opts = {}) {
  return withModel(exportDirOrModel, (model) => api.generate(ort, model, idLists, opts));
}

/** CTranslate2's score_batch: per source, the teacher-forced log-probabilities of its target (api.mjs `score`). */
export function score(exportDirOrModel, idLists, targets) {
  return withModel(exportDirOrModel, (model) => api.score(ort, model, idLists, targets));
}

/**
 * An encoder-only export's outputs for token-id sources (padded into one batch): { [name]: ort.Tensor },
 * row i = source i (Python's `open_export(OUT).run`). An export with a decoder throws one line.
 */
export function run(exportDirOrModel, idLists) {
  return withModel(exportDirOrModel, (model) => api.run(ort, model, idLists));
}

/**
 * Translate texts with the manifest's tokenizer (an export folder path or an opened model): the best
 * texts. `sourceLang` / `targetLang`: a multilingual model's language codes (see `languages`).
 * CTranslate2's options, as Python's translate: `targetPrefix` (per text the target token ids its translation
 * starts with), `returnAlternatives` and `numHypotheses` (> 1: per text a list of translations, best first: the
 * n-best, or the alternatives after the prefix), `useVmap` (the head restricted to the texts' shortlist).
 */
export function translate(exportDirOrModel, texts, { sourceLang, targetLang, targetPrefix = null, returnAlternatives = false,
  numHypotheses = 1, ...opts } = {}) {
  return withModel(exportDirOrModel, async (model) => {
    if (!model.tokenizer) throw new Error('this export has no tokenizer; pass token ids (generateIds, --ids) instead of text');
    const sources = texts.map((t) => model.tokenizer.encode(t, sourceLang, targetLang));
    const options = { ...languageOptions(model.tokenizer, targetLang), ...opts };
    if (targetPrefix === null && !returnAlternatives && numHypotheses === 1) {
      const ids = await api.generateIds(ort, model, sources, options);
      return ids.map((row) => model.tokenizer.decode(row));
    }
    const rows = await api.hypotheses(ort, model, sources, { ...options, targetPrefix, returnAlternatives, numHypotheses });
    const out = rows.map((row) => row.map((h) => model.tokenizer.decode(h.ids)));
    return returnAlternatives || numHypotheses > 1 ? out : out.map((row) => row[0]);
  });
}

/**
 * A vocabulary map file of Python's `VocabularyMap.save` format (JSON `{"fixed": [...], "map": {...}}`), for
 * `model.vmap`; one line naming the file when it cannot be read or is not one. CTranslate2's text format:
 * `VocabularyMap.fromCt2(text, sourceId, targetId)`.
 */
export async function loadVocabularyMap(file) {
  let text;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the vocabulary map ${file}: ${err.code === 'ENOENT' ? 'no such file' : err.code}`);
  }
  let data;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file} is not a vocabulary map ({"fixed": [...], "map": {...}}): ${err.message}`);
  }
  return VocabularyMap.fromJSON(data, file);
}

/**
 * Transcribe one recording with a Whisper export (a folder path or an opened model): { text, language,
 * segments, ids }, the ids of Python's `open_export(OUT).transcribe(audio, ...)` (speech/whisper.mjs). `audio`:
 * a WAV file's path or bytes, or Float32Array samples at the model's rate (16 kHz), or an array of those (an
 * array of answers, as Python's list); options:
 * `language` (default: detected), `task` ('transcribe' or 'translate'), `timestamps`, `numBeams`,
 * `maxNewTokens`, `maxSeconds`; `vad: true` transcribes only the speech (Silero VAD: speech/chunks.mjs, as
 * Python's vad=True), with `vadParameters` (Python's VadParameters fields) and `vadModel` (the ONNX file; default
 * the checkout's models/silero-vad); `batchSize` > 1 decodes that many VAD chunks, or recordings, together
 * (speech/batch.mjs, as Python's batch_size), with the answers of decoding them one after the other.
 */
export async function transcribe(exportDirOrModel, audio, opts = {}) {
  const many = Array.isArray(audio);
  const { recordings, settings } = await readRecordings(many ? audio : [audio], opts);
  const results = await withModel(exportDirOrModel, (model) => transcribeRecordings(ort, model, recordings, settings));
  return many ? results : results[0];
}

/**
 * The language codes the export takes (Python's `tfm-export languages --json`): { source, target,
 * sourceDefault }; empty lists for a model without language tokens. A Whisper export adds `spoken` (the
 * codes transcribe's `language` takes) and `translateInto` ('en', or null). Reads only manifest.json.
 */
export async function languages(exportDirOrModel) {
  const manifest = typeof exportDirOrModel === 'string' ? await readManifest(exportDirOrModel) : exportDirOrModel.manifest;
  return exportLanguages(manifest);
}

/** languageCodes of the manifest's tokenizer, with a Whisper export's speechLanguages. */
function exportLanguages(manifest) {
  const codes = languageCodes(manifest.tokenizer);
  return manifest.speech && manifest.features ? { ...codes, ...speechLanguages(whisperSettings(manifest)) } : codes;
}

/**
 * Stream one source (text -> text pieces, ids -> ids) as it is decoded: `for await (const piece of
 * stream(dirOrModel, '4718'))`. A folder path is opened for the stream and released when it ends.
 */
export async function* stream(exportDirOrModel, source, opts = {}) {
  if (typeof exportDirOrModel !== 'string') {
    yield* api.stream(ort, exportDirOrModel, source, opts);
    return;
  }
  const model = await openExport(exportDirOrModel);
  try {
    yield* api.stream(ort, model, source, opts);
  } finally {
    await model.release();
  }
}
