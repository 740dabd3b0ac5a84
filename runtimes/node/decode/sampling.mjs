// Seeded sampling that every runtime reproduces token for token: the port of
// tfm_export/runtime/decode/sampling.py (its docstring is the specification): SplitMix64 on BigInt, one
// generator per decoder row, transformers' warpers (temperature, top-k, top-p) and the draw (`sample`, `draw`).
// No globals beyond ECMAScript (BigInt): the browser page imports this file too.
import { pairwiseSum } from './processors.mjs';

const MASK64 = (1n << 64n) - 1n;

/** SplitMix64 on BigInt (exact 64-bit arithmetic), Python's runtime.decode.sampling.SplitMix64. */
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

/** One token id from one row's warped scores: `draw` on exp(s - max). */
export function sample(scores, generator) {
  let max = -Infinity;
  for (const v of scores) if (v > max) max = v;
  return draw(Float64Array.from(scores, (v) => Math.exp(v - max)), generator);
}

/**
 * One id from non-negative weights `probs` (unnormalised; Python's `draw`): the first id whose running sum exceeds
 * u * sum (the last id with a weight above 0 when rounding leaves none). Speculative sampling draws from a draft's
 * q and a residual with it (decode/speculative_sampling.mjs).
 */
export function draw(probs, generator) {
  const running = new Float64Array(probs.length);
  let sum = 0;
  probs.forEach((v, t) => { sum += v; running[t] = sum; }); // np.cumsum: sequential
  const target = generator.uniform() * sum;
  const hit = running.findIndex((r) => r > target);
  if (hit >= 0) return hit;
  for (let t = probs.length - 1; t >= 0; t--) if (probs[t] > 0) return t;
  return probs.length - 1;
}

export { sample as sampleToken }; // its first name
