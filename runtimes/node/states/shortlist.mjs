// A vocabulary shortlist (CTranslate2's `use_vmap`): the decoder's head chooses among a batch's likely tokens only
// (decode/vmap.mjs picks them). The port of tfm_export/runtime/states/shortlist.py's MaskedCache and MaskedState.
//
// Python rewrites decoder.onnx when a model first decodes with a shortlist (shortlist_decoder: a new `shortlist`
// input gathers the head's rows before its MatMul, so each step multiplies by (d_model, S) instead of (d_model,
// vocab)). That edits ONNX protobufs, which neither onnxruntime-node nor onnxruntime-web can do (they run graphs,
// they do not build them) and which would need a protobuf library and the ONNX schema in the package and the page.
// Node takes Python's other path instead, the one it uses for a head it cannot gather (an int8 or int4 export):
// `MaskedCache` sets the logits outside the shortlist (and the model's banned ids) to -inf after the full head, and
// the strategies choose from those. The tokens are the same as Python's (Python's own tests check that its
// rewritten and masked decoders give the same ids); the speed-up of a smaller head is not there.
// The state fetches the logits even for plain greedy decoding, whose next_ids (the graph's argmax over the whole
// vocabulary) would ignore the shortlist: `nextIds` is the argmax of the masked logits (ties: the lower id).
// No globals beyond ECMAScript: the browser page may import this file.
import { argmax } from '../decode/processors.mjs';

/**
 * A shortlist as a mask (Python's MaskedCache): any cache's states with the logits outside `ids` (and the model's
 * `banned` ids) set to -inf; the head still scores every token.
 */
export class MaskedCache {
  constructor(base, ids, vocab, banned = []) {
    const allowed = new Uint8Array(vocab);
    for (const id of ids) allowed[id] = 1;
    for (const id of banned) allowed[id] = 0;
    this.base = base;
    this.blocked = Uint32Array.from(allowed.keys()).filter((t) => !allowed[t]); // the ids set to -inf
  }

  /** The base cache's state, fetching the logits (the mask needs them, whatever the strategy reads). */
  async start(padded, { rows, reads }) {
    void reads;
    return new MaskedState(await this.base.start(padded, { rows, reads: 'logits' }), this.blocked);
  }
}

/** A decoder state whose logits are -inf outside the shortlist (Python's MaskedState). */
export class MaskedState {
  constructor(state, blocked) {
    Object.assign(this, { state, blocked, masked: null });
  }

  async step(tokens) {
    this.masked = null;
    await this.state.step(tokens);
  }

  reorder(beamIdx) {
    this.state.reorder(beamIdx);
  }

  /** The last step's logits { data (rows * vocab float32, -inf outside the shortlist), vocab }, masked once a step. */
  logits() {
    if (!this.masked) {
      const { data, vocab } = this.state.logits();
      const out = Float32Array.from(data);
      for (let r = 0; r < out.length; r += vocab) for (const t of this.blocked) out[r + t] = -Infinity;
      this.masked = { data: out, vocab };
    }
    return this.masked;
  }

  /** Each row's most likely shortlisted id (ties: the lower id), as Python's masked next_ids. */
  nextIds() {
    const { data, vocab } = this.logits();
    return Array.from({ length: data.length / vocab }, (_, r) => argmax(data.subarray(r * vocab, (r + 1) * vocab)));
  }
}
