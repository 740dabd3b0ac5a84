// Speculative sampling: drafted ids checked so that the output keeps the model's distribution. The port of
// tfm_export/runtime/decode/speculative_sampling.py (its docstring is the specification): transformers'
// `_speculative_sampling` (Leviathan et al. 2023, algorithm 1). A proposer drafts d_1..d_k, each from its q_i
// (a draft model sampling under the model's processors and warpers; one-hot for prompt lookup), one decoder step
// gives the model's p_1..p_{k+1}; d_i is kept with probability min(1, p_i(d_i) / q_i(d_i)), the first rejection
// emits a draw from norm(max(0, p_i - q_i)) and stops, and when all k are kept a bonus id is drawn from p_{k+1}.
// The random numbers are the row's SplitMix64 (decode/sampling.mjs), drawn in Python's order (one per drafted id,
// one per acceptance test, one per emitted residual or bonus id), so a seeded decode gives Python's ids; they are
// not plain sampling's draws (the same seed gives other ids, from the same distribution).
// No globals beyond ECMAScript: the browser page may import this file too.
import { DraftLength } from './draft_length.mjs';
import { logProbAt, pairwiseSum, processRow } from './processors.mjs';
import { DraftModel } from './proposers.mjs';
import { rowGenerators, draw, warp } from './sampling.mjs';
import { Speculation, proposal, speculate } from './speculative.mjs';
import { padSources } from '../sources.mjs';

const TINY = 2.2250738585072014e-308; // np.finfo(np.float64).tiny: the smallest normal float64

/** The probability of keeping a drafted id that the model gives pD and the draft gave qD. */
export function acceptance(pD, qD) {
  if (qD <= 0) return pD > 0 ? 1 : 0; // an id its own q cannot draw (a proposer that misreports)
  return Math.min(1, pD / qD);
}

/** max(0, p - q) (unnormalised), what a rejected position draws from; p where it vanishes (p == q up to rounding). */
export function residual(p, q) {
  const rest = Float64Array.from(p, (v, t) => Math.max(v - q[t], 0));
  return pairwiseSum(rest) > TINY ? rest : p;
}

/** One-hot q at `token` over `vocab` ids: a deterministic draft's. */
function oneHot(vocab, token) {
  const q = new Float64Array(vocab);
  q[token] = 1;
  return q;
}

/**
 * [the ids a step emits, how many drafted ids it accepted]. `draft` d_1..d_k; `p` (k + 1 rows of vocab) the
 * model's probabilities after each prefix; `q` (k rows) the draft's, or null for a deterministic draft.
 */
export function accept(draft, p, q, generator) {
  for (const [i, token] of draft.entries()) {
    const qi = q === null ? oneHot(p[i].length, token) : q[i];
    if (generator.uniform() >= acceptance(p[i][token], qi[token])) return [[...draft.slice(0, i), draw(residual(p[i], qi), generator)], i];
  }
  return [[...draft, draw(p[draft.length], generator)], draft.length];
}

/** A row's float64 processed scores -> the probabilities sampling draws from (warped, normalised). */
export function distribution(scores, config) {
  const warped = warp(scores, config.temperature, config.topK, config.topP);
  let max = -Infinity;
  for (const v of warped) if (v > max) max = v;
  const probs = Float64Array.from(warped, (v) => Math.exp(v - max));
  const total = pairwiseSum(probs);
  return probs.map((v) => v / total);
}

/**
 * One sampled row's processors, warpers and generator, shared by the model's check and a draft model's proposals
 * (decode/proposers.mjs's DraftModel), so that q is formed as p is (Python's Sampler).
 */
export class Sampler {
  constructor(config, eosId, banned, lastStep, generator, prompt = 1) {
    Object.assign(this, { config, eosId, banned, lastStep, generator, prompt });
  }

  /** The sampler of a row of at most `steps` ids decoded under `config` by a model of manifest config `c`. */
  static of(config, c, steps, generator) {
    return new Sampler(config, c.eos_id, c.suppress_ids ?? [], steps - 1, generator);
  }

  /** n rows of logits, the last n positions of decoder input `ids` (row j: after ids[:ids.length - n + 1 + j]) ->
   * n float64 rows of scores, each processed on its own history and step. */
  processed(rows, ids) {
    const base = ids.length - rows.length + 1;
    return rows.map((row, j) => {
      const prefix = ids.slice(0, base + j);
      return processRow(Float64Array.from(row), prefix, prefix.length - this.prompt, this.lastStep, this.config,
        this.eosId, this.banned);
    });
  }

  /** `processed`'s rows -> their probabilities, what sampling draws from. */
  probabilities(rows, ids) {
    return this.processed(rows, ids).map((scores) => distribution(scores, this.config));
  }

  /** A draft model's next id after decoder input `ids` from its last position's logits (one row), and its q. */
  draft(row, ids) {
    const [q] = this.probabilities([row], ids);
    return [draw(q, this.generator), q];
  }
}

/**
 * The check of a sampled speculative step (decode/checking.mjs's protocol, Python's SamplingCheck): its picks are
 * the ids the step emits, the accepted drafted ids then one drawn id, which decode/speculative.mjs keeps as it
 * keeps a greedy check's matching picks. `proposer`: the step's, whose `probabilities` are the draft's q (null:
 * one-hot). `score`: the sum of each kept id's log_softmax of its processed scores (before the warpers, EOS
 * included), as TokenPicker scores a sampled row.
 */
export class SamplingCheck {
  constructor(sampler, proposer) {
    Object.assign(this, { sampler, proposer, eosId: sampler.eosId, score: 0, pending: [] });
  }

  forced() {
    return null; // processRow forces forcedBosTokenId and forced EOS itself: one-hot p
  }

  picks(state, history, draft) {
    const { data, vocab } = state.positionLogits(); // one row: (fed, vocab), the last draft.length + 1 checked
    const fed = data.length / vocab;
    const rows = Array.from({ length: draft.length + 1 }, (_, i) => {
      const at = (fed - draft.length - 1 + i) * vocab;
      return data.subarray(at, at + vocab);
    });
    const q = draft.length ? this.proposer.probabilities ?? null : null;
    const scores = this.sampler.processed(rows, [...history, ...draft]);
    const p = scores.map((row) => distribution(row, this.sampler.config));
    const [emitted] = accept(draft, p, q, this.sampler.generator);
    this.pending = emitted.map((token, j) => logProbAt(scores[j], token));
    return emitted;
  }

  keep(count) {
    for (const logProb of this.pending.slice(0, count)) this.score += logProb;
  }
}

/**
 * Sampled rows of each source, one source at a time, speculatively (prompt lookup or the `assistant`, as
 * decode/speculative.mjs's `proposal` picks; `draftCache`: its GrowingCache): `samples` rows per source, row j of
 * source i drawing from the generator of decoder row firstRow + i * numReturnSequences + j, as plain sampling's rows,
 * at most `steps` ids each (EOS not returned): per source its hypotheses { ids, score } (score: SamplingCheck's).
 * A draft model samples with the row's sampler; the draft length follows transformers' schedule alone, fresh for
 * every row (no timing switch-off: the random numbers a row draws depend on its draft lengths). `stats` (a
 * Speculation) sums the rows' counts; `timings` as decode/speculative.mjs's.
 */
export async function sampleHypotheses(cache, sources, config, manifest, assistant, draftCache, steps,
  { timings = null, stats = null, samples = 1, firstRow = 0 } = {}) {
  const c = manifest.config;
  const stride = config.numReturnSequences;
  const generators = rowGenerators(config.seed, firstRow + sources.length * stride).slice(firstRow);
  const out = [];
  for (const [i, source] of sources.entries()) {
    const hyps = [];
    for (let j = 0; j < samples; j++) {
      const sampler = Sampler.of(config, c, steps, generators[i * stride + j]);
      const { proposer, policy } = proposal(config, manifest, assistant, draftCache);
      if (proposer instanceof DraftModel) proposer.sampler = sampler;
      const check = new SamplingCheck(sampler, proposer);
      const one = new Speculation();
      const ids = await speculate(cache, source, padSources(c, [source]), proposer,
        new DraftLength(policy.start, policy.cap, { switchOff: false }), steps, c, { timings, stats: one, check });
      hyps.push({ ids, score: check.score });
      if (stats) Object.assign(stats, { calls: stats.calls + one.calls, drafted: stats.drafted + one.drafted, accepted: stats.accepted + one.accepted });
    }
    out.push(hyps);
  }
  return out;
}

/** `sampleHypotheses`' ids, row after row (source i's `samples` rows consecutive), as Python's sample_sources. */
export async function sampleSources(...args) {
  return (await sampleHypotheses(...args)).flatMap((hyps) => hyps.map((h) => h.ids));
}
