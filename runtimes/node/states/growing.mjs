// The growing-cache decoder (decoder.onnx) on onnxruntime-node or -web: the port of
// tfm_export/runtime/states/growing.py. `GrowingCache.start` runs the encoder once and holds the
// decoder's feeds (src_mask, cross.*, past.*) in a `GrowingState`; `step(tokens)` runs the decoder for
// every row, then `nextIds()` / `logits()` read its outputs and `reorder(beamIdx)` moves the past rows
// (beam search, states/reorder.mjs). A state fetches only the output its strategy reads (`reads`) and
// the caches: greedy decoding never copies the (rows, vocab) logits out of ORT.
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
