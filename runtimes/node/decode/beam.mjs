// Beam search with transformers' semantics: the port of tfm_export/runtime/decode/beam.py (its
// docstring, steps 1-7, is the specification), on the logits of each step of decode/loop.mjs. Equal
// scores go to the lower flat index beam * vocab + token, as there; scores are float64.
// No globals beyond ECMAScript: the browser page imports this file too.
import { logSoftmax, processHistory } from './processors.mjs';

export const OFFSET = 1e9; // transformers' "very large negative value" for excluded candidates and empty slots

/** Insert (value, flat) into `best` (sorted: value descending, then flat ascending), keeping `size`. */
function insertTop(best, size, value, flat) {
  if (best.length === size && !(value > best[size - 1].value)) return; // equal: the lower flat id stays
  let i = best.length;
  while (i > 0 && best[i - 1].value < value) i--;
  best.splice(i, 0, { value, flat });
  if (best.length > size) best.pop();
}

/** Indices of the `k` largest of `values`, equal values in position order (numpy's stable argsort). */
function stableBest(values, k) {
  return Array.from(values.keys()).sort((a, b) => values[b] - values[a] || a - b).slice(0, k);
}

/**
 * Python's BeamSearch: transformers' beam search bookkeeping (steps 1-7 of beam.py's docstring).
 * `processors` and `prompt` as TokenPicker's (decode/strategies.mjs).
 */
export class BeamSearch {
  constructor(batch, steps, config, ids, { processors = [], prompt = null } = {}) {
    const k = config.numBeams;
    Object.assign(this, { batch, k, steps, config, ids, processors, prompt, rows: batch * k, bosId: ids.bosId, step: 0,
      finished: false });
    this.reads = 'logits';
    this.runIds = Array.from({ length: this.rows }, () => []); // row b*K + j: beam j of source b
    this.runScores = Array.from({ length: this.rows }, (_, r) => (r % k === 0 ? 0 : -OFFSET)); // beam 0 live
    this.slots = Array.from({ length: batch }, () => Array.from({ length: k }, () => ({ ids: [], score: -OFFSET, done: false })));
    this.open = Array(batch).fill(true);
  }

  /** One step from the state's (rows * vocab) logits -> { ids (rows), beamIdx (rows): the row each continues }. */
  advance(state) {
    const { k, step, ids } = this;
    const { data: logits, vocab } = state.logits();
    const last = step === this.steps - 1;
    const nextIds = Array(this.rows);
    const beamIdx = Array(this.rows);
    let allHit = true;
    for (let b = 0; b < this.batch; b++) {
      const cands = this.candidates(logits, vocab, b).map(({ value, flat }) => {
        const beam = Math.floor(flat / vocab);
        const token = flat % vocab;
        const hit = token === ids.eosId || last;
        allHit &&= hit;
        return { value, beam, hit, ids: [...this.runIds[b * k + beam], token], adjusted: hit ? value - OFFSET : value };
      });
      this.finish(b, cands);
      stableBest(cands.map((c) => c.adjusted), k).forEach((c, j) => {
        const row = b * k + j;
        this.runIds[row] = cands[c].ids;
        this.runScores[row] = cands[c].adjusted;
        beamIdx[row] = b * k + cands[c].beam;
        nextIds[row] = cands[c].ids[step];
      });
    }
    this.step += 1;
    this.close(allHit);
    return { ids: nextIds, beamIdx };
  }

  /** Steps 1-2: source b's 2K best (beam, token) candidates, best first; ties: the lower flat index. */
  candidates(logits, vocab, b) {
    const { k, ids, config } = this;
    const best = [];
    for (let j = 0; j < k; j++) {
      const r = b * k + j;
      const scores = processHistory(logSoftmax(logits, r * vocab, vocab), this.runIds[r], this.step, this.steps - 1,
        config, ids, this);
      const base = this.runScores[r];
      for (let t = 0; t < vocab; t++) insertTop(best, 2 * k, scores[t] + base, j * vocab + t);
    }
    return best;
  }

  /** Step 5: the first K candidates that finish enter source b's slots (the K best are kept). */
  finish(b, cands) {
    const { k, config } = this;
    const length = this.step + 1;
    const full = this.slots[b].every((s) => s.done) && config.earlyStopping === true;
    const entries = cands.map((c, i) => {
      const just = c.hit && i < k;
      let score = c.value / length ** config.lengthPenalty;
      if (full) score -= OFFSET;
      if (!this.open[b]) score -= OFFSET;
      if (!just) score -= OFFSET;
      return { ids: c.ids, score, done: just };
    });
    const merged = [...this.slots[b], ...entries];
    this.slots[b] = stableBest(merged.map((s) => s.score), k).map((i) => merged[i]);
  }

  /** Steps 6-7, after the step (`this.step` is now the number of generated tokens). */
  close(allHit) {
    const { k, config } = this;
    const never = config.earlyStopping === 'never';
    const length = never && config.lengthPenalty > 0 ? this.steps : this.step;
    for (let b = 0; b < this.batch; b++) {
      const best = this.runScores[b * k] / length ** config.lengthPenalty;
      const min = Math.min(...this.slots[b].map((s) => s.score));
      this.open[b] &&= this.slots[b].some((s) => best > (s.done ? min : -OFFSET));
    }
    const allFull = this.slots.every((slots) => slots.every((s) => s.done)) && config.earlyStopping === true;
    this.finished = !this.open.some(Boolean) || allFull || allHit || this.step === this.steps;
  }

  /** Per source, its best numReturnSequences slots { ids (without EOS), score }, best first. */
  results() {
    const eos = this.ids.eosId;
    return this.slots.map((slots) => slots.slice(0, this.config.numReturnSequences).map((s) => ({
      ids: s.ids.length && s.ids[s.ids.length - 1] === eos ? s.ids.slice(0, -1) : s.ids.slice(), score: s.score })));
  }
}
