// The growing-cache decoder (decoder.onnx) on onnxruntime-node or -web: the port of
// tfm_export/runtime/states/growing.py. `GrowingCache.start` runs the encoder once and holds the
// decoder's feeds (src_mask, cross.*, past.*) in a `GrowingState`; `step(tokens)` runs the decoder for
// every row, then `nextIds()` / `logits()` read its outputs and `reorder(beamIdx)` moves the past rows
// (beam search, states/reorder.mjs). A state fetches only the output its strategy reads (`reads`) and
// the caches: greedy decoding never copies the (rows, vocab) logits out of ORT. A speculative decode
// (decode/speculative.mjs) `feed`s several ids a step, reads the greedy id after each (`positionIds`, from
// earlier_logits and logits) and cuts the past back to the ids it kept (`truncate`).
// No globals beyond ECMAScript: the browser page imports this file too.
import { encoderFeeds, int64 } from '../sources.mjs';
import { expandRows, gatherRows } from './reorder.mjs';

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
export function floats(tensor) {
  if (tensor.type !== 'float32') {
    throw new Error(`the decoder's logits are ${tensor.type}; this runtime reads float32 logits: re-export the model`);
  }
  return tensor.data;
}

/** Whether decoder.onnx returns earlier_logits (Python's Manifest.earlier_logits): it can check drafts. */
export function checksDrafts(manifest) {
  return (manifest.graphs.decoder?.outputs ?? []).some((t) => t.name === 'earlier_logits');
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

/** The index of the largest value of `row` outside `banned` (the lowest index of a tie). */
function bannedArgmax(row, banned) {
  const skip = new Set(banned);
  let best = -1;
  for (let i = 0; i < row.length; i++) if (!skip.has(i) && (best < 0 || row[i] > row[best])) best = i;
  return best;
}

/** A past (rows, heads, length, headDim) cut to its first `length` positions, on the host. */
function firstPositions(ort, past, length) {
  const [rows, heads, had, dim] = past.dims;
  const data = new past.data.constructor(rows * heads * length * dim);
  for (let b = 0; b < rows * heads; b++) data.set(past.data.subarray(b * had * dim, (b * had + length) * dim), b * length * dim);
  return new ort.Tensor(past.type, data, [rows, heads, length, dim]);
}

/**
 * decoder.onnx, the growing cache (Python's GrowingCache, a decode/loop.mjs DecoderCache): `start`
 * encodes a batch into a GrowingState; each step's present.* become the next step's past.*.
 * `model`: { manifest, encoder, decoder } (ort.InferenceSession per graph).
 */
export class GrowingCache {
  constructor(ort, model) {
    Object.assign(this, { ort, model });
  }

  /**
   * Run the encoder on padded sources for `rows` decoder rows (`rows / sources` per source: row
   * i*expand + j is source i: beams, samples). The encoder's outputs are repeated per row only for a
   * decoder that needs it (`crossPerSource`); every past starts empty.
   */
  async start(padded, { rows, reads }) {
    const { ort, model } = this;
    const c = model.manifest.config;
    const enc = await model.encoder.run(encoderFeeds(ort, model.manifest, padded));
    const perRow = (t) => (crossPerSource(model.manifest) ? t : expandRows(ort, t, rows));
    const feeds = { src_mask: perRow(enc.src_mask) };
    const pairs = cachePairs(c.n_decoder_layers);
    const empty = emptyPast(ort, model.manifest, rows);
    for (const [past] of pairs) feeds[past] = empty;
    for (let i = 0; i < c.n_decoder_layers; i++) {
      for (const kv of ['key', 'value']) feeds[`cross.${i}.${kv}`] = perRow(enc[`cross.${i}.${kv}`]);
    }
    return new GrowingState(ort, model.decoder, feeds, pairs, rows, reads);
  }
}

/**
 * One call's rows on decoder.onnx (Python's GrowingState, a decode/loop.mjs DecoderState): the sources
 * encoded once, the decoder's feeds between steps, and the last step's outputs. It fetches only `reads`
 * (the output its strategy takes: 'next_ids' or 'logits') and the caches, so greedy never copies the
 * logits out of ORT.
 */
export class GrowingState {
  constructor(ort, decoder, feeds, pairs, rows, reads) {
    Object.assign(this, { ort, decoder, feeds, pairs, rows, out: null, length: 0, fed: 0 });
    this.fetches = [...[reads].flat(), ...pairs.map(([, present]) => present)]; // `reads`: a name, or several
  }

  /** Feed one id per row ((rows, 1) input_ids) and run the decoder; its present.* become the past.* */
  async step(tokens) {
    await this.feed(tokens, 1);
  }

  /**
   * Feed each row `n` ids (`tokens`: rows * n, row after row) in one decoder step (a draft): nextIds and logits
   * are then the last position's, `positionIds` every position's. `length`: the positions in the past.
   */
  async feed(tokens, n) {
    this.feeds.input_ids = int64(this.ort, tokens, [this.rows, n]);
    this.out = await this.decoder.run(this.feeds, this.fetches);
    for (const [past, present] of this.pairs) this.feeds[past] = this.out[present];
    this.length += n;
    this.fed = n;
  }

  /**
   * Per row, the greedy id after each of the ids the last step fed (rows arrays of `fed` ids): the argmax of
   * earlier_logits' positions and of logits, never a `banned` id (the model's suppress_ids, as next_ids bans
   * them; ties: the lower id). Needs a state that fetches both (decode/speculative.mjs's CHECKED).
   */
  positionIds(banned = []) {
    const last = this.output('logits');
    const vocab = last.dims.at(-1);
    const earlier = this.fed > 1 ? floats(this.output('earlier_logits')) : new Float32Array(0);
    const rows = [];
    for (let r = 0; r < this.rows; r++) {
      const at = (i) => (i < this.fed - 1 ? earlier.subarray((r * (this.fed - 1) + i) * vocab, (r * (this.fed - 1) + i + 1) * vocab)
        : floats(last).subarray(r * vocab, (r + 1) * vocab));
      rows.push(Array.from({ length: this.fed }, (_, i) => bannedArgmax(at(i), banned)));
    }
    return rows;
  }

  /**
   * The logits after each of the ids the last step fed, one row's (rows 1: a speculative check whose processors
   * read whole rows): { data (fed * vocab float32), vocab }; fed > 1 needs a state that fetches earlier_logits.
   */
  positionLogits() {
    const last = this.logits();
    if (this.fed === 1) return last;
    const earlier = floats(this.output('earlier_logits'));
    const data = new Float32Array(earlier.length + last.data.length);
    data.set(earlier);
    data.set(last.data, earlier.length);
    return { data, vocab: last.vocab };
  }

  /** Keep the first `length` positions of every past (a speculative step's rejected ids leave it). */
  truncate(length) {
    if (length >= this.length) return;
    for (const [past] of this.pairs) this.feeds[past] = firstPositions(this.ort, this.feeds[past], length);
    this.length = length;
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
