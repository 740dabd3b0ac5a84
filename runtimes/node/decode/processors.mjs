// The logits processors in transformers' order, on one row at a time: the port of
// tfm_export/runtime/decode/processors.py (its docstring is the specification), with the float64
// helpers every strategy shares (log-softmax, numpy's pairwise sum, argmax).
//
// Numbers: scores are float64 (JS Number), like Python's. Sums use numpy's pairwise summation
// (`pairwiseSum`), so they are bit-equal to np.sum; Math.exp / Math.log may differ from numpy's in the
// last bit (about 1 value in 12), which can change a token only on an exact near-tie.
// No globals beyond ECMAScript: the browser page imports this file too.

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

const spares = [new Float64Array(0), new Float64Array(0)]; // logProbAt's and speech/rules.mjs's vocabulary-wide rows

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
 * Python's processors.process on one row (in place, returned; a new array when renormalised): repetition
 * penalty, no-repeat n-grams, the model's banned ids, min_new_tokens, forced BOS (step 0), forced
 * EOS, then `processors` in order (a model's or a caller's own LogitsProcessors), renormalisation last.
 * `history`: the row's decoder input so far, BOS (or the forced prompt) first; `step`: ids generated so far.
 */
export function processRow(scores, history, step, lastStep, config, eosId, banned = [], processors = []) {
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
  // a caller's list after transformers' own (its _merge_criteria_processor_list), before LogitNormalization
  for (const processor of processors) scores = processor.process(scores, history, step);
  return config.renormalizeLogits ? logSoftmax(scores) : scores;
}

/**
 * processRow on a strategy's row whose generated ids are `row`: its history (what the decoder was fed)
 * is the strategy's forced `prompt` (Python's `prompt` of TokenPicker and BeamSearch: default BOS alone)
 * then `row`; the strategy's `processors` (LogitsProcessors: objects with `process(scores, history,
 * step)` -> scores, in place or new, as Python's callables; speech/rules.mjs has Whisper's) run after
 * the generic ones, as transformers appends them.
 */
export function processHistory(scores, row, step, lastStep, config, ids, { prompt = null, processors = [] } = {}) {
  const history = [...(prompt ?? [ids.bosId]), ...row];
  return processRow(scores, history, step, lastStep, config, ids.eosId, ids.banned, processors);
}

/** The index of the largest value of a row (ties: the lower id). */
export function argmax(row) {
  let best = 0;
  for (let t = 1; t < row.length; t++) if (row[t] > row[best]) best = t; // ties: the lower id
  return best;
}
