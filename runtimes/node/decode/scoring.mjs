// CTranslate2's `score_batch`: the log-probabilities of given target sequences, teacher-forced. The port of
// tfm_export/runtime/decode/scoring.py: each target (ids without the decoder start; EOS appended, as CTranslate2
// and transformers' labels have it) is fed one token a step after the decoder start, every row at once, and each
// step reads the model's log_softmax at the row's next target token. A row shorter than the batch's longest is fed
// padding after its EOS, which a causal decoder's earlier positions never see. No processor runs (the model's raw
// distribution). `TeacherForced` is a decode/loop.mjs strategy, so scoring runs under the one loop.
// No globals beyond ECMAScript: the browser page may import this file.
import { logProbAt } from './processors.mjs';

export const SCORE_BATCH = 32; // targets scored together: Python's SCORE_BATCH

/** Feeds each row's target (each with EOS) and keeps the log-probability of every token. */
export class TeacherForced {
  constructor(targets, bosId, padId) {
    this.targets = targets.map((t) => [...t]);
    Object.assign(this, { rows: this.targets.length, bosId, padId, reads: 'logits', step: 0 });
    this.width = Math.max(0, ...this.targets.map((t) => t.length));
    this.logProbs = this.targets.map(() => []);
    this.finished = this.width === 0;
  }

  advance(state) {
    const { data, vocab } = state.logits();
    const ids = this.targets.map((t, r) => {
      const token = this.step < t.length ? t[this.step] : this.padId;
      if (this.step < t.length) this.logProbs[r].push(logProbAt(data.subarray(r * vocab, (r + 1) * vocab), token));
      return token; // the next input: the target itself
    });
    this.step += 1;
    this.finished = this.step === this.width;
    return { ids, beamIdx: null };
  }

  /** Per target { tokens, logProbs, score (their sum), normalizedScore (their mean) }: Python's ScoreResult. */
  results() {
    return this.targets.map((tokens, r) => {
      const logProbs = this.logProbs[r];
      const score = logProbs.reduce((a, b) => a + b, 0);
      return { tokens, logProbs, score, normalizedScore: score / logProbs.length };
    });
  }
}

/** The targets with EOS, checked against the vocabulary and `limit` tokens (Python's `score` checks). */
export function scoredTargets(targets, config, limit) {
  return targets.map((target, i) => {
    const full = [...target, config.eos_id];
    if (full.length > limit) {
      throw new Error(`target ${i + 1} has ${full.length} tokens with EOS, more than the model's limit of ${limit}`);
    }
    if (full.some((id) => !Number.isInteger(id) || id < 0 || id >= config.tgt_vocab_size)) {
      throw new Error(`target ${i + 1} has an id out of range for a vocabulary of ${config.tgt_vocab_size} ids`);
    }
    return full;
  });
}
