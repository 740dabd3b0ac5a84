// Decoding calls on an opened export, runtime-agnostic: the port of tfm_export/runtime/api.py
// (GenerateMixin's generate, generate_ids, stream and text pieces) with ExportedModel.run. Node
// (exported.mjs) and the browser page (../web/app.mjs) both call these with their own `ort` (the
// onnxruntime module: node or web) and `model`: { manifest, encoder, decoder, tokenizer } with an
// ort.InferenceSession per graph of checks.mjs's `runtimeGraphs` (decoder: null for an encoder-only
// export). The rules are the Python runtime's, so all three produce the same tokens
// (runtimes/fixtures/expected.json is the Python side's output).
//
// One driver decodes every call, as in Python: a decoder cache (states/growing.mjs; a module export's
// states/nocache.mjs) encodes the sources once, and decode/loop.mjs's `decode` steps it while a
// strategy from decode/strategies.mjs (`strategyFor`) picks each step's ids. A Whisper export's
// encoder reads log-mel features instead: `decodeFeatures` feeds it (speech/whisper.mjs transcribes).
// CTranslate2's decoding API: `targetPrefix` and `returnAlternatives` (decode/prefix.mjs), `score`
// (decode/scoring.mjs), and `useVmap`, the vocabulary shortlist (decode/vmap.mjs, states/shortlist.mjs).
// It uses only globals common to Node and browsers, so the page imports this very file.
import { decode, run as runToEnd } from './decode/loop.mjs';
import { prefixGroups, prefixStrategy, withForcedFirst } from './decode/prefix.mjs';
import { SCORE_BATCH, TeacherForced, scoredTargets } from './decode/scoring.mjs';
import { strategyFor } from './decode/strategies.mjs';
import { generationConfig, isGreedy } from './options/generation.mjs';
import { encoderFeeds, padSources, resolveMaxNewTokens, sourceInput } from './sources.mjs';
import { runtimeGraphs } from './checks.mjs';
import { speculativeRows } from './speculating.mjs';
import { GrowingCache } from './states/growing.mjs';
import { NoCacheCache } from './states/nocache.mjs';
import { maskedCache, shortlisted } from './shortlisted.mjs';
import { languageOptions, makeTokenizer } from './text/tokenizer.mjs';

export { shortlisted, withShortlist } from './shortlisted.mjs';

const SPEECH = 'this export reads audio features (a Whisper model), not token ids; transcribe a recording: ' +
  'transcribe(model, audio) or `tfm-export-node transcribe OUT file.wav`';

// The decoder cache of each decoder graph (runtimeGraphs): the KV cache, or the whole prefix every step.
const CACHES = { decoder: GrowingCache, decoder_nocache: NoCacheCache };

const ENCODER_ONLY = 'this export is encoder-only (it has no decoder); run it: model.run(idLists), ' +
  'or `tfm-export-node run OUT --ids ...`';

/**
 * The decoder cache of the model's export (Python's ExportedModel.cache); an encoder-only export is
 * refused in one line. A shortlisted model (`withShortlist`) decodes on it masked to its shortlist, with the
 * call's forced first token (`config`'s: a target language) added, as Python's Shortlisted.cache_for adds it.
 */
export function cacheFor(ort, model, config = null) {
  const graph = runtimeGraphs(model.manifest).decoder;
  if (!graph) throw new Error(ENCODER_ONLY);
  const cache = new CACHES[graph](ort, model);
  return model.shortlist ? maskedCache(cache, model, config) : cache;
}

/**
 * A call's decode (Python's GenerateMixin.generate: strategy_for, then decode): check and pad `sources`,
 * then step every row from bos_id until the strategy (chosen by `strategyFor` from `config` and `pick`)
 * is finished; yields the strategy after each step, and it holds the results when this ends. `pick`:
 * { scored, stopAtEos } (strategyFor).
 */
async function* decodeSources(ort, model, sources, config, { timings, ...pick } = {}) {
  const c = textConfig(model);
  const padded = padSources(c, sources);
  const steps = resolveMaxNewTokens(config.maxNewTokens, c.max_len);
  const strategy = strategyFor(sources.length, steps, config, strategyIds(c), pick);
  yield* decode(cacheFor(ort, model, config), padded, strategy, timings);
}

/** The manifest's model config of a text export (a speech one is refused in one line). */
function textConfig(model) {
  if (sourceInput(model.manifest).features) throw new Error(SPEECH);
  return model.manifest.config;
}

/** The special ids a strategy reads, from the model config. */
function strategyIds(c) {
  return { bosId: c.bos_id, eosId: c.eos_id, padId: c.tgt_pad_id, banned: c.suppress_ids ?? [] };
}

/**
 * CTranslate2's target_prefix (Python's prefixed_generate): per source its hypotheses, each starting with its
 * `targetPrefix` entry (token ids; [] for none; null: none for any), decoded in groups of equal prefixes
 * (decode/prefix.mjs); with `alternatives` n > 0, n alternatives each at the position after the prefix.
 */
async function decodePrefixed(ort, model, sources, config, targetPrefix, alternatives = 0) {
  const c = textConfig(model);
  const prefixes = targetPrefix ?? sources.map(() => []);
  const groups = prefixGroups(prefixes, sources.length, config, c.tgt_vocab_size, c.max_len);
  const plain = withForcedFirst([], config).config;
  const out = Array(sources.length);
  for (const { prefix, members } of groups) {
    const steps = Math.min(resolveMaxNewTokens(plain.maxNewTokens, c.max_len), c.max_len - prefix.length);
    const strategy = prefixStrategy(members.length, prefix, steps, plain, strategyIds(c), alternatives);
    const hyps = await runToEnd(cacheFor(ort, model), padSources(c, members.map((i) => sources[i])), strategy);
    members.forEach((i, j) => { out[i] = hyps[j]; });
  }
  return out;
}

/**
 * CTranslate2's score_batch (Python's `score`): per source, the log-probabilities of its target (token ids
 * without the decoder start and EOS; EOS is appended), teacher-forced, SCORE_BATCH at a time:
 * [{ tokens, logProbs, score, normalizedScore }].
 */
export async function score(ort, model, sources, targets) {
  const c = textConfig(model);
  if (sources.length !== targets.length) {
    throw new Error(`${sources.length} sources and ${targets.length} targets: score needs one target per source`);
  }
  const full = scoredTargets(targets, c, c.max_len);
  const out = [];
  for (let start = 0; start < full.length; start += SCORE_BATCH) {
    const strategy = new TeacherForced(full.slice(start, start + SCORE_BATCH), c.bos_id, c.tgt_pad_id);
    out.push(...await runToEnd(cacheFor(ort, model), padSources(c, sources.slice(start, start + SCORE_BATCH)), strategy));
  }
  return out;
}

/**
 * decode/loop.mjs's `run` for an export whose encoder reads features (Whisper): `features` (one
 * Float32Array (n_mels * frames) per source) encoded once, then `strategy` (speech/search.mjs's
 * WhisperStrategy, or any with the driver's shape and a `bosId`) stepped to its end: its results.
 */
export async function decodeFeatures(ort, model, features, strategy, { timings } = {}) {
  if (!sourceInput(model.manifest).features) {
    throw new Error('this export reads token ids, not audio features: it is not a speech model');
  }
  return runToEnd(new GrowingCache(ort, model), features, strategy, timings);
}

/** decodeSources run to its end: the strategy's results. */
async function decodeAll(ort, model, sources, config, options) {
  let strategy = null;
  for await (strategy of decodeSources(ort, model, sources, config, options)); // eslint-disable-line no-empty
  return strategy.results();
}

/**
 * Per source, `numReturnSequences` hypotheses { ids (without BOS/EOS), score }: beam search's best
 * first (score: sum(log p) / length ** lengthPenalty), samples in order (score: sum(log p)); plain
 * greedy too reads the logits here, for its score. `opts`: the decoding options (options/generation.mjs;
 * defaults: the manifest's `generation`), `timings`, and CTranslate2's `targetPrefix` (per source the token ids
 * its hypotheses start with, [] for none; they are returned with it), `returnAlternatives` (numReturnSequences
 * alternatives at the first position after the prefix, decoded greedily whatever numBeams says: Python's) and
 * `useVmap` (the output head restricted to the sources' shortlist under `model.vmap`).
 */
export async function generate(ort, model, sources, { timings, targetPrefix = null, returnAlternatives = false,
  useVmap = false, assistant = null, speculation = null, ...options } = {}) {
  if (flag('useVmap', useVmap)) {
    return generate(ort, shortlisted(model, sources), sources, { timings, targetPrefix, returnAlternatives, ...options });
  }
  if (flag('returnAlternatives', returnAlternatives)) {
    const { config, count } = alternativesConfig(model, options);
    return decodePrefixed(ort, model, sources, config, targetPrefix, count);
  }
  const config = generationConfig(model.manifest, options);
  if (targetPrefix !== null) return decodePrefixed(ort, model, sources, config, targetPrefix);
  const steps = resolveMaxNewTokens(config.maxNewTokens, textConfig(model).max_len);
  const rows = await speculativeRows(ort, model, sources, steps, config, assistant, { timings, stats: speculation, scored: true });
  if (rows) return rows; // scored as plain decoding scores them
  return decodeAll(ort, model, sources, config, { timings, scored: true });
}

/** A boolean option's value (a string 'false' would read as true: one line instead). */
function flag(name, value) {
  if (typeof value !== 'boolean') throw new Error(`${name} is true or false, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * Python's `_prefixed` for alternatives: their count is numReturnSequences (default the config's), decoded
 * greedily (numBeams 1, one row each), and the other options checked as always.
 */
function alternativesConfig(model, { numReturnSequences, ...options }) {
  const config = generationConfig(model.manifest, { ...options, numReturnSequences: 1, numBeams: 1 });
  const count = numReturnSequences ?? generationConfig(model.manifest, options).numReturnSequences;
  const vocab = model.manifest.config.tgt_vocab_size;
  if (!Number.isInteger(count) || count < 1 || count > vocab) {
    throw new Error(`returnAlternatives takes numReturnSequences from 1 to the vocabulary's ${vocab}, got ${count}`);
  }
  return { config, count };
}

/**
 * Python's `hypotheses` (translate's CTranslate2 options on ids): per source `numHypotheses` hypotheses, best first:
 * the n-best on at least that many beams (the export's, when more), or with `returnAlternatives` the alternatives
 * after the prefix; `targetPrefix` as generate's (target ids: Node's tokenizers encode sources only).
 */
export async function hypotheses(ort, model, sources, { targetPrefix = null, returnAlternatives = false, numHypotheses = 1,
  ...options } = {}) {
  if (!Number.isInteger(numHypotheses) || numHypotheses < 1) {
    throw new Error(`numHypotheses is a whole number of 1 or more, got ${JSON.stringify(numHypotheses)}`);
  }
  if (targetPrefix?.some((p) => typeof p === 'string')) {
    throw new Error("targetPrefix takes target token ids in Node (this runtime's tokenizers encode sources only)");
  }
  const asked = { ...options, numReturnSequences: numHypotheses };
  if (!returnAlternatives && numHypotheses > 1 && !asked.doSample) {
    asked.numBeams ??= Math.max(numHypotheses, generationConfig(model.manifest, {}).numBeams);
  }
  return generate(ort, model, sources, { ...asked, targetPrefix, returnAlternatives });
}

/**
 * The best hypothesis' ids per source (without BOS and EOS), exactly like the Python runtime's
 * generate_ids. Plain greedy decoding (the default) runs the decoder's own argmax. `timings`, when
 * given, receives `encoderMs` and one `stepsMs` entry per decoder step. `stopAtEos: false` (Python's
 * stop_at_eos, for benchmarks) gives every row exactly maxNewTokens ids: greedy keeps going after
 * EOS, other decoding bans EOS (minNewTokens) and returns the best hypothesis. `useVmap`: as `generate`'s
 * (translate's use_vmap: one shortlist for the call's sources).
 */
export async function generateIds(ort, model, sources, { timings, stopAtEos = true, targetPrefix = null, useVmap = false,
  assistant = null, speculation = null, ...options } = {}) {
  if (flag('useVmap', useVmap)) model = shortlisted(model, sources);
  let config = generationConfig(model.manifest, options);
  if (targetPrefix !== null) return (await decodePrefixed(ort, model, sources, config, targetPrefix)).map((best) => best[0].ids);
  if (stopAtEos) {
    const steps = resolveMaxNewTokens(config.maxNewTokens, textConfig(model).max_len);
    const rows = await speculativeRows(ort, model, sources, steps, config, assistant, { timings, stats: speculation });
    if (rows) return rows;
  }
  if (!stopAtEos && !isGreedy(config)) {
    const steps = resolveMaxNewTokens(config.maxNewTokens, model.manifest.config.max_len);
    config = { ...config, minNewTokens: steps, forcedEos: false };
  }
  const hyps = await decodeAll(ort, model, sources, config, { timings, stopAtEos });
  return hyps.map((best) => best[0].ids);
}

/**
 * An encoder-only export's outputs (Python's ExportedModel.run) for token-id sources padded into one
 * batch: { [output name]: ort.Tensor } by the names the manifest gives them, row i = source i.
 */
export async function run(ort, model, sources) {
  if (runtimeGraphs(model.manifest).decoder) {
    throw new Error('this export has a decoder; use generateIds, generate or translate (`tfm-export-node OUT --ids ...`), not run');
  }
  const padded = padSources(model.manifest.config, sources);
  const names = model.manifest.graphs.encoder.outputs.map((t) => t.name);
  return model.encoder.run(encoderFeeds(ort, model.manifest, padded), names);
}

/** A tensor's rows as nested lists (numpy's tolist(): row i is source i); int64 values as numbers. */
export function tensorRows(tensor) {
  const nest = (values, dims) => (dims.length === 1 ? values : Array.from({ length: dims[0] }, (_, i) => {
    const size = values.length / dims[0];
    return nest(values.slice(i * size, (i + 1) * size), dims.slice(1));
  }));
  const values = Array.from(tensor.data, tensor.type === 'bool' ? Boolean : Number);
  return nest(values, tensor.dims);
}

/** The new ids of one source as they are decided (all at the end for beam search). */
async function* idStream(ort, model, ids, config, timings) {
  let strategy = null;
  for await (strategy of decodeSources(ort, model, [ids], config, { timings })) {
    if (config.numBeams > 1) continue;
    const token = strategy.out[0][strategy.step - 1];
    if (token === model.manifest.config.eos_id) break;
    yield token;
  }
  if (strategy && config.numBeams > 1) yield* strategy.results()[0][0].ids;
}

/**
 * Text pieces from growing ids: each is what decoding all ids so far adds to the text so far (held
 * back while a piece would change earlier text).
 */
export async function* textPieces(tokenizer, ids) {
  const seen = [];
  let shown = '';
  for await (const token of ids) {
    seen.push(token);
    const text = tokenizer.decode(seen);
    if (text.startsWith(shown) && text.length > shown.length) {
      yield text.slice(shown.length);
      shown = text;
    }
  }
}

/**
 * One source's output as it is decoded (Python's model.stream): text pieces for a string, token ids
 * for an id list. Greedy and sampling yield each token as it is chosen (EOS is not yielded); beam
 * search cannot know its result before it ends, so it yields the best hypothesis once, at the end.
 * `sourceLang` marks a text's source language, `targetLang` forces the target's (text/tokenizer.mjs).
 */
export async function* stream(ort, model, source, { timings, sourceLang, targetLang, ...options } = {}) {
  const isText = typeof source === 'string';
  const needed = isText || (targetLang !== undefined && targetLang !== null);
  const tokenizer = needed ? (model.tokenizer ?? makeTokenizer(model.manifest.tokenizer)) : null;
  if (isText && !tokenizer) throw new Error('this export has no tokenizer; stream token ids instead of text');
  const languages = languageOptions(tokenizer, targetLang);
  const config = generationConfig(model.manifest, { ...languages, ...options, numReturnSequences: 1 });
  const ids = idStream(ort, model, isText ? tokenizer.encode(source, sourceLang, targetLang) : source, config, timings);
  yield* (isText ? textPieces(tokenizer, ids) : ids);
}
