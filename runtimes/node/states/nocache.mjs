// A module export's decoder without a cache (decoder_nocache.onnx, the manifest's source.decoder
// "nocache"): the port of tfm_export/runtime/states/nocache.py. It reads the whole prefix every step, so
// its state keeps each row's prefix; its graph has no next_ids output, so greedy takes the logits' argmax.
// No globals beyond ECMAScript: the browser page imports this file too.
import { argmax } from '../decode/processors.mjs';
import { encoderFeeds, int64, maskTensor, SOURCE_MASK } from '../sources.mjs';
import { floats } from './growing.mjs';
import { expandRows } from './reorder.mjs';

export { runtimeGraphs } from '../checks.mjs'; // Python's runtime_graphs lives here; the manifest checks need it

const MEMORY = 'memory'; // the module encoder's output that decoder_nocache reads

/** encoder.onnx + decoder_nocache.onnx (Python's NoCacheCache, a decode/loop.mjs DecoderCache). */
export class NoCacheCache {
  constructor(ort, model) {
    Object.assign(this, { ort, model });
  }

  /** Encode once; each source's memory and mask are repeated for its `rows / sources` rows. */
  async start(padded, { rows }) {
    const { ort, model } = this;
    const feeds = encoderFeeds(ort, model.manifest, padded);
    const { [MEMORY]: memory } = await model.encoder.run(feeds, [MEMORY]);
    const mask = feeds[SOURCE_MASK] ?? maskTensor(ort, padded, model.manifest.config.src_pad_id);
    return new NoCacheState(ort, model.decoder, expandRows(ort, memory, rows), expandRows(ort, mask, rows), rows);
  }
}

/**
 * The rows of a module export's decoder without a cache (Python's NoCacheState): the same interface as
 * GrowingState (decode/loop.mjs's DecoderState), so every strategy runs on it through the one driver.
 * It keeps each row's prefix (the ids fed so far) and runs the decoder on the whole prefix every step ((rows, steps)
 * tgt_ids, the rows' memory and src_mask -> the last position's logits (rows, vocab)). Its graph has
 * no next_ids output, so it always fetches the logits and greedy takes their argmax here.
 */
export class NoCacheState {
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
