// The shared decoding module of the Node package (onnxruntime-node) and the browser page
// (onnxruntime-web): manifest checks and the decoding of generate, generateIds and stream, one-shot or
// streamed; text goes through tokenizers.mjs. The rules are those of the Python runtime
// (tfm_export/runtime/decoding.py, search.py, api.py), so all three produce the same tokens
// (runtimes/fixtures/expected.json is the Python side's output).
//
// One decoder state and one driver, as in Python: `DecoderState` encodes the sources once and holds
// the decoder's feeds (src_mask, cross.*, past.*) between steps; `step(tokens)` runs the decoder for
// every row, then `nextIds()` / `logits()` read its outputs and `reorder(beamIdx)` moves the past rows
// (beam search). `decodeSteps` is the only loop that steps a decoder: a strategy from search.mjs
// (Greedy on the graph's own argmax, TokenPicker for processors and sampling, BeamSearch) picks each
// step's ids from the state. A strategy names the output it reads (`reads`), and only that one and
// the caches are fetched from ORT: greedy decoding never copies the (rows, vocab) logits out.
//
// Module exports (tfm_export/runtime/nocache.py: the manifest's source.decoder) run through the same
// driver: "nocache" has decoder_nocache.onnx, which reads the whole prefix every step (`NoCacheState`,
// one more decoder state); "encoder-only" has no decoder, and `run` gives its encoder's outputs.
//
// The encoder's input is what manifest.json declares (graphs.encoder.inputs: its name, id type and
// axes; `sourceInput`); manifests without one get token ids `src_ids`, int64 (batch, src_len). A
// Whisper export's encoder reads log-mel features instead (float32 (batch, n_mels, frames)): only
// `decodeFeatures` feeds it, with whisper.mjs's strategy (speech.mjs transcribes).
//
// `ort` is the onnxruntime module; `model` is { manifest, encoder, decoder } with an
// ort.InferenceSession per graph of `runtimeGraphs` (decoder: null for an encoder-only export; see
// translate.mjs and ../web/app.mjs for how they are opened).
// It uses only globals common to Node and browsers, so the page imports this very file.
//
// Beam search reorders the past keys/values between steps with TypedArray copies (`gatherRows`), not
// with a small Gather graph: on onnxruntime-node's CPU provider and onnxruntime-web's WASM the
// decoder's outputs already are JS typed arrays, so a graph would copy them into ORT and back out
// again. Measured in Node (12 caches of (64, 8, 50, 64) float32, 79 MB): 16-18 ms by copy vs 46 ms by
// a Gather session; 6 caches of (4, 4, 24, 32) (the bundled model, 4 beams): 0.04 vs 0.11 ms.
// Imports go one way, down: this module -> search.mjs -> options.mjs, and tokenizers.mjs (charsmap.mjs);
// none of them imports this module.
import { generationConfig, isGreedy } from './options.mjs';
import { argmax, strategyFor } from './search.mjs';
import { languageOptions, makeTokenizer } from './tokenizers.mjs';

export { fromPythonNames, generationConfig } from './options.mjs';
export { makeTokenizer } from './tokenizers.mjs'; // it lived here first: existing imports keep working

export const MANIFEST_FORMAT = 'tfm-export-manifest/1';

// A module export's source.decoder -> its decoder graph (null: none); any other export has decoder.onnx.
const MODULE_DECODERS = { nocache: 'decoder_nocache', 'encoder-only': null };

/**
 * The graphs a runner opens, by role (Python's runtime_graphs): { encoder: 'encoder', decoder: 'decoder',
 * 'decoder_nocache' (a module export's decoder without a cache) or null (an encoder-only export) }.
 */
export function runtimeGraphs(manifest) {
  const kind = manifest.source?.decoder;
  return { encoder: 'encoder', decoder: Object.hasOwn(MODULE_DECODERS, kind) ? MODULE_DECODERS[kind] : 'decoder' };
}

/** Checks what this runtime reads from manifest.json; throws a one-line error naming the fix. */
export function checkManifest(manifest, where = 'manifest.json') {
  if (manifest?.format !== MANIFEST_FORMAT) {
    throw new Error(`${where} has format ${JSON.stringify(manifest?.format)}, this runtime reads ` +
      `${MANIFEST_FORMAT}; re-export the model with tfm-export`);
  }
  for (const name of Object.values(runtimeGraphs(manifest)).filter(Boolean)) {
    const graph = manifest.graphs?.[name];
    if (!graph?.file || !/^[0-9a-f]{64}$/.test(graph.sha256 ?? '')) {
      throw new Error(`${where} has no valid graphs.${name} entry (file, sha256); re-export the model`);
    }
  }
  sourceInput(manifest, where); // an encoder input this runtime cannot feed is refused on opening
  return manifest;
}

/** The files of one graph (the .onnx file and any external-data files) with their sha256. */
export function graphFiles(graph) {
  return { [graph.file]: graph.sha256, ...(graph.external_data ?? {}) };
}

/** Python's resolve_max_new_tokens: default fills the position table; too many is an error. */
export function resolveMaxNewTokens(maxNewTokens, maxLen) {
  const room = maxLen; // max_len - 1 (the BOS) + 1 (the last token is never fed back)
  if (maxNewTokens === undefined || maxNewTokens === null) return room;
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) {
    throw new Error(`maxNewTokens must be an integer of at least 1, got ${maxNewTokens}`);
  }
  if (maxNewTokens > room) {
    throw new Error(`maxNewTokens (${maxNewTokens}) does not fit the model's max_len (${maxLen}); use at most ${room}`);
  }
  return maxNewTokens;
}

// The encoder's input when the manifest declares none: token ids, (batch, src_len) (export/specs.py).
const SOURCE_IDS = { name: 'src_ids', dtype: 'int64', shape: ['batch', 'src_len'] };
// The id types an encoder may declare, each with the TypedArray that holds ids (plain numbers) in it.
const ID_ARRAYS = { int64: (ids) => BigInt64Array.from(ids, BigInt), int32: (ids) => Int32Array.from(ids) };
const BATCH_AXES = ['batch', 'src_batch']; // the manifests' names of a source batch axis (specs.DYNAMIC_AXES)

const SOURCE_MASK = 'src_mask'; // bool (batch, src_len), true = a real token: a module export's second input

/**
 * The encoder's input as manifest.json declares it (graphs.encoder.inputs): { name, dtype, shape,
 * batchFirst, mask }, refused in one line unless its first input holds token ids (int64 or int32) on a
 * batch axis and a `src_len` axis, in either order, and any other is the mask of real tokens (`mask`:
 * a module export's encoder reads one). Manifests that declare no inputs get SOURCE_IDS.
 */
function sourceInput(manifest, where = 'manifest.json') {
  const declared = manifest.graphs?.encoder?.inputs;
  if (declared === undefined || declared === null) return { ...SOURCE_IDS, batchFirst: true, mask: false };
  const what = `${where} graphs.encoder`;
  const extra = Array.isArray(declared) ? declared.slice(1).map((t) => t?.name) : [];
  if (!Array.isArray(declared) || declared.length === 0 || extra.some((name) => name !== SOURCE_MASK)) {
    throw new Error(`${what} declares ${declared?.length ?? 'no list of'} inputs; this runtime feeds one (the source ` +
      `token ids) or two (and ${SOURCE_MASK}, as a module export's): re-export the model or decode it with the Python runtime`);
  }
  const [{ name, dtype, shape }] = declared;
  if (isFeatures(declared[0])) return { name, dtype, shape, features: true, batchFirst: true, mask: false };
  if (!ID_ARRAYS[dtype]) {
    throw new Error(`${what} input ${JSON.stringify(name)} is ${dtype}; this runtime feeds token ids as int64 or int32`);
  }
  const batchAt = Array.isArray(shape) ? shape.findIndex((axis) => BATCH_AXES.includes(axis)) : -1;
  if (shape?.length !== 2 || batchAt < 0 || shape.indexOf('src_len') !== 1 - batchAt) {
    throw new Error(`${what} input ${JSON.stringify(name)} has axes ${JSON.stringify(shape)}; this runtime feeds ` +
      '(batch, src_len) or (src_len, batch)');
  }
  return { name, dtype, shape, batchFirst: batchAt === 0, mask: extra.length > 0 };
}

/**
 * Whether an encoder input is Whisper's log-mel features: float32 (batch, n_mels, frames), fixed
 * n_mels and frames (one window). Such an export decodes audio (speech.mjs: transcribe), not ids.
 */
function isFeatures({ dtype, shape }) {
  return dtype === 'float32' && shape?.length === 3 && BATCH_AXES.includes(shape[0]) && Number.isInteger(shape[1])
    && Number.isInteger(shape[2]);
}

const SPEECH = 'this export reads audio features (a Whisper model), not token ids; transcribe a recording: ' +
  'transcribe(model, audio) or `tfm-export-node transcribe OUT file.wav`';

/** (batch, n_mels, frames) float32 of one Float32Array (n_mels * frames, row-major) per source. */
function featureTensor(ort, input, sources) {
  const [, nMels, frames] = input.shape;
  if (!Array.isArray(sources) || sources.length === 0) throw new Error('no sources given; pass at least one feature window');
  const data = new Float32Array(sources.length * nMels * frames);
  sources.forEach((features, i) => {
    if (!(features instanceof Float32Array) || features.length !== nMels * frames) {
      throw new Error(`each source of this export is a Float32Array of ${nMels} x ${frames} log-mel features; ` +
        `got ${features?.constructor?.name} of ${features?.length}`);
    }
    data.set(features, i * nMels * frames);
  });
  return new ort.Tensor('float32', data, [sources.length, nMels, frames]);
}

/** Python's pad_batch and source_batch: the sources checked and right-padded to one width. */
function padSources(config, sources) {
  if (!Array.isArray(sources) || sources.length === 0) {
    throw new Error('no sources given; pass at least one list of token ids');
  }
  for (const row of sources) {
    if (!Array.isArray(row)) throw new Error(`each source must be a list of token ids, got ${JSON.stringify(row)}`);
    for (const id of row) {
      if (!Number.isInteger(id) || id < 0 || id >= config.src_vocab_size) {
        throw new Error(`source id ${id} is out of range for a vocabulary of ${config.src_vocab_size} ids`);
      }
    }
  }
  const width = Math.max(...sources.map((s) => s.length));
  if (width === 0) throw new Error('every source is empty; pass at least one token id');
  if (width > config.max_len) {
    throw new Error(`source length ${width} exceeds the model's max_len (${config.max_len}); shorten or split the input`);
  }
  return sources.map((s) => [...s, ...Array(width - s.length).fill(config.src_pad_id)]);
}

/** The padded sources as the encoder's declared input (`sourceInput`): its type, its axis order. */
function sourceTensor(ort, input, padded) {
  const [batch, width] = [padded.length, padded[0].length];
  const values = input.batchFirst ? padded.flat()
    : Array.from({ length: width * batch }, (_, i) => padded[i % batch][Math.floor(i / batch)]);
  return new ort.Tensor(input.dtype, ID_ARRAYS[input.dtype](values), input.batchFirst ? [batch, width] : [width, batch]);
}

/** (batch, src_len) bool, true = a real token (Python's `src != src_pad_id`): module exports' src_mask. */
function maskTensor(ort, padded, padId) {
  return new ort.Tensor('bool', Uint8Array.from(padded.flat(), (id) => (id === padId ? 0 : 1)),
    [padded.length, padded[0].length]);
}

/** The encoder's feeds (Python's encoder_feeds): the source ids and, when it reads one, src_mask. */
function encoderFeeds(ort, manifest, padded) {
  const input = sourceInput(manifest);
  if (input.features) return { [input.name]: featureTensor(ort, input, padded) };
  const feeds = { [input.name]: sourceTensor(ort, input, padded) };
  if (input.mask) feeds[SOURCE_MASK] = maskTensor(ort, padded, manifest.config.src_pad_id);
  return feeds;
}

function int64(ort, values, dims) {
  return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
}

/** An empty past (batch, heads, 0, head_dim) in the decoder's cache dtype, read from the manifest. */
function emptyPast(ort, manifest, batch) {
  const spec = manifest.graphs.decoder.inputs.find((t) => t.name === 'past.0.self.key');
  const c = manifest.config;
  const [, heads = c.n_heads, , headDim = c.d_model / c.n_heads] = spec?.shape ?? [];
  const dtype = spec?.dtype ?? 'float32';
  const data = dtype === 'float16' ? new Uint16Array(0) : new Float32Array(0);
  return new ort.Tensor(dtype, data, [batch, heads, 0, headDim]);
}

/** The logits' values: float32 in every export (float16 exports too: their logits stay float32). */
function floats(tensor) {
  if (tensor.type !== 'float32') {
    throw new Error(`the decoder's logits are ${tensor.type}; this runtime reads float32 logits: re-export the model`);
  }
  return tensor.data;
}

/** tensor[index] along axis 0 (rows), as a new tensor: one TypedArray copy per row. */
function gatherRows(ort, tensor, index) {
  const size = tensor.data.length / tensor.dims[0];
  const data = new tensor.data.constructor(index.length * size);
  index.forEach((row, i) => data.set(tensor.data.subarray(row * size, (row + 1) * size), i * size));
  return new ort.Tensor(tensor.type, data, [index.length, ...tensor.dims.slice(1)]);
}

/**
 * Each source's row of `tensor` repeated for its `rows / sources` decoder rows (beams, samples); row
 * i*expand + j is source i. One row per source is the tensor itself, not a copy.
 */
function expandRows(ort, tensor, rows) {
  const expand = rows / tensor.dims[0];
  return expand === 1 ? tensor : gatherRows(ort, tensor, Array.from({ length: rows }, (_, r) => Math.floor(r / expand)));
}

/** Starts `timings` (when given): the encoder's time, and no decoder step yet. */
function timeEncoder(timings, start) {
  if (timings) Object.assign(timings, { encoderMs: performance.now() - start, stepsMs: [] });
}

/**
 * Whether the decoder takes src_mask and cross.* once per source (axis `src_batch`), its rows grouped
 * by source; exports made before it need a copy per decoder row.
 */
function crossPerSource(manifest) {
  return manifest.graphs.decoder.inputs.find((t) => t.name === 'src_mask')?.shape[0] === 'src_batch';
}

/** [past.{i}.self.{kv}, present.{i}.self.{kv}] of every decoder layer: this step's present is the next step's past. */
function cachePairs(layers) {
  return Array.from({ length: layers }, (_, i) => ['key', 'value'].map((kv) => [`past.${i}.self.${kv}`,
    `present.${i}.self.${kv}`])).flat();
}

/**
 * One call's decoder state (Python's DecoderState / SearchState): the sources encoded once, the
 * decoder's feeds between steps, and the last step's outputs. It fetches only `reads` (the output its
 * strategy takes: 'next_ids' or 'logits') and the caches, so greedy never copies the logits out of ORT.
 */
class DecoderState {
  /**
   * Run the encoder on padded sources for `rows` decoder rows (`rows / sources` per source: row
   * i*expand + j is source i: beams, samples). The encoder's outputs are repeated per row only for a
   * decoder that needs it (`crossPerSource`); every past starts empty.
   */
  static async start(ort, model, padded, { rows, reads }, timings) {
    const c = model.manifest.config;
    const start = performance.now();
    const enc = await model.encoder.run(encoderFeeds(ort, model.manifest, padded));
    const perRow = (t) => (crossPerSource(model.manifest) ? t : expandRows(ort, t, rows));
    const feeds = { src_mask: perRow(enc.src_mask) };
    const pairs = cachePairs(c.n_decoder_layers);
    const empty = emptyPast(ort, model.manifest, rows);
    for (const [past] of pairs) feeds[past] = empty;
    for (let i = 0; i < c.n_decoder_layers; i++) {
      for (const kv of ['key', 'value']) feeds[`cross.${i}.${kv}`] = perRow(enc[`cross.${i}.${kv}`]);
    }
    timeEncoder(timings, start);
    return new DecoderState(ort, model.decoder, feeds, pairs, rows, reads);
  }

  constructor(ort, decoder, feeds, pairs, rows, reads) {
    Object.assign(this, { ort, decoder, feeds, pairs, rows, out: null });
    this.fetches = [reads, ...pairs.map(([, present]) => present)];
  }

  /** Feed one id per row ((rows, 1) input_ids) and run the decoder; its present.* become the past.* */
  async step(tokens) {
    this.feeds.input_ids = int64(this.ort, tokens, [this.rows, 1]);
    this.out = await this.decoder.run(this.feeds, this.fetches);
    for (const [past, present] of this.pairs) this.feeds[past] = this.out[present];
  }

  /** The last step's next_ids (rows): the graph's argmax (the model's suppressed ids excluded). */
  nextIds() {
    return Array.from(this.output('next_ids').data, Number);
  }

  /** The last step's logits: { data (rows * vocab float32), vocab }. */
  logits() {
    const logits = this.output('logits');
    return { data: floats(logits), vocab: logits.dims.at(-1) };
  }

  /** Row r of every past becomes row beamIdx[r] (beam search); rows that all stay put copy nothing. */
  reorder(beamIdx) {
    if (beamIdx.every((row, i) => row === i)) return;
    for (const [past] of this.pairs) this.feeds[past] = gatherRows(this.ort, this.feeds[past], beamIdx);
  }

  output(name) {
    const tensor = this.out?.[name];
    if (!tensor) throw new Error(`the decoder state fetched ${this.fetches[0]}, not ${name}: the strategy reads another output`);
    return tensor;
  }
}

const MEMORY = 'memory'; // the module encoder's output that decoder_nocache reads

/**
 * A module export's decoder without a cache (decoder_nocache.onnx, Python's NoCacheState): the same
 * interface as DecoderState, so every strategy runs on it through the one driver. It keeps each row's
 * prefix (the ids fed so far) and runs the decoder on the whole prefix every step ((rows, steps)
 * tgt_ids, the rows' memory and src_mask -> the last position's logits (rows, vocab)). Its graph has
 * no next_ids output, so it always fetches the logits and greedy takes their argmax here.
 */
class NoCacheState {
  /** Encode once; each source's memory and mask are repeated for its `rows / sources` rows. */
  static async start(ort, model, padded, { rows }, timings) {
    const start = performance.now();
    const feeds = encoderFeeds(ort, model.manifest, padded);
    const { [MEMORY]: memory } = await model.encoder.run(feeds, [MEMORY]);
    const mask = feeds[SOURCE_MASK] ?? maskTensor(ort, padded, model.manifest.config.src_pad_id);
    timeEncoder(timings, start);
    return new NoCacheState(ort, model.decoder, expandRows(ort, memory, rows), expandRows(ort, mask, rows), rows);
  }

  constructor(ort, decoder, memory, mask, rows) {
    Object.assign(this, { ort, decoder, memory, mask, rows, out: null });
    this.prefixes = Array.from({ length: rows }, () => []);
  }

  /** Append one id per row to its prefix and run the decoder on the prefixes. */
  async step(tokens) {
    this.prefixes = this.prefixes.map((prefix, r) => [...prefix, tokens[r]]);
    const feeds = { tgt_ids: int64(this.ort, this.prefixes.flat(), [this.rows, this.prefixes[0].length]),
      [MEMORY]: this.memory, [SOURCE_MASK]: this.mask };
    this.out = (await this.decoder.run(feeds, ['logits'])).logits;
  }

  /** The argmax of each row's logits (ties: the lower id, as Python's NoCacheState.next_ids). */
  nextIds() {
    const { data, vocab } = this.logits();
    return Array.from({ length: this.rows }, (_, r) => argmax(data.subarray(r * vocab, (r + 1) * vocab)));
  }

  /** The last step's logits: { data (rows * vocab float32), vocab }. */
  logits() {
    return { data: floats(this.out), vocab: this.out.dims.at(-1) };
  }

  /**
   * Row r continues row beamIdx[r]'s prefix. Beams never leave their source, whose memory and mask rows
   * are all alike, so those stay put (no copy).
   */
  reorder(beamIdx) {
    this.prefixes = beamIdx.map((row) => this.prefixes[row]);
  }
}

// The decoder state of each decoder graph (runtimeGraphs): the KV cache, or the whole prefix every step.
const STATES = { decoder: DecoderState, decoder_nocache: NoCacheState };

const ENCODER_ONLY = 'this export is encoder-only (it has no decoder); run it: model.run(idLists), ' +
  'or `tfm-export-node run OUT --ids ...`';

/** The decoder state class of the model's export; an encoder-only export is refused in one line. */
function stateClass(manifest) {
  const graph = runtimeGraphs(manifest).decoder;
  if (!graph) throw new Error(ENCODER_ONLY);
  return STATES[graph];
}

/**
 * The step driver (Python's search_steps, greedy_loop's successor), the one loop that steps a
 * decoder: encode `sources`, then step every row from bos_id until the strategy (search.mjs, chosen by
 * `strategyFor` from `config` and `pick`) is finished; yields the strategy after each step, and it
 * holds the results when this ends. `pick`: { scored, stopAtEos } (strategyFor).
 */
async function* decodeSteps(ort, model, sources, config, { timings, ...pick } = {}) {
  const c = model.manifest.config;
  if (sourceInput(model.manifest).features) throw new Error(SPEECH);
  const padded = padSources(c, sources);
  const steps = resolveMaxNewTokens(config.maxNewTokens, c.max_len);
  const strategy = strategyFor(sources.length, steps, config, {
    bosId: c.bos_id, eosId: c.eos_id, padId: c.tgt_pad_id, banned: c.suppress_ids ?? [],
  }, pick);
  yield* driveSteps(ort, model, padded, strategy, c.bos_id, timings);
}

/** The loop itself: encode `padded` (the encoder's sources), then step every row from `bosId` to the end. */
async function* driveSteps(ort, model, padded, strategy, bosId, timings) {
  const State = stateClass(model.manifest);
  const state = await State.start(ort, model, padded, strategy, timings);
  let tokens = Array(strategy.rows).fill(bosId);
  while (!strategy.finished) {
    const start = performance.now();
    await state.step(tokens);
    const { ids, beamIdx } = strategy.advance(state);
    if (beamIdx && !strategy.finished) state.reorder(beamIdx); // after the last step no past is read again
    timings?.stepsMs.push(performance.now() - start);
    yield strategy;
    tokens = ids;
  }
}

/**
 * Python's runtime.decoding.run for an export whose encoder reads features (Whisper): `features` (one
 * Float32Array (n_mels * frames) per source) encoded once, then `strategy` (whisper.mjs's
 * WhisperStrategy, or any with the driver's shape and a `bosId`) stepped to its end: its results.
 */
export async function decodeFeatures(ort, model, features, strategy, { timings } = {}) {
  if (!sourceInput(model.manifest).features) {
    throw new Error('this export reads token ids, not audio features: it is not a speech model');
  }
  for await (const step of driveSteps(ort, model, features, strategy, strategy.bosId, timings)) void step;
  return strategy.results();
}

/** decodeSteps run to its end: the strategy's results. */
async function decode(ort, model, sources, config, options) {
  let strategy = null;
  for await (strategy of decodeSteps(ort, model, sources, config, options)); // eslint-disable-line no-empty
  return strategy.results();
}

/**
 * Per source, `numReturnSequences` hypotheses { ids (without BOS/EOS), score }: beam search's best
 * first (score: sum(log p) / length ** lengthPenalty), samples in order (score: sum(log p)); plain
 * greedy too reads the logits here, for its score. `opts`: the decoding options (options.mjs;
 * defaults: the manifest's `generation`) and `timings`.
 */
export async function generate(ort, model, sources, { timings, ...options } = {}) {
  const config = generationConfig(model.manifest, options);
  return decode(ort, model, sources, config, { timings, scored: true });
}

/**
 * The best hypothesis' ids per source (without BOS and EOS), exactly like the Python runtime's
 * generate_ids. Plain greedy decoding (the default) runs the decoder's own argmax. `timings`, when
 * given, receives `encoderMs` and one `stepsMs` entry per decoder step. `stopAtEos: false` (Python's
 * stop_at_eos, for benchmarks) gives every row exactly maxNewTokens ids: greedy keeps going after
 * EOS, other decoding bans EOS (minNewTokens) and returns the best hypothesis.
 */
export async function generateIds(ort, model, sources, { timings, stopAtEos = true, ...options } = {}) {
  let config = generationConfig(model.manifest, options);
  if (!stopAtEos && !isGreedy(config)) {
    const steps = resolveMaxNewTokens(config.maxNewTokens, model.manifest.config.max_len);
    config = { ...config, minNewTokens: steps, forcedEos: false };
  }
  const hyps = await decode(ort, model, sources, config, { timings, stopAtEos });
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
  for await (strategy of decodeSteps(ort, model, [ids], config, { timings })) {
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
 * `sourceLang` marks a text's source language, `targetLang` forces the target's (tokenizers.mjs).
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
