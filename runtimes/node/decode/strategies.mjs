// Greedy decoding and token picking, the strategies beside decode/beam.mjs's BeamSearch: the port of
// tfm_export/runtime/decode/strategies.py, so that Node, the browser and Python choose the same tokens
// and report the same scores.
//
// Every strategy has one shape, which is all the driver (decode/loop.mjs's `decode`) knows of it:
// `rows` (decoder rows, source i's consecutive), `reads` (the one decoder output it takes each step:
// 'next_ids' or 'logits', so the driver fetches only that one), `finished`, `advance(state)` -> { ids
// (rows), beamIdx (rows, or null when rows keep their places) } where `state` is the step's decoder
// state (nextIds() / logits()), and `results()`: per source, its hypotheses { ids, score }.
// No globals beyond ECMAScript: the browser page imports this file too.
import { BeamSearch } from './beam.mjs';
import { isGreedy } from '../options/generation.mjs';
import { argmax, logProbAt, processHistory } from './processors.mjs';
import { rowGenerators, sample, warp } from './sampling.mjs';
import { trim } from '../sources.mjs';

/**
 * Plain greedy decoding on the decoder's own argmax (next_ids, computed in the graph): the logits never
 * cross to JS, and no score is kept (`generate` asks for a TokenPicker, which has them).
 * Python's Greedy. The one place of the forced-BOS rule for it: forcedBosTokenId replaces
 * the first step's ids (TokenPicker and BeamSearch get it from processRow). With `stopAtEos` (the
 * default), a row that has emitted EOS feeds tgt_pad_id from then on and decoding stops when every row
 * has; without it every row takes all `steps` ids (benchmarks: a fixed amount of work).
 */
export class Greedy {
  constructor(batch, steps, config, ids, { stopAtEos = true } = {}) {
    Object.assign(this, { steps, config, ids, stopAtEos, rows: batch, bosId: ids.bosId, step: 0, finished: false });
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
    return this.out.map((row) => [{ ids: this.stopAtEos ? trim(row, this.ids.eosId) : row.slice(), score: null }]);
  }
}

/**
 * Greedy (with processors) or sampled ids for rows = batch * numReturnSequences (source i: rows
 * i*n .. i*n + n-1), Python's TokenPicker. `processors`: LogitsProcessors after the generic ones
 * (decode/processors.mjs); `prompt`: the rows' decoder input before their first generated id (the
 * processors' history; default BOS alone), as a wrapper such as speech/search.mjs's sets it; `prompts`: one
 * such input per row instead (decode/prefix.mjs's Alternatives: each row after its own alternative). A row's
 * score: the sum of log_softmax(processed logits) at its ids; `scored: false` keeps none (score null):
 * a vocabulary-wide exp and sum a step that ids alone do not need.
 */
export class TokenPicker {
  constructor(batch, steps, config, ids, { scored = true, processors = [], prompt = null, prompts = null } = {}) {
    Object.assign(this, { steps, config, ids, scored, processors, prompt, prompts, rows: batch * config.numReturnSequences,
      bosId: ids.bosId, step: 0, finished: false });
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
      const scores = processHistory(this.rowScores, row, step, this.steps - 1, cfg, ids,
        this.prompts ? { prompt: this.prompts[r], processors: this.processors } : this);
      const token = cfg.doSample
        ? sample(warp(scores, cfg.temperature, cfg.topK, cfg.topP), this.generators[r]) : argmax(scores);
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
    const hyps = this.out.map((row, r) => ({ ids: trim(row, this.ids.eosId), score: this.scored ? this.scores[r] : null }));
    return Array.from({ length: this.rows / n }, (_, i) => hyps.slice(i * n, (i + 1) * n));
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
