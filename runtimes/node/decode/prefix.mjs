// CTranslate2's `target_prefix` over the core strategies: the port of tfm_export/runtime/decode/prefix.py.
// Each source's given first target tokens are fed to the decoder before anything is chosen (transformers'
// `generate(decoder_input_ids=[decoder start, ...prefix])`): `PrefixStrategy` feeds the forced prompt one token a
// step, with no choice read, then hands every step to a core strategy (TokenPicker, BeamSearch) whose `prompt` is
// that decoder input (the processors' history). maxNewTokens, minNewTokens, forced EOS and beam search's length
// normalisation count the tokens after the prefix; a forced first token (a multilingual model's target language)
// is put in front of the prefix unless the prefix starts with it. Hypotheses are returned with their prefix.
// The Node strategies take one prompt for all their rows, so sources decode in groups of equal prefixes (Python
// groups by length: the same ids).
//
// `return_alternatives` (`Alternatives`): CTranslate2's alternatives at the first position after the prefix: that
// position's `n` most likely tokens (after the model's bans: the processors of step 0), each continued greedily.
// Every alternative starts with the prefix and they differ at the position after it; their scores are the
// alternative token's log-probability plus its continuation's.
// No globals beyond ECMAScript: the browser page may import this file.
import { BeamSearch } from './beam.mjs';
import { logSoftmax, processRow } from './processors.mjs';
import { generationConfig } from '../options/generation.mjs';
import { trim } from '../sources.mjs';
import { TokenPicker } from './strategies.mjs';

/** Feeds `prompt` (the decoder start, then the prefix) one token a step, then lets `inner` choose. */
export class PrefixStrategy {
  constructor(prompt, inner) {
    Object.assign(this, { prompt, inner, rows: inner.rows, reads: inner.reads, bosId: prompt[0], fed: 0 });
    this.finished = inner.steps === 0;
  }

  advance(state) {
    if (this.fed + 1 < this.prompt.length) {
      this.fed += 1;
      return { ids: Array(this.rows).fill(this.prompt[this.fed]), beamIdx: null };
    }
    const out = this.inner.advance(state);
    this.finished = this.inner.finished;
    return out;
  }

  /** The inner strategy's hypotheses, each with the prefix (the prompt after the decoder start) first. */
  results() {
    const head = this.prompt.slice(1);
    return this.inner.results().map((hyps) => hyps.map((h) => ({ ...h, ids: [...head, ...h.ids] })));
  }
}

/** The `n` best of a row of log-probabilities, best first, ties to the lower id (Python's lexsort). */
function topIds(logp, n) {
  const best = []; // ids, best first
  for (let t = 0; t < logp.length; t++) {
    if (best.length === n && !(logp[t] > logp[best[n - 1]])) continue; // equal: the lower id stays
    let i = best.length;
    while (i > 0 && logp[best[i - 1]] < logp[t]) i--;
    best.splice(i, 0, t);
    if (best.length > n) best.pop();
  }
  return best;
}

/**
 * CTranslate2's `return_alternatives` (Python's Alternatives) for `batch` sources sharing `prompt` (the decoder
 * start, then the prefix): after it, each source's `n` most likely next tokens (rows b*n .. b*n + n-1, best first,
 * ties to the lower id), each row then continued greedily (see the module comment). `config`: the search's
 * processors for the alternative's position (bans, minNewTokens).
 */
export class Alternatives {
  constructor(batch, prompt, n, steps, config, ids) {
    Object.assign(this, { prompt, n, steps, config, ids, rows: batch * n, bosId: prompt[0], fed: 0, inner: null });
    this.reads = 'logits';
    this.first = Array(this.rows).fill(ids.eosId); // each row's alternative token
    this.firstLogp = new Float64Array(this.rows);
    this.finished = steps === 0;
  }

  advance(state) {
    if (this.fed + 1 < this.prompt.length) {
      this.fed += 1;
      return { ids: Array(this.rows).fill(this.prompt[this.fed]), beamIdx: null };
    }
    if (this.inner === null) return { ids: this.expand(state), beamIdx: null };
    const out = this.inner.advance(state);
    this.finished = this.inner.finished;
    return out;
  }

  /** The alternatives' step: rows of a source share their logits; row j of source b takes its j-th best. */
  expand(state) {
    const { config: cfg, n, ids } = this;
    const { data, vocab } = state.logits();
    for (let r = 0; r < this.rows; r += n) { // a source's first row
      const processed = processRow(logSoftmax(data, r * vocab, vocab), this.prompt, 0, this.steps - 1, cfg, ids.eosId,
        ids.banned);
      const logp = logSoftmax(processed);
      topIds(logp, n).forEach((token, j) => { this.first[r + j] = token; this.firstLogp[r + j] = logp[token]; });
    }
    const greedy = generationConfig(null, { maxNewTokens: Math.max(this.steps - 1, 1),
      minNewTokens: Math.max(cfg.minNewTokens - 1, 0), forcedEos: cfg.forcedEos,
      repetitionPenalty: cfg.repetitionPenalty, noRepeatNgramSize: cfg.noRepeatNgramSize });
    const prompts = this.first.map((token) => [...this.prompt, token]);
    this.inner = new TokenPicker(this.rows, this.steps - 1, greedy, ids, { prompts });
    this.first.forEach((token, r) => { this.inner.done[r] = token === ids.eosId; }); // an alternative that ends the row
    this.finished = this.steps === 1 || this.inner.done.every(Boolean);
    return [...this.first];
  }

  /** Per source its n alternatives { ids: the prefix, the alternative token, its greedy continuation; score }. */
  results() {
    const prefix = this.prompt.slice(1);
    const hyps = this.first.map((token, r) => {
      if (token === this.ids.eosId || this.inner === null) return { ids: [...prefix], score: this.firstLogp[r] };
      const rest = trim(this.inner.out[r], this.ids.eosId);
      return { ids: [...prefix, token, ...rest], score: this.firstLogp[r] + this.inner.scores[r] };
    });
    return Array.from({ length: this.rows / this.n }, (_, b) => hyps.slice(b * this.n, (b + 1) * this.n));
  }
}

/** The prefix with the config's forced first token in front (unless it starts with it), and the config without. */
export function withForcedFirst(prefix, config) {
  const forced = config.forcedBosTokenId;
  if (forced === null || forced === undefined) return { prefix: [...prefix], config };
  return { prefix: prefix[0] === forced ? [...prefix] : [forced, ...prefix], config: { ...config, forcedBosTokenId: null } };
}

/**
 * The strategy for `batch` sources that share `prefix`: beam search or token picking after it, or with
 * `alternatives` n > 0 CTranslate2's n alternatives.
 */
export function prefixStrategy(batch, prefix, steps, config, ids, alternatives = 0) {
  const prompt = [ids.bosId, ...prefix];
  if (alternatives) return new Alternatives(batch, prompt, alternatives, steps, config, ids);
  const inner = config.numBeams > 1 ? new BeamSearch(batch, steps, config, ids, { prompt })
    : new TokenPicker(batch, steps, config, ids, { prompt });
  return new PrefixStrategy(prompt, inner);
}

/**
 * Each source's group of equal prefixes (after any forced first token): [{ prefix, members (source indices) }],
 * checked: one prefix per source, ids in the vocabulary, room left after it in `limit` positions.
 */
export function prefixGroups(prefixes, sourceCount, config, vocab, limit) {
  if (prefixes.length !== sourceCount) {
    throw new Error(`targetPrefix gives ${prefixes.length} prefixes for ${sourceCount} sources; give one each (an empty list for none)`);
  }
  const groups = new Map();
  prefixes.forEach((given, i) => {
    const { prefix } = withForcedFirst(given, config);
    const bad = prefix.find((id) => !Number.isInteger(id) || id < 0 || id >= vocab);
    if (bad !== undefined) throw new Error(`targetPrefix has id ${bad}, out of range for a vocabulary of ${vocab} ids`);
    if (limit - prefix.length < 1) {
      throw new Error(`a target prefix of ${prefix.length} tokens leaves no room in the model's max_len of ${limit}`);
    }
    const key = prefix.join(',');
    if (!groups.has(key)) groups.set(key, { prefix, members: [] });
    groups.get(key).members.push(i);
  });
  return [...groups.values()];
}
