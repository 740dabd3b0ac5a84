// How a speculative step reads the model's own ids after a draft (decode/speculative.mjs): the port of
// tfm_export/runtime/decode/checking.py's ArgmaxCheck, decode/strategies.mjs's Greedy picking: the argmax
// under the model's suppress_ids at every position the step fed (states/growing.mjs's positionIds), and
// forcedBosTokenId in place of the first step's argmax; and ProcessorCheck, decode/strategies.mjs's TokenPicker
// greedy picking (repetitionPenalty, noRepeatNgramSize, minNewTokens, forcedEos, the bans: decode/processors.mjs),
// each position processed with the history extended by the draft before it (what plain decoding would have fed
// by then), up to the first position whose pick differs from the draft. The draft is accepted while it equals
// these picks, so the ids are the core strategy's, whatever was drafted.
// No globals beyond ECMAScript: the browser page may import this file too.
import { argmax, logProbAt, processRow } from './processors.mjs';

/** Greedy's picks (Python's ArgmaxCheck). `config`: the manifest's model config; `forcedBos`: the forced first id. */
export class ArgmaxCheck {
  constructor(config, forcedBos = null) {
    Object.assign(this, { eosId: config.eos_id, forcedBos, banned: config.suppress_ids ?? [] });
  }

  /** The id forced after `step` generated ids without reading the model (null: it reads it). */
  forced(step) {
    return step === 0 ? this.forcedBos : null;
  }

  /** The model's id after history + draft[:i] for every i; `state` was just fed the draft (one row). */
  picks(state, history, draft) {
    // the last draft.length + 1 positions: the state may have been fed more (a forced id before the draft)
    return draft.length ? state.positionIds(this.banned)[0].slice(-draft.length - 1) : [state.nextIds()[0]];
  }

  keep() {}
}

/**
 * TokenPicker's greedy picks (Python's ProcessorCheck): the argmax of the processed scores at each position.
 * `config`: the decode's options (greedy: numBeams 1, no sampling); `steps`: its budget (forced EOS comes at the
 * last); `c`: the manifest's model config (its eos_id and suppress_ids); `processors`: a caller's LogitsProcessors
 * after the generic ones (Whisper's rules: speech/assisted.mjs). The state fetched the logits of every position it
 * was fed; `first` keeps the first call's (the prompt's positions too: Whisper's <|nospeech|>).
 */
export class ProcessorCheck {
  constructor(config, steps, c, { processors = [] } = {}) {
    Object.assign(this, { config, steps, processors, eosId: c.eos_id, banned: c.suppress_ids ?? [], first: null });
    this.score = 0; // TokenPicker's: the sum of log_softmax(processed scores) at every kept id, EOS included
    this.pending = []; // the last picks' log-probabilities
  }

  forced() {
    return null; // processRow forces forcedBosTokenId and forced EOS itself, as in TokenPicker's scores
  }

  picks(state, history, draft, step) {
    const { data, vocab } = state.positionLogits(); // one row: (fed, vocab), the last draft.length + 1 checked
    this.first ??= { data, vocab };
    const fed = data.length / vocab;
    const out = [];
    this.pending = [];
    for (let i = 0; i <= draft.length; i++) {
      const at = (fed - draft.length - 1 + i) * vocab;
      const seen = [...history, ...draft.slice(0, i)]; // what plain decoding fed by then
      const scores = processRow(Float64Array.from(data.subarray(at, at + vocab)), seen, step + i, this.steps - 1,
        this.config, this.eosId, this.banned, this.processors);
      const pick = argmax(scores);
      out.push(pick);
      this.pending.push(logProbAt(scores, pick));
      if (i === draft.length || pick !== draft[i] || pick === this.eosId) break;
    }
    return out;
  }

  /** The step emitted its first `count` picks: their log-probabilities join the score. */
  keep(count) {
    for (const logProb of this.pending.slice(0, count)) this.score += logProb;
  }
}
