// The decoding strategies of the shared step driver (decoding.mjs) and what they run on: `Greedy` on
// the decoder's own argmax, and, on the logits, the logits processors, seeded sampling (`TokenPicker`)
// and beam search (`BeamSearch`), ported line by line from the Python runtime
// (tfm_export/runtime/decoding.py, processors.py, sampling.py, beam.py, search.py; their docstrings
// are the specification) so that Node, the browser and Python choose the same tokens and report the
// same scores.
//
// Every strategy has one shape, which is all the driver knows of it: `rows` (decoder rows, source i's
// consecutive), `reads` (the one decoder output it takes each step: 'next_ids' or 'logits', so the
// driver fetches only that one), `finished`, `advance(state)` -> { ids (rows), beamIdx (rows, or null
// when rows keep their places) } where `state` is the step's decoder state (nextIds() / logits()),
// and `results()`: per source, its hypotheses { ids, score }.
//
// Numbers: scores are float64 (JS Number), like Python's. Sums use numpy's pairwise summation
// (`pairwiseSum`), so they are bit-equal to np.sum; Math.exp / Math.log may differ from numpy's in the
// last bit (about 1 value in 12), which can change a token only on an exact near-tie.
// No globals beyond ECMAScript (BigInt for SplitMix64): the browser page imports this file too.
import { isGreedy } from './options.mjs';

export const OFFSET = 1e9; // transformers' "very large negative value" for excluded candidates and empty slots
const MASK64 = (1n << 64n) - 1n;

/** np.sum of a float64 row: numpy's pairwise summation (blocks of 128, 8 accumulators). */
export function pairwiseSum(a, start = 0, n = a.length - start) {
  if (n < 8) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += a[start + i];
    return sum;
  }
  if (n <= 128) { // eight named accumulators, not an array: this runs ~400 times per vocabulary-wide sum
    let [r0, r1, r2, r3, r4, r5, r6, r7] = [a[start], a[start + 1], a[start + 2], a[start + 3], a[start + 4],
      a[start + 5], a[start + 6], a[start + 7]];
    let i = start + 8;
    const end = start + n;
    for (const blocks = end - (n % 8); i < blocks; i += 8) {
      r0 += a[i]; r1 += a[i + 1]; r2 += a[i + 2]; r3 += a[i + 3];
      r4 += a[i + 4]; r5 += a[i + 5]; r6 += a[i + 6]; r7 += a[i + 7];
    }
    let sum = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    for (; i < end; i++) sum += a[i];
    return sum;
  }
  const half = Math.floor(n / 2) - (Math.floor(n / 2) % 8);
  return pairwiseSum(a, start, half) + pairwiseSum(a, start + half, n - half);
}

const spares = [new Float64Array(0), new Float64Array(0)]; // logProbAt's and whisper.mjs's vocabulary-wide rows

/**
 * Float64 scratch row `slot` (0 or 1) of at least n values: vocabulary-wide sums without a new array
 * per step, which the next call of the same slot overwrites (every caller is synchronous).
 */
export function scratch(n, slot = 0) {
  if (spares[slot].length < n) spares[slot] = new Float64Array(n);
  return spares[slot];
}

/** One row of logits (any numeric array, from `offset`, `vocab` long) -> float64 log-probabilities. */
export function logSoftmax(logits, offset = 0, vocab = logits.length - offset) {
  const x = Float64Array.from(logits.subarray ? logits.subarray(offset, offset + vocab) : logits.slice(offset, offset + vocab));
  let max = -Infinity;
  for (const v of x) if (v > max) max = v;
  const exp = new Float64Array(vocab);
  for (let t = 0; t < vocab; t++) { x[t] -= max; exp[t] = Math.exp(x[t]); }
  const lse = Math.log(pairwiseSum(exp));
  for (let t = 0; t < vocab; t++) x[t] -= lse;
  return x;
}

/** logSoftmax(row)[token], the same float64 operations, without the two vocabulary-wide arrays it returns. */
export function logProbAt(row, token) {
  const n = row.length;
  let max = -Infinity;
  for (let t = 0; t < n; t++) if (row[t] > max) max = row[t];
  const exp = scratch(n);
  for (let t = 0; t < n; t++) exp[t] = Math.exp(row[t] - max);
  return (row[token] - max) - Math.log(pairwiseSum(exp, 0, n));
}

/** Tokens that would complete an n-gram already in `row` (which ends with the current n-1 tokens). */
export function bannedNgramTokens(row, n) {
  if (row.length < n) return [];
  const prefix = row.slice(row.length - n + 1);
  const banned = [];
  for (let i = 0; i + n <= row.length; i++) {
    if (prefix.every((id, j) => row[i + j] === id)) banned.push(row[i + n - 1]);
  }
  return banned;
}

/**
 * processors.process on one row (in place, returned; a new array when renormalised): repetition
 * penalty, no-repeat n-grams, the model's banned ids, min_new_tokens, forced BOS (step 0), forced
 * EOS, renormalisation.
 * `history`: the row's ids so far, BOS first; `step`: ids generated so far.
 */
export function processRow(scores, history, step, lastStep, config, eosId, banned = []) {
  if (config.repetitionPenalty !== 1) {
    const p = config.repetitionPenalty;
    for (const t of new Set(history)) scores[t] = scores[t] < 0 ? scores[t] * p : scores[t] / p;
  }
  if (config.noRepeatNgramSize) {
    for (const t of bannedNgramTokens(history, config.noRepeatNgramSize)) scores[t] = -Infinity;
  }
  for (const t of banned) scores[t] = -Infinity;
  if (step < config.minNewTokens) scores[eosId] = -Infinity;
  // transformers' order: forced BOS, then forced EOS (which wins when both fall on step 0)
  for (const forced of [step === 0 ? config.forcedBosTokenId : null, config.forcedEos && step === lastStep ? eosId : null]) {
    if (forced === null || forced === undefined) continue;
    scores.fill(-Infinity);
    scores[forced] = 0;
  }
  return config.renormalizeLogits ? logSoftmax(scores) : scores;
}

/**
 * processRow on a row whose generated ids are `row`, its history (what the decoder was fed) the forced
 * prompt `ids.prompt` (default: BOS alone) then `row`; a model's own processors (`ids.process(scores,
 * history)`: Whisper's, whisper.mjs) run after the generic ones, as transformers appends them.
 */
function processed(scores, row, step, lastStep, config, ids) {
  const history = [...(ids.prompt ?? [ids.bosId]), ...row];
  const out = processRow(scores, history, step, lastStep, config, ids.eosId, ids.banned);
  return ids.process ? ids.process(out, history) : out;
}

/** SplitMix64 on BigInt (exact 64-bit arithmetic), Python's runtime.sampling.SplitMix64. */
export class SplitMix64 {
  constructor(seed) { this.state = BigInt(seed) & MASK64; }

  next() {
    this.state = (this.state + 0x9E3779B97F4A7C15n) & MASK64;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & MASK64;
    return z ^ (z >> 31n);
  }

  /** [0, 1) from the top 53 bits. */
  uniform() { return Number(this.next() >> 11n) / 2 ** 53; }
}

/** One generator per decoder row, seeded from SplitMix64(seed)'s outputs: rows do not depend on each other. */
export function rowGenerators(seed, rows) {
  const master = new SplitMix64(seed);
  return Array.from({ length: rows }, () => new SplitMix64(master.next()));
}

/** Temperature, top-k (ties at the k-th kept), top-p (stable ascending order); removed tokens -> -Infinity. */
export function warp(row, temperature, topK, topP) {
  const s = row.map((v) => v / temperature);
  if (topK > 0 && topK < s.length) {
    const kth = Float64Array.from(s).sort()[s.length - topK];
    for (let t = 0; t < s.length; t++) if (s[t] < kth) s[t] = -Infinity;
  }
  if (topP < 1) {
    const order = Array.from(s.keys()).sort((a, b) => s[a] - s[b] || a - b); // ascending; ties by id
    const top = s[order[order.length - 1]];
    const probs = Float64Array.from(order, (t) => Math.exp(s[t] - top));
    const total = pairwiseSum(probs);
    let cumulative = 0;
    order.forEach((t, i) => {
      cumulative += probs[i] / total; // np.cumsum: sequential
      if (cumulative <= 1 - topP && i < order.length - 1) s[t] = -Infinity; // the most likely stays
    });
  }
  return s;
}

/** One token id from one row's warped scores: the first id whose running sum of exp(s - max) exceeds u * sum. */
export function sampleToken(scores, generator) {
  let max = -Infinity;
  for (const v of scores) if (v > max) max = v;
  const running = new Float64Array(scores.length);
  let sum = 0;
  scores.forEach((v, t) => { sum += Math.exp(v - max); running[t] = sum; });
  const target = generator.uniform() * sum;
  const hit = running.findIndex((r) => r > target);
  if (hit >= 0) return hit;
  for (let t = scores.length - 1; t >= 0; t--) if (Math.exp(scores[t] - max) > 0) return t;
  return scores.length - 1;
}

/** The index of the largest value of a row (ties: the lower id). */
export function argmax(row) {
  let best = 0;
  for (let t = 1; t < row.length; t++) if (row[t] > row[best]) best = t; // ties: the lower id
  return best;
}

/**
 * Plain greedy decoding on the decoder's own argmax (next_ids, computed in the graph): the logits never
 * cross to JS, and no score is kept (`generate` asks for a TokenPicker, which has them). Python's
 * GreedyRows and greedy_loop. The one place of the forced-BOS rule for it: forcedBosTokenId replaces
 * the first step's ids (TokenPicker and BeamSearch get it from processRow). With `stopAtEos` (the
 * default), a row that has emitted EOS feeds tgt_pad_id from then on and decoding stops when every row
 * has; without it every row takes all `steps` ids (benchmarks: a fixed amount of work).
 */
export class Greedy {
  constructor(batch, steps, config, ids, { stopAtEos = true } = {}) {
    Object.assign(this, { steps, config, ids, stopAtEos, rows: batch, step: 0, finished: false });
    this.reads = 'next_ids';
    this.out = Array.from({ length: batch }, () => []); // ids generated so far (EOS kept, then padding)
    this.done = Array(batch).fill(false);
  }

  /** One step from the state's next_ids -> { ids (rows), beamIdx: null }. */
  advance(state) {
    const { ids, step, stopAtEos } = this;
    const forced = this.config.forcedBosTokenId ?? null;
    const chosen = step === 0 && forced !== null ? Array(this.rows).fill(forced) : state.nextIds();
    const next = chosen.map((token, r) => (stopAtEos && this.done[r] ? ids.padId : token));
    next.forEach((token, r) => {
      this.out[r].push(token);
      if (stopAtEos && token === ids.eosId) this.done[r] = true;
    });
    this.step += 1;
    this.finished = this.done.every(Boolean) || this.step === this.steps;
    return { ids: next, beamIdx: null };
  }

  /** Per source, one hypothesis { ids (cut at EOS with stopAtEos, else all), score: null }. */
  results() {
    return this.out.map((row) => [{ ids: this.stopAtEos ? trimAtEos(row, this.ids.eosId) : row.slice(), score: null }]);
  }
}

/**
 * Greedy (with processors) or sampled ids for rows = batch * numReturnSequences (source i: rows
 * i*n .. i*n + n-1). A row's score: the sum of log_softmax(processed logits) at its ids; `scored: false`
 * keeps none (score null): a vocabulary-wide exp and sum a step that ids alone do not need.
 */
export class TokenPicker {
  constructor(batch, steps, config, ids, { scored = true } = {}) {
    Object.assign(this, { steps, config, ids, scored, rows: batch * config.numReturnSequences, step: 0, finished: false });
    this.reads = 'logits';
    this.out = Array.from({ length: this.rows }, () => []); // ids generated so far (EOS kept, then padding)
    this.scores = new Float64Array(this.rows);
    this.done = Array(this.rows).fill(false);
    this.generators = config.doSample ? rowGenerators(config.seed, this.rows) : [];
  }

  /** One step from the state's (rows * vocab) logits -> { ids (rows), beamIdx: null }. */
  advance(state) {
    const { config: cfg, ids, step } = this;
    const { data: logits, vocab } = state.logits();
    if (this.rowScores?.length !== vocab) this.rowScores = new Float64Array(vocab); // one row's scores, reused every step
    const nextIds = this.out.map((row, r) => {
      if (this.done[r]) return ids.padId;
      this.rowScores.set(logits.subarray(r * vocab, (r + 1) * vocab));
      const scores = processed(this.rowScores, row, step, this.steps - 1, cfg, ids);
      const token = cfg.doSample
        ? sampleToken(warp(scores, cfg.temperature, cfg.topK, cfg.topP), this.generators[r]) : argmax(scores);
      if (this.scored) this.scores[r] += logProbAt(scores, token);
      this.done[r] = token === ids.eosId;
      return token;
    });
    nextIds.forEach((token, r) => this.out[r].push(token));
    this.step += 1;
    this.finished = this.done.every(Boolean) || this.step === this.steps;
    return { ids: nextIds, beamIdx: null };
  }

  /** Per source, its numReturnSequences hypotheses { ids (without EOS), score } in row order. */
  results() {
    const n = this.config.numReturnSequences;
    const hyps = this.out.map((row, r) => ({ ids: trimAtEos(row, this.ids.eosId), score: this.scored ? this.scores[r] : null }));
    return Array.from({ length: this.rows / n }, (_, i) => hyps.slice(i * n, (i + 1) * n));
  }
}

export function trimAtEos(row, eosId) {
  const at = row.indexOf(eosId);
  return at < 0 ? row.slice() : row.slice(0, at);
}

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

/** runtime.beam.BeamSearch: transformers' beam search bookkeeping (see beam.py's docstring, steps 1-7). */
export class BeamSearch {
  constructor(batch, steps, config, ids) {
    const k = config.numBeams;
    Object.assign(this, { batch, k, steps, config, ids, rows: batch * k, step: 0, finished: false });
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
      const scores = processed(logSoftmax(logits, r * vocab, vocab), this.runIds[r], this.step, this.steps - 1,
        config, ids);
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

/**
 * The strategy for `config`: beam search when numBeams > 1; plain greedy (`isGreedy`) on the decoder's
 * own next_ids unless `scored` (generate reports each hypothesis' score, which needs the logits);
 * else TokenPicker (greedy with processors, sampling), which sums scores only when `scored`.
 * `stopAtEos`: Greedy's (see there).
 */
export function strategyFor(batch, steps, config, ids, { scored = false, stopAtEos = true } = {}) {
  if (config.numBeams > 1) return new BeamSearch(batch, steps, config, ids);
  if (isGreedy(config) && !scored) return new Greedy(batch, steps, config, ids, { stopAtEos });
  return new TokenPicker(batch, steps, config, ids, { scored });
}
